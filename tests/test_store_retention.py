"""Retention: prune by age and size deletes whole conversations with every row and index entry."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from contextengine.store import ContextRef, NewSummary, SQLiteStore
from contextengine.store.retention import parse_duration, parse_size
from store_factories import FakeClock

DAY = 86_400.0
TABLES = [
    "messages",
    "summaries",
    "summary_sources",
    "context_items",
    "large_contents",
    "search_index",
    "index_pending",
]


def fill(store: SQLiteStore, key: str, n: int = 6) -> str:
    cid = store.open_conversation(key)
    msgs = store.append_messages(
        cid, [{"role": "user", "content": f"{key} message {i} " + "x" * 100} for i in range(n)]
    )
    store.commit_compaction(
        cid,
        [
            NewSummary(
                kind="leaf",
                depth=0,
                content=f"{key} summary",
                token_count=2,
                source_ids=[m.id for m in msgs[:3]],
                seq_start=0,
                seq_end=2,
                time_start=0.0,
                time_end=0.0,
                descendant_count=3,
            )
        ],
        [
            ContextRef(kind="summary", id="new:0"),
            *(ContextRef(kind="message", id=m.id) for m in msgs[3:]),
        ],
    )
    store.put_large_content(cid, msgs[-1].id, "big " * 1000, 1000)
    return cid


def counts(path: Path, cid: str | None = None) -> dict[str, int]:
    """Raw row counts per table, straight from the file (optionally for one conversation)."""
    db = sqlite3.connect(path)
    try:
        out = {}
        for table in TABLES:
            if table in ("search_index", "index_pending") and cid is not None:
                continue  # the index has no conversation column; compared in total instead
            if cid is None:
                out[table] = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            else:
                out[table] = db.execute(
                    f"SELECT COUNT(*) FROM {table} WHERE conversation_id = ?", (cid,)
                ).fetchone()[0]
        return out
    finally:
        db.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "archive.db"


def test_prune_by_age_deletes_old_conversations_with_all_their_rows(
    path: Path, clock: FakeClock
) -> None:
    with SQLiteStore(path, clock=clock) as store:
        old = fill(store, "old")
        clock.now += 40 * DAY
        new = fill(store, "new")
        before = counts(path)
        assert store.prune(older_than_s=30 * DAY) == 1
        assert [c.id for c in store.list_conversations()] == [new]
    assert all(v == 0 for v in counts(path, old).values())
    after = counts(path)
    # Every message is indexed or waiting to be (the store indexes what waits when it closes).
    indexed = before["search_index"] + before["index_pending"]
    assert after["search_index"] + after["index_pending"] == indexed // 2
    assert counts(path, new)["messages"] == 6 and counts(path, new)["summary_sources"] == 3


def test_prune_keeps_recently_updated_conversations(path: Path, clock: FakeClock) -> None:
    with SQLiteStore(path, clock=clock) as store:
        cid = fill(store, "a")
        clock.now += 40 * DAY
        store.append_messages(cid, [{"role": "user", "content": "still here"}])
        assert store.prune(older_than_s=30 * DAY) == 0
        assert store.message_count(cid) == 7


def test_size_cap_deletes_least_recently_updated_first(path: Path, clock: FakeClock) -> None:
    with SQLiteStore(path, clock=clock) as store:
        ids = []
        for key in ("first", "second", "third"):
            ids.append(fill(store, key))
            clock.now += DAY
        sizes = {c.id: c.bytes for c in store.list_conversations()}
        assert store.prune(max_bytes=sizes[ids[2]] + sizes[ids[1]]) == 1
        assert [c.id for c in store.list_conversations()] == ids[1:]
        assert store.prune(max_bytes=0) == 2
        assert store.stats()["index_rows"] == 0


def test_vacuum_shrinks_the_file_after_prune(path: Path, clock: FakeClock) -> None:
    with SQLiteStore(path, clock=clock) as store:
        for i in range(5):
            fill(store, f"c{i}", n=200)
        big = store.stats()["file_bytes"]
        store.prune(max_bytes=0)
        store.vacuum()
        assert store.stats()["file_bytes"] < big / 2


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30d", 30 * DAY, id="days"),
        pytest.param("12h", 12 * 3600.0, id="hours"),
        pytest.param("90m", 90 * 60.0, id="minutes"),
        pytest.param("2w", 14 * DAY, id="weeks"),
        pytest.param("45", 45.0, id="bare-seconds"),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"),
    [
        pytest.param("500MB", 500_000_000, id="mb"),
        pytest.param("2GB", 2_000_000_000, id="gb"),
        pytest.param("1GiB", 1024**3, id="gib"),
        pytest.param("100k", 100_000, id="k"),
        pytest.param("123", 123, id="bytes"),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "bad", [pytest.param("soon", id="word"), pytest.param("-3d", id="negative")]
)
def test_bad_durations_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)
