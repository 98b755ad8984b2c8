"""``SQLiteStore(path, read_only=True)``: reads an archive without creating or changing anything."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextengine.errors import StoreError
from contextengine.store import SQLiteStore, open_store
from contextengine.store.sqlite import PENDING_MESSAGES


def turn(i: int) -> list[dict[str, Any]]:
    words = "ledger kiwi" if i % 3 else "ledger mango"
    return [
        {"role": "user", "content": f"question {i} about the {words} number{i}"},
        {"role": "assistant", "content": f"answer {i}: the {words} is balanced at {i * 7}"},
    ]


def files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def fill(path: Path, *, indexed: int, waiting: int) -> tuple[SQLiteStore, str]:
    """An open writer whose archive holds ``indexed`` turns indexed and ``waiting`` turns not."""
    assert 2 * waiting < PENDING_MESSAGES
    writer = SQLiteStore(path)
    cid = writer.open_conversation("s")
    history = [m for i in range(indexed) for m in turn(i)]
    writer.import_messages(cid, history, start_seq=0)  # the bulk path indexes as it stores
    for i in range(indexed, indexed + waiting):
        writer.append_messages(cid, turn(i), start_seq=2 * i)
    long = {"role": "tool", "tool_call_id": "c", "content": "filler words " * 900 + "needle-at-end"}
    writer.append_messages(cid, [long], start_seq=2 * (indexed + waiting))
    assert writer.stats()["index_pending"] == 2 * waiting + 1
    return writer, cid


def die(writer: SQLiteStore) -> None:
    """The writer's process ends without its closing flush: the rows stay waiting in the file."""
    writer._db.close()


def every_page(store: SQLiteStore, cid: str, query: str, mode: str) -> list[tuple[Any, ...]]:
    """Every hit of a search, following cursors with small pages."""
    found: list[tuple[Any, ...]] = []
    cursor = None
    while True:
        page = store.search(cid, query, mode=mode, limit=3, cursor=cursor)  # type: ignore[arg-type]
        found += [
            (h.id, h.seq, h.snippet, h.context, round(h.score, 9), h.summary_id)
            for h in page.results
        ]
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


QUERIES = [
    pytest.param("ledger", "text", id="common-word"),
    pytest.param("mango balanced", "text", id="two-words"),
    pytest.param("number13", "text", id="word-only-waiting"),
    pytest.param('"ledger kiwi"', "text", id="phrase"),
    pytest.param("needle", "text", id="late-segment"),
    pytest.param(r"number1\d\b", "regex", id="regex"),
    pytest.param(r"needle-at-end$", "regex", id="regex-late-segment"),
]


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[tuple[Path, str, SQLiteStore]]:
    writer, cid = fill(tmp_path / "a.db", indexed=12, waiting=6)
    yield tmp_path / "a.db", cid, writer
    writer.close()


@pytest.mark.parametrize(("query", "mode"), QUERIES)
def test_a_read_only_search_finds_waiting_messages_as_a_flushed_archive_does(
    archive: tuple[Path, str, SQLiteStore], query: str, mode: str
) -> None:
    path, cid, writer = archive
    # The writer is still running: its rows are in the write-ahead log.
    with SQLiteStore(path, read_only=True) as reader:
        waiting = every_page(reader, cid, query, mode)
        assert reader.stats()["index_pending"] == 13  # nothing was indexed by reading
    writer.flush_index()
    assert waiting == every_page(writer, cid, query, mode)
    assert waiting  # every query finds something


def test_waiting_rows_in_a_file_without_write_ahead_log_are_searched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    writer, cid = fill(path, indexed=3, waiting=2)
    die(writer)
    assert files(tmp_path) == {"a.db"}
    with SQLiteStore(path, read_only=True) as reader:
        assert [h.seq for h in reader.search(cid, "number4").results][:1] == [8]
        assert [h.seq for h in reader.search(cid, r"needle", mode="regex").results] == [10]
    assert files(tmp_path) == {"a.db"}  # no -wal, no -shm


def test_nothing_is_created_for_a_missing_archive(tmp_path: Path) -> None:
    for path in (tmp_path / "nosuch.db", tmp_path / "no" / "folder" / "x.db"):
        with pytest.raises(StoreError, match=f"no archive at {path}"):
            open_store(path, read_only=True)
    with pytest.raises(StoreError, match="no archive at"):
        open_store(f"sqlite:///{tmp_path}/url.db", read_only=True)
    assert files(tmp_path) == set()


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writable"])
def test_a_file_that_is_not_an_archive_is_one_clear_error(tmp_path: Path, read_only: bool) -> None:
    text = tmp_path / "notadb.txt"
    text.write_text("just some notes\n" * 200)
    with pytest.raises(StoreError, match=r"notadb.txt is not a contextengine archive"):
        SQLiteStore(text, read_only=read_only)
    assert text.read_text() == "just some notes\n" * 200
    with pytest.raises(StoreError, match="is a folder"):
        SQLiteStore(tmp_path, read_only=True)


def test_another_applications_database_is_refused_not_migrated(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    for read_only in (True, False):
        with pytest.raises(StoreError, match="SQLite database but not a contextengine archive"):
            SQLiteStore(path, read_only=read_only)
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert tables == {"users"}


def _set_version(path: Path, version: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM schema_version WHERE version > ?", (version,))
        if version < 5:
            db.execute("DROP TABLE conversation_links")  # what migration 5 added
            db.execute("DROP TABLE session_aliases")
        if version < 4:
            db.execute("DROP TABLE index_pending")  # what migration 4 added
        if version > 5:
            db.execute("INSERT INTO schema_version VALUES (?, 'from the future', 0)", (version,))
    db.close()


def test_a_newer_schema_is_refused_with_its_version(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    SQLiteStore(path).close()
    _set_version(path, 9)
    for read_only in (True, False):
        with pytest.raises(StoreError, match="schema version 9, newer than this contextengine"):
            SQLiteStore(path, read_only=read_only)


def test_an_older_schema_is_not_migrated_by_a_read(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    SQLiteStore(path).close()
    _set_version(path, 3)
    with pytest.raises(StoreError, match=r"schema version 3 .*open it once writable"):
        SQLiteStore(path, read_only=True)
    with SQLiteStore(path) as store:  # opened writable, it is migrated
        assert store.stats()["schema_version"] == 5


def test_writes_to_a_read_only_store_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    writer, cid = fill(path, indexed=1, waiting=1)
    writer.close()
    with SQLiteStore(path, read_only=True) as reader:
        for write in (
            lambda: reader.open_conversation("new"),
            lambda: reader.append_messages(cid, turn(9)),
            lambda: reader.import_messages(cid, turn(9)),
            lambda: reader.prune(older_than_s=0),
            reader.vacuum,
        ):
            with pytest.raises(StoreError, match="open read-only"):
                write()
        assert reader.flush_index() == 0
        reader.sync()  # nothing to make durable
    assert files(tmp_path) == {"a.db"}


def test_a_crashed_writers_log_is_read_from_a_read_only_copy(tmp_path: Path) -> None:
    # The files a writer leaves when it is killed: its -wal and -shm hold the newest rows.
    live = tmp_path / "live"
    live.mkdir()
    writer, cid = fill(live / "a.db", indexed=1, waiting=1)
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    for suffix in ("", "-wal", "-shm"):
        shutil.copy(f"{live / 'a.db'}{suffix}", f"{frozen / 'a.db'}{suffix}")
    writer.close()
    assert os.path.getsize(frozen / "a.db-wal") > 0
    with SQLiteStore(frozen / "a.db", read_only=True) as reader:
        assert reader.message_count(cid) == 5
        assert reader.search(cid, "number1").results[0].seq == 2
    assert files(frozen) == {"a.db", "a.db-wal", "a.db-shm"}


def test_an_in_memory_archive_cannot_be_read_only() -> None:
    with pytest.raises(StoreError, match="in-memory"):
        open_store(":memory:", read_only=True)
