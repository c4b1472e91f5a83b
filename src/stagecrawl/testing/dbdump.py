"""A synthetic crates.io database dump with the real layout, for tests, bench and demo.

Layout as crates.io publishes it: `YYYY-MM-DD-HHMMSS/metadata.json`, `schema.sql` and
`data/*.csv` (PostgreSQL CSV: `t`/`f` booleans, `{a,b}` arrays, `\\x…` bytea). Written
streaming, so a million versions cost disk, not memory.
"""

from __future__ import annotations

import csv
import hashlib
import json
import tarfile
import tempfile
from pathlib import Path

FOLDER = "2026-12-01-020000"
CRATE_COLUMNS = [
    "id",
    "name",
    "updated_at",
    "created_at",
    "description",
    "homepage",
    "documentation",
    "readme",
    "repository",
    "max_upload_size",
    "max_features",
]
VERSION_COLUMNS = [
    "id",
    "crate_id",
    "num",
    "updated_at",
    "created_at",
    "downloads",
    "features",
    "yanked",
    "license",
    "crate_size",
    "published_by",
    "links",
    "rust_version",
    "has_lib",
    "bin_names",
    "yank_message",
    "edition",
]
DEP_COLUMNS = [
    "id",
    "version_id",
    "crate_id",
    "req",
    "optional",
    "default_features",
    "features",
    "target",
    "kind",
    "explicit_name",
]


def build_dump(path: Path, crates: int, versions_per: int, binary_checksum: bool = True) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)

        def table(name: str, columns: list[str]) -> tuple[object, csv.DictWriter[str]]:
            handle = open(data / f"{name}.csv", "w", newline="")  # noqa: SIM115
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            return handle, writer

        checksum_column = "tar_sha256" if binary_checksum else "checksum"
        files = {
            "crates": table("crates", CRATE_COLUMNS),
            "versions": table("versions", [*VERSION_COLUMNS, checksum_column]),
            "dependencies": table("dependencies", DEP_COLUMNS),
            "crate_downloads": table("crate_downloads", ["crate_id", "downloads"]),
            "keywords": table("keywords", ["id", "keyword", "crates_cnt", "created_at"]),
            "crates_keywords": table("crates_keywords", ["crate_id", "keyword_id"]),
            "categories": table(
                "categories",
                ["id", "category", "slug", "description", "crates_cnt", "created_at", "path"],
            ),
            "crates_categories": table("crates_categories", ["crate_id", "category_id"]),
        }
        w = {name: writer for name, (_, writer) in files.items()}
        w["keywords"].writerow(
            {"id": 1, "keyword": "parser", "crates_cnt": 1, "created_at": "2017-01-01 00:00:00"}
        )
        w["categories"].writerow(
            {
                "id": 1,
                "category": "Encoding",
                "slug": "encoding",
                "description": "",
                "crates_cnt": 1,
                "created_at": "2017-01-01 00:00:00",
                "path": "encoding",
            }
        )
        version_id = dep_id = 0
        for c in range(1, crates + 1):
            name = f"dump_crate_{c:06d}" if c % 2 else f"dump-crate-{c:06d}"
            w["crates"].writerow(
                {
                    "id": c,
                    "name": name,
                    "updated_at": "2024-01-01 00:00:00",
                    "created_at": "2020-01-01 00:00:00",
                    "description": f"crate {c}",
                    "homepage": "",
                    "documentation": f"https://docs.rs/{name}",
                    "readme": "",
                    "repository": f"https://example.org/{name}",
                    "max_upload_size": "",
                    "max_features": "",
                }
            )
            w["crate_downloads"].writerow({"crate_id": c, "downloads": c * 10})
            if c % 3 == 0:
                w["crates_keywords"].writerow({"crate_id": c, "keyword_id": 1})
                w["crates_categories"].writerow({"crate_id": c, "category_id": 1})
            for v in range(versions_per):
                version_id += 1
                num = f"{v // 10}.{v % 10}.0" + ("-beta.1" if v == versions_per - 1 else "")
                digest = hashlib.sha256(f"{name}{num}".encode()).hexdigest()
                w["versions"].writerow(
                    {
                        "id": version_id,
                        "crate_id": c,
                        "num": num,
                        "updated_at": "2024-01-01 00:00:00",
                        "created_at": f"2024-01-{1 + v % 28:02d} 12:00:00.123456",
                        "downloads": v,
                        "features": json.dumps({"std": [], "full": ["std"]}),
                        "yanked": "t" if v == 1 else "f",
                        "license": "MIT/Apache-2.0" if v % 2 else "MIT OR Apache-2.0",
                        "crate_size": 1000,
                        "published_by": "",
                        "links": "",
                        "rust_version": "",
                        "has_lib": "t",
                        "bin_names": "{}",
                        "yank_message": "",
                        "edition": "2021",
                        checksum_column: f"\\x{digest}" if binary_checksum else digest,
                    }
                )
                if c > 1:
                    dep_id += 1
                    w["dependencies"].writerow(
                        {
                            "id": dep_id,
                            "version_id": version_id,
                            "crate_id": c - 1,
                            "req": "^0.1",
                            "optional": "f",
                            "default_features": "t",
                            "features": "{std}",
                            "target": "",
                            "kind": 0,
                            "explicit_name": "renamed" if c % 5 == 0 else "",
                        }
                    )
                    dep_id += 1
                    w["dependencies"].writerow(
                        {
                            "id": dep_id,
                            "version_id": version_id,
                            "crate_id": 1,
                            "req": "^1",
                            "optional": "t",
                            "default_features": "f",
                            "features": "{}",
                            "target": "cfg(unix)",
                            "kind": 2,
                            "explicit_name": "",
                        }
                    )
        for handle, _ in files.values():
            handle.close()  # type: ignore[attr-defined]
        (data / "metadata.json").write_text(
            json.dumps({"timestamp": "2026-12-01T02:00:00Z", "crates_io_commit": "synthetic"})
        )
        (data / "schema.sql").write_text("-- synthetic dump: same tables, fewer columns\n")
        with tarfile.open(path, "w:gz", compresslevel=1) as archive:
            archive.add(data / "metadata.json", f"{FOLDER}/metadata.json")
            archive.add(data / "schema.sql", f"{FOLDER}/schema.sql")
            # versions before crates: the loader must not depend on the entry order
            for name in [
                "versions",
                "dependencies",
                *[n for n in files if n not in ("versions", "dependencies")],
            ]:
                archive.add(data / f"{name}.csv", f"{FOLDER}/data/{name}.csv")
