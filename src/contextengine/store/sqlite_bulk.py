"""The SQLite store's bulk path: ``import_messages`` and ``copy_messages`` write here.

:mod:`contextengine.store.bulk` prepares chunks in a producer thread;
:func:`write_chunks` writes each in one ``BEGIN IMMEDIATE`` transaction of
the store's connection, with the same rows ``append_messages`` writes (the
shared :func:`index_rows`), while :func:`checkpointing` copies the WAL into
the database file from a second connection.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from typing import TYPE_CHECKING, Any

from contextengine.store import _common
from contextengine.store import bulk as _bulk
from contextengine.store.protocol import ContextRef
from contextengine.store.segments import segment_rowid

if TYPE_CHECKING:
    from contextengine.store.sqlite import SQLiteStore

__all__ = ["align", "checkpointing", "index_rows", "write_chunk", "write_chunks"]


def index_rows(
    rowid: int, token: str, segments: Sequence[str], previous: str
) -> list[tuple[int, str, str, str]]:
    """The ``search_index`` rows of one text: segment 0 at ``rowid`` with its context, then more.

    ``rowid`` is the message's rowid or minus the summary's; ``previous`` is the
    text of the message before (only its first :data:`~._common.CONTEXT_CHARS` are kept).
    """
    rows = [(rowid, token, segments[0], previous[: _common.CONTEXT_CHARS])]
    rows += [(segment_rowid(rowid, k), token, text, "") for k, text in enumerate(segments) if k]
    return rows


def align(db: sqlite3.Connection, conversation_id: str, hashes: Sequence[str]) -> int:
    """Where a batch without ``start_seq`` starts (the rule of ``append_messages``)."""
    (count,) = db.execute(
        "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchone()

    def stored_json(lo: int, hi: int) -> list[str]:
        rows = db.execute(
            "SELECT json FROM messages WHERE conversation_id = ? AND seq >= ? AND seq < ?"
            " ORDER BY seq",
            (conversation_id, lo, hi),
        ).fetchall()
        return [r[0] for r in rows]

    return _common.align_batch(stored_json, int(count), hashes)


def write_chunks(
    store: SQLiteStore,
    conversation_id: str,
    token: str,
    chunks: Iterator[list[_bulk.Prepared]],
    *,
    to_context: bool,
) -> int:
    stored = 0
    expected: int | None = None  # the count our chunks left, while the import started empty
    seen: set[str] = set()  # provider-id identities of this import (h: keys hold positions)
    with checkpointing(store):
        for chunk in _bulk.pipelined(chunks):
            count, added = write_chunk(
                store, conversation_id, token, chunk, seen, expected, to_context
            )
            fresh = count == (0 if expected is None else expected)
            expected = count + added if fresh else -1
            stored += added
    return stored


@contextmanager
def checkpointing(store: SQLiteStore) -> Iterator[None]:
    """Checkpoint the WAL from a second connection while a bulk import writes.

    A commit that finds the WAL over its limit copies the pages into the
    database file itself, in the writer's thread: during an import, a third
    of the writer's time. Here a background connection runs ``PASSIVE``
    checkpoints (they never block the writer) and the writer's own are off
    until the import ends. Durability is unchanged: every commit still
    syncs the WAL.
    """
    if store.path == ":memory:":
        yield
        return
    stop = threading.Event()

    def checkpoint() -> None:
        with closing(sqlite3.connect(store.path, timeout=1.0)) as db:
            while not stop.wait(0.05):
                with suppress(sqlite3.Error):
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    thread = threading.Thread(target=checkpoint, name="contextengine-checkpoint", daemon=True)
    with store._lock:
        store._db.execute("PRAGMA wal_autocheckpoint = 0")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with store._lock:
            store._db.execute("PRAGMA wal_autocheckpoint = 1000")


def write_chunk(
    store: SQLiteStore,
    conversation_id: str,
    token: str,
    chunk: list[_bulk.Prepared],
    seen: set[str],
    expected: int | None,
    to_context: bool,
) -> tuple[int, int]:
    """One chunk of the bulk path in one transaction: (messages before it, messages stored)."""
    with store._write() as db:
        (count,) = db.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        # Into a conversation that was empty, no one else writing (the count is
        # what our own chunks left): no stored row can hold these identities.
        existing = (
            set()
            if count == (0 if expected is None else expected)
            else store._existing_keys(db, conversation_id, [p.key for p in chunk])
        )
        (max_rowid,) = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages").fetchone()
        previous = store._last_text(db, conversation_id, count)
        now = store._clock()
        rows: list[tuple[Any, ...]] = []
        fts_rows: list[tuple[int, str, str, str]] = []
        context: list[ContextRef] = []
        for p, seq in _bulk.new_rows(
            chunk, conversation_id, int(count), existing=existing, seen=seen
        ):
            rowid = max_rowid + 1 + len(rows)
            created = now if p.created_at is None else p.created_at
            rows.append(
                (rowid, p.id, conversation_id, seq, p.role, p.json, p.tokens, p.key, created)
            )
            fts_rows += index_rows(rowid, token, p.segments, previous)
            previous = p.segments[0]
            if to_context and not (seq == 0 and p.role == "system"):
                context.append(ContextRef(kind="message", id=p.id))
        if rows:
            db.executemany(
                "INSERT INTO messages (rowid, id, conversation_id, seq, role, json,"
                " token_count, identity_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.executemany(
                "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, ?)",
                fts_rows,
            )
            if context:
                store._insert_context(
                    db, conversation_id, store._context_end(db, conversation_id), context
                )
            db.execute(
                "UPDATE conversations SET updated_at = MAX(updated_at, ?) WHERE id = ?",
                (max(r[8] for r in rows), conversation_id),
            )
    return int(count), len(rows)
