"""Which license a PyPI release declares, in PEP 639's order: `License-Expression` first; else
the free-text `License` field through the same standardisation as every registry (the caller
passes it in: the SCA package's matcher); else the `License ::` trove classifiers mapped to
SPDX ids by the table below.

The table maps a classifier only where it names one SPDX license. Classifiers that name a
family without a version (`BSD License`, `GNU General Public License (GPL)`, `Artistic
License`, `Zope Public License`, `Public Domain`, `Other/Proprietary License` …) map to nothing:
a guess would let a policy pass what it should not. Several license classifiers are joined
with AND (the classifiers do not say whether they are alternatives, and AND is the reading a
policy cannot be fooled by); when any of them does not map, the classifiers give no expression.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

PREFIX = "License :: "
CLASSIFIER_SPDX: dict[str, str] = {
    "OSI Approved :: MIT License": "MIT",
    "OSI Approved :: MIT No Attribution License (MIT-0)": "MIT-0",
    # Every Apache license release since 2004 is 2.0; the classifier predates version names.
    "OSI Approved :: Apache Software License": "Apache-2.0",
    "OSI Approved :: ISC License (ISCL)": "ISC",
    "OSI Approved :: Python Software Foundation License": "PSF-2.0",
    "OSI Approved :: GNU General Public License v2 (GPLv2)": "GPL-2.0-only",
    "OSI Approved :: GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "OSI Approved :: GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "OSI Approved :: GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "OSI Approved :: GNU Lesser General Public License v2 (LGPLv2)": "LGPL-2.0-only",
    "OSI Approved :: GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.0-or-later",
    "OSI Approved :: GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "OSI Approved :: GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "OSI Approved :: GNU Affero General Public License v3": "AGPL-3.0-only",
    "OSI Approved :: GNU Affero General Public License v3 or later (AGPLv3+)": "AGPL-3.0-or-later",
    "OSI Approved :: Mozilla Public License 1.0 (MPL)": "MPL-1.0",
    "OSI Approved :: Mozilla Public License 1.1 (MPL 1.1)": "MPL-1.1",
    "OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "OSI Approved :: Eclipse Public License 1.0 (EPL-1.0)": "EPL-1.0",
    "OSI Approved :: Eclipse Public License 2.0 (EPL-2.0)": "EPL-2.0",
    "OSI Approved :: Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
    "OSI Approved :: zlib/libpng License": "Zlib",
    "OSI Approved :: Universal Permissive License (UPL)": "UPL-1.0",
    "OSI Approved :: European Union Public Licence 1.1 (EUPL 1.1)": "EUPL-1.1",
    "OSI Approved :: European Union Public Licence 1.2 (EUPL 1.2)": "EUPL-1.2",
    "OSI Approved :: Common Development and Distribution License 1.0 (CDDL-1.0)": "CDDL-1.0",
    "OSI Approved :: Historical Permission Notice and Disclaimer (HPND)": "HPND",
    "OSI Approved :: PostgreSQL License": "PostgreSQL",
    "OSI Approved :: Blue Oak Model License (BlueOak-1.0.0)": "BlueOak-1.0.0",
    "OSI Approved :: Zero-Clause BSD (0BSD)": "0BSD",
    "OSI Approved :: Mulan Permissive Software License v2 (MulanPSL-2.0)": "MulanPSL-2.0",
    "OSI Approved :: SIL Open Font License 1.1 (OFL-1.1)": "OFL-1.1",
    "OSI Approved :: W3C License": "W3C",
    "CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
}
# Placeholders that old setuptools wrote when no license was given.
PLACEHOLDERS = frozenset({"", "unknown", "none", "n/a", "other", "license"})


@dataclass(frozen=True)
class DeclaredLicense:
    text: str | None  # what the release says, kept for the LICENSE column
    expression: str | None  # the SPDX expression stagecrawl reads it as
    source: str | None  # license-expression | license | classifiers | None


def classifier_expression(classifiers: Iterable[str]) -> str | None:
    """The SPDX expression the `License ::` classifiers name, or None (see the module doc)."""
    named = [c[len(PREFIX) :].strip() for c in classifiers if c.startswith(PREFIX)]
    if not named:
        return None
    ids = [CLASSIFIER_SPDX.get(c) for c in named]
    if any(i is None for i in ids):
        return None
    unique = sorted({i for i in ids if i is not None})
    return " AND ".join(unique)


def _meaningful(text: str | None) -> str | None:
    if text is None:
        return None
    cleaned = text.strip().strip('"').strip("'").strip()
    return None if cleaned.lower() in PLACEHOLDERS else cleaned


def declared_license(
    license_expression: str | None,
    license_text: str | None,
    classifiers: Iterable[str],
    standardise: Callable[[str], str | None] | None = None,
) -> DeclaredLicense:
    """PEP 639 order: the expression, else the text (standardised), else the classifiers."""
    expression = _meaningful(license_expression)
    if expression is not None:
        normalised = standardise(expression) if standardise else None
        return DeclaredLicense(expression, normalised or expression, "license-expression")
    text = _meaningful(license_text)
    if text is not None and standardise is not None:
        normalised = standardise(text)
        if normalised:
            return DeclaredLicense(license_text, normalised, "license")
    from_classifiers = classifier_expression(classifiers)
    if from_classifiers is not None:
        return DeclaredLicense(license_text, from_classifiers, "classifiers")
    return DeclaredLicense(license_text, None, None)
