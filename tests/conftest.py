from __future__ import annotations

from collections.abc import Iterator

import pytest

from stagecrawl.testing.origin import TestOrigin


@pytest.fixture
def origin() -> Iterator[TestOrigin]:
    server = TestOrigin().start()
    yield server
    server.stop()


@pytest.fixture
def other_origin() -> Iterator[TestOrigin]:
    server = TestOrigin().start()
    yield server
    server.stop()
