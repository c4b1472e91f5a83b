from __future__ import annotations

from collections.abc import Iterator

import pytest

from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.services import shared_fixture, shared_path

PYPI_SHARED = shared_path("pypi")
CONTACT_UA = "stagecrawl-tests/1 (+tests@example.org)"


@pytest.fixture
def pypi() -> Iterator[PyPIOrigin]:
    """The look-alike serving the real PyPI replies of ../shared/fixtures/pypi/ (skipped,
    saying why, where that folder is absent)."""
    server = PyPIOrigin().load_folder(shared_fixture("pypi"))
    server.start()
    yield server
    server.stop()
