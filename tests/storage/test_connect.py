"""Connecting to a server database: a port where nothing answers the way the database should
is one line and exit 2 within the connect timeout, never a hang."""

from __future__ import annotations

import pytest

from tests.cli import stagecrawl
from tests.conftest import SilentServer


@pytest.mark.parametrize(
    "command",
    [["status"], ["crates", "crawl", "serde", "--index-url", "http://127.0.0.1:9/"]],
)
def test_a_mysql_url_to_a_port_that_never_answers_is_one_line(
    silent_server: SilentServer, command: list[str]
) -> None:
    """PyMySQL bounded only the TCP connect: the server's greeting was awaited for ever (the
    subprocess timeout below is only a guard against that hang)."""
    url = f"mysql+pymysql://crawler@127.0.0.1:{silent_server.port}/sca?connect_timeout=1"
    done = stagecrawl(
        *command, "--db", url, env={"STAGECRAWL_CONTACT": "t@example.org"}, timeout=120
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach database" in lines[0], done.stderr
    assert f"no MySQL handshake from 127.0.0.1:{silent_server.port} within 1s" in lines[0]
