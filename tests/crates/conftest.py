from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stagecrawl.settings import Settings
from stagecrawl.testing.origin import TestOrigin
from tests.crates.registry import build_registry


@dataclass
class Registry:
    index: TestOrigin
    api: TestOrigin

    def settings(self, **overrides: float) -> Settings:
        """The run's settings against this registry (fast rates, one retry), as a command
        would resolve them from its flags, with no environment."""
        flags = {
            "index_url": self.index.url + "/",
            "api_url": self.api.url + "/",
            "api_rate": 200.0,
            "index_rate": 500.0,
            **overrides,
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
