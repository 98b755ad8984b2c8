"""The stores the contract suite runs against: add a factory here and every store test runs on it.

Each factory takes a temporary directory and a clock and returns an open store.
The PostgreSQL store (issue 7) adds ``pytest.param(postgres_factory, id="postgres",
marks=pytest.mark.postgres)``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from contextengine.store import SQLiteStore, Store
from pg_support import postgres_factory

StoreFactory = Callable[[Path, Callable[[], float]], Store]


def sqlite_memory(tmp: Path, clock: Callable[[], float]) -> Store:
    return SQLiteStore(":memory:", clock=clock)


def sqlite_file(tmp: Path, clock: Callable[[], float]) -> Store:
    return SQLiteStore(tmp / "archive.db", clock=clock)


STORE_FACTORIES = [
    pytest.param(sqlite_memory, id="sqlite-memory"),
    pytest.param(sqlite_file, id="sqlite-file"),
    pytest.param(postgres_factory, id="postgres", marks=pytest.mark.postgres),
]


class FakeClock:
    """A settable clock for retention tests: ``clock.now += 86400`` moves a day on."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
