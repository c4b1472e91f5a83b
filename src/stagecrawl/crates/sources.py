"""Where crates.io publishes its bulk data: the database dump and the OSV advisories.

Imports nothing: the CLI shows these as option defaults (`crates dbdump --help`, `crates vulns
--help`) without loading the pipelines that read them (issue 20's start-up budget)."""

from __future__ import annotations

DEFAULT_DUMP_URL = "https://static.crates.io/db-dump.tar.gz"
DEFAULT_OSV_URL = "https://osv-vulnerabilities.storage.googleapis.com/crates.io/all.zip"
