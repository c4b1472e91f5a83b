"""A repository's name, as `crates lock` and `pypi lock` store it (REF_TAGS) and as the cache's
folder is named: the last part of its path, never the credentials a URL carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagecrawl.engine.git import GitRepo


@pytest.mark.parametrize(
    ("location", "label"),
    [
        ("https://git.example.invalid/org/app.git?token=S3cr3tTok", "app"),
        ("https://git.example.invalid/org/app?private_token=S3cr3tTok#main", "app"),
        ("https://S3cr3tTok@git.example.invalid/org/app.git/", "app"),
        ("https://git.example.invalid/org/app.git#S3cr3tTok", "app"),
    ],
)
def test_the_name_is_the_path_s_last_part_without_its_secrets(
    location: str, label: str, tmp_path: Path
) -> None:
    repo = GitRepo(location, tmp_path / "cache")
    assert repo.label == label
    assert "S3cr3tTok" not in str(repo.path)
