"""Check that a venv holds every direct dependency at exactly its floor in pyproject.toml.

.ci/run installs the project with uv's `--resolution lowest-direct` into a second venv and runs
this with that venv's python before the tests. uv picks the lowest version of each direct
dependency that installs together with the others; if that is above the floor written in
pyproject.toml (no wheel for this Python, or another floor needs more), the floor is false and
the tests would not be testing it, so this names the dependency and fails.

Hand-written because no tool compares an installed set against the `>=` bounds it came from;
`packaging` (a dependency of pytest, so present in the dev venv) parses the requirements.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

EXTRAS = ("dev",)


def requirements(pyproject: Path) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text("utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in EXTRAS:
        lines += project.get("optional-dependencies", {}).get(extra, [])
    return [Requirement(line) for line in lines]


def floor_of(req: Requirement) -> Version | None:
    floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return max(floors) if floors else None


def main() -> int:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    problems: list[str] = []
    rows: list[tuple[str, str, str]] = []
    for req in requirements(pyproject):
        floor = floor_of(req)
        try:
            installed = Version(version(req.name))
        except PackageNotFoundError:
            problems.append(f"{req.name}: not installed")
            continue
        rows.append((req.name, str(floor) if floor else "-", str(installed)))
        if floor is None:
            problems.append(f"{req}: no `>=` floor in pyproject.toml")
        elif installed != floor:
            problems.append(
                f"{req.name}: the floor is {floor} but the lowest that installs with the others"
                f" is {installed}; raise the floor in pyproject.toml"
            )
    width = max(len(name) for name, _, _ in rows)
    for name, floor_text, installed_text in rows:
        print(f"  {name:<{width}}  floor {floor_text:<10} installed {installed_text}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
