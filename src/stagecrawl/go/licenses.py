"""A module's licenses as pkg.go.dev finds them: the LICENSE-like files at the root of the module
zip (pkgsite's list of names, compared case-insensitively), each classified by licenseclassifier
(a pure-Python port of google/licensecheck, the matcher pkgsite uses, with its 75 % coverage
threshold). docs/go.md says why this matcher. The ids become one SPDX `AND` expression, which
the kernel standardises like every registry's LICENSE."""

from __future__ import annotations

import zipfile
from pathlib import Path

from licenseclassifier import identify_license

FILE_NAMES = frozenset(
    name.lower()
    for name in (
        "COPYING", "COPYING.md", "COPYING.markdown", "COPYING.txt", "LICENCE", "LICENCE.md",
        "LICENCE.markdown", "LICENCE.txt", "LICENSE", "LICENSE.md", "LICENSE.markdown",
        "LICENSE.txt", "LICENSE-2.0.txt", "LICENCE-2.0.txt", "LICENSE-APACHE", "LICENCE-APACHE",
        "LICENSE-APACHE-2.0.txt", "LICENCE-APACHE-2.0.txt", "LICENSE-MIT", "LICENCE-MIT",
        "LICENSE.MIT", "LICENCE.MIT", "LICENSE.code", "LICENCE.code", "LICENSE.docs",
        "LICENCE.docs", "LICENSE.rst", "LICENCE.rst", "MIT-LICENSE", "MIT-LICENCE",
        "MIT-LICENSE.md", "MIT-LICENCE.md", "MIT-LICENSE.markdown", "MIT-LICENCE.markdown",
        "MIT-LICENSE.txt", "MIT-LICENCE.txt", "MIT_LICENSE", "MIT_LICENCE", "UNLICENSE",
        "UNLICENCE",
    )
)  # fmt: skip
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
