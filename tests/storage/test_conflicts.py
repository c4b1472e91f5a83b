"""A transaction rolled back by a deadlock is done again, whole; other errors are not."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from stagecrawl.storage.db import is_conflict, retry_conflicts
from tests.services import MARIADB_URL, POSTGRES_URL


def _real_deadlock(url: str) -> DBAPIError:
    """Two transactions that lock two rows in opposite orders: the server rolls one back."""
    engine = create_engine(url)
    quote = "`" if url.startswith("mysql") else '"'
    table = f"{quote}T_STAGECRAWL_DEADLOCK{quote}"
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        conn.execute(text(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v INTEGER)"))
        conn.execute(text(f"INSERT INTO {table} VALUES (1, 0), (2, 0)"))
    errors: list[DBAPIError] = []
    first, second = engine.connect(), engine.connect()

    def run(conn: object, rows: tuple[int, int], pause: threading.Event) -> None:
        assert hasattr(conn, "execute")
        try:
            with conn.begin():  # type: ignore[attr-defined]
                conn.execute(text(f"UPDATE {table} SET v = v + 1 WHERE id = {rows[0]}"))
                pause.set()
                time.sleep(0.3)  # both hold their first row before asking for the second
                conn.execute(text(f"UPDATE {table} SET v = v + 1 WHERE id = {rows[1]}"))
        except DBAPIError as exc:
            errors.append(exc)

    ready = [threading.Event(), threading.Event()]
    threads = [
        threading.Thread(target=run, args=(first, (1, 2), ready[0])),
        threading.Thread(target=run, args=(second, (2, 1), ready[1])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    first.close()
    second.close()
    with engine.begin() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
    engine.dispose()
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("url", [MARIADB_URL, POSTGRES_URL], ids=["mariadb", "postgresql"])
def test_a_deadlock_is_a_conflict_and_the_transaction_is_done_again(url: str) -> None:
    deadlock = _real_deadlock(url)
    assert is_conflict(deadlock)
    attempts: list[int] = []

    def transaction() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise deadlock
        return "written"

    assert retry_conflicts(transaction) == "written"
    assert len(attempts) == 3

    attempts.clear()
    with pytest.raises(DBAPIError):
        retry_conflicts(transaction, attempts=2)  # bounded: the last conflict is raised


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def transaction() -> None:
        calls.append(1)
        raise IntegrityError("INSERT", {}, Exception(1062, "Duplicate entry"))

    with pytest.raises(IntegrityError):
        retry_conflicts(transaction)
    assert calls == [1]
