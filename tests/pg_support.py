"""Reaching the PostgreSQL server the Postgres tests run against, and cleaning up after them.

The server is named by ``CONTEXTENGINE_TEST_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``). When it cannot be reached the
tests skip with a reason that says how to point them at one, unless
``CONTEXTENGINE_REQUIRE_PG=1`` (set by CI), in which case they fail.

Every store a test opens lives in its own schema ``ce_test_<pid>_<n>``,
dropped when the test ends, so tests never see each other's rows and the
database is left as it was found.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "PG_URL",
    "drop_schema",
    "fresh_schema",
    "pg_store",
    "postgres_factory",
    "require_pg",
]

PG_URL = os.environ.get("CONTEXTENGINE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
_REQUIRED = os.environ.get("CONTEXTENGINE_REQUIRE_PG", "") not in ("", "0")
_counter = itertools.count()
#: Schemas this process created and has not dropped yet (dropped at exit if a test crashed).
_created: set[str] = set()


@functools.lru_cache(maxsize=1)
def _unreachable_reason() -> str | None:
    """Why the test server cannot be used, or None when it can (checked once per process)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed: pip install 'contextengine[postgres]'"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL server at {PG_URL} ({str(exc).strip().splitlines()[0]})"
    return None


def require_pg() -> str:
    """The test server's URL; skips the test (fails it in CI) when no server is reachable."""
    reason = _unreachable_reason()
    if reason is None:
        return PG_URL
    hint = (
        f"{reason}. Point the tests at a server with CONTEXTENGINE_TEST_PG_URL="
        "postgresql://user@host:port/db (the user needs CREATE on the database)"
    )
    if _REQUIRED:
        pytest.fail(f"CONTEXTENGINE_REQUIRE_PG=1 but {hint}", pytrace=False)
    pytest.skip(hint)


def fresh_schema() -> str:
    """A schema name no other test (or test process) uses; dropped at exit at the latest."""
    schema = f"ce_test_{os.getpid()}_{next(_counter)}"
    _created.add(schema)
    return schema


@atexit.register
def _drop_leftovers() -> None:
    for schema in sorted(_created):
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            drop_schema(schema)


def drop_schema(schema: str) -> None:
    """Drop ``schema`` with everything in it (a test's cleanup)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    _created.discard(schema)


#: Migrated schemas emptied by a closed contract-suite store, ready for the next test.
_clean: list[str] = []


def _empty_schema(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        # DELETE, not TRUNCATE: for a few rows it beats new files for six tables and indexes.
        conn.execute("DELETE FROM conversations")


def postgres_factory(tmp: Path, clock: Callable[[], float]) -> Any:
    """The contract suite's factory: a ``PostgresStore`` in an empty schema of its own.

    ``close()`` empties the schema and hands it to the next test (migrating a
    fresh schema per test would cost a third of a second each); the schemas
    are dropped when the test process exits.
    """
    url = require_pg()
    from contextengine.store.postgres import PostgresStore

    class ThrowawayPostgresStore(PostgresStore):
        def close(self) -> None:
            super().close()
            _empty_schema(self.schema)
            _clean.append(self.schema)

    schema = _clean.pop() if _clean else fresh_schema()
    return ThrowawayPostgresStore(url, schema=schema, clock=clock)


@contextmanager
def pg_store(**options: Any) -> Iterator[Any]:
    """A ``PostgresStore`` in a fresh schema, closed and dropped afterwards."""
    url = require_pg()
    from contextengine.store.postgres import PostgresStore

    schema = options.pop("schema", None) or fresh_schema()
    try:
        store = PostgresStore(url, schema=schema, **options)
        try:
            yield store
        finally:
            store.close()
    finally:
        drop_schema(schema)
