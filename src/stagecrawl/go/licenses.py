"""A module's licenses as pkg.go.dev finds them: the LICENSE-like files at the root of the module
zip (pkgsite's list of names, compared case-insensitively), each classified by licenseclassifier
(a pure-Python port of google/licensecheck, the matcher pkgsite uses, with its 75 % coverage
threshold). docs/go.md says why this matcher. The ids become one SPDX `AND` expression, which
the kernel standardises like every registry's LICENSE."""

from __future__ import annotations

import zipfile
from pathlib import Path

from licenseclassifier import identify_license

_SPELLINGS, _ENDS = ("LICENSE", "LICENCE"), ("", ".md", ".markdown", ".txt")
_OTHER_ENDS = ("-2.0.txt", "-APACHE", "-APACHE-2.0.txt", "-MIT", ".MIT", ".code", ".docs", ".rst")
# pkgsite's list (internal/licenses): COPYING, LICENSE and MIT-LICENSE with the usual endings,
# LICENSE's own (-APACHE, .rst …), MIT_LICENSE, UNLICENSE; either spelling of LICENSE
FILE_NAMES = frozenset(
    name.lower()
    for name in (
        *(f"COPYING{end}" for end in _ENDS),
        *(f"{pre}{s}{end}" for s in _SPELLINGS for pre in ("", "MIT-") for end in _ENDS),
        *(f"{s}{end}" for s in _SPELLINGS for end in _OTHER_ENDS),
        *(f"{pre}{s}" for s in _SPELLINGS for pre in ("MIT_", "UN")),
    )
)
LICENSE_FILE_MAX = 1 << 20  # a larger "LICENSE" is not one


def zip_licenses(archive: Path, prefix: str) -> str | None:
    """The SPDX ids of the license files at the module root (`path@version/` in the zip), as
    one `AND` expression; None when none is recognised."""
    found: set[str] = set()
    with zipfile.ZipFile(archive) as zipped:
        for entry in zipped.infolist():
            name = entry.filename
            if not name.startswith(prefix) or "/" in name[len(prefix) :]:
                continue
            if name[len(prefix) :].lower() in FILE_NAMES and entry.file_size <= LICENSE_FILE_MAX:
                text = zipped.read(entry).decode("utf-8", errors="replace")
                found.update(match.id for match in identify_license(text))
    return " AND ".join(sorted(found)) or None
