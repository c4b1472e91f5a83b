from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stagecrawl.settings import Settings
from stagecrawl.testing.origin import TestOrigin
from tests.crates.registry import build_registry


def crates_setting(name: str) -> str:
    """A setting's name in the table: crates.io's own lanes are its section's."""
    from stagecrawl.settings import BY_NAME

    return f"crates.{name}" if f"crates.{name}" in BY_NAME else name


@dataclass
class Registry:
    index: TestOrigin
    api: TestOrigin

    def settings(self, **overrides: float) -> Settings:
        """The run's settings against this registry (fast rates, one retry), as a command
        would resolve them from its flags, with no environment."""
        flags = {
            "crates.index_url": self.index.url + "/",
            "crates.api_url": self.api.url + "/",
            "crates.api_rate": 200.0,
            "crates.index_rate": 500.0,
            **{crates_setting(k): v for k, v in overrides.items()},
        }
        return Settings.resolve(flags, {"STAGECRAWL_RETRIES": "1"})


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    index_root, api_root = build_registry(tmp_path / "registry")
    index = TestOrigin(index_root).start()
    api = TestOrigin(api_root).start()
    yield Registry(index, api)
    index.stop()
    api.stop()
