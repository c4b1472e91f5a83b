from __future__ import annotations

from collections.abc import Iterator

import pytest

from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.services import SHARED

PYPI_SHARED = SHARED / "fixtures" / "pypi"
CONTACT_UA = "stagecrawl-tests/1 (+tests@example.org)"


@pytest.fixture
def pypi() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin().load_fixtures().start()
    yield server
    server.stop()
