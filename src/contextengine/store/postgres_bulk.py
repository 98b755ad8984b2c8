"""The PostgreSQL store's bulk path (``import_messages``, ``copy_messages``) and index rows.

:mod:`contextengine.store.bulk` prepares chunks in a producer thread, where
:func:`index_data` also computes each message's ``tsv``; :func:`write_chunks`
writes each chunk in one transaction under the conversation's row lock, with
one ``COPY`` (:func:`copy_rows`). :func:`insert_segments` and
:func:`segment_rows` write the later segments of long texts, for the
per-turn path as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from contextengine.store import _common
from contextengine.store import bulk as _bulk
from contextengine.store._common import CONTEXT_CHARS
from contextengine.store.postgres_text import tsvector
from contextengine.store.protocol import ContextRef

if TYPE_CHECKING:
    from contextengine.store.postgres import PostgresStore

__all__ = [
    "copy_rows",
    "identity_start",
    "index_data",
    "insert_segments",
    "segment_rows",
    "write_chunks",
]


def insert_segments(
    conn: psycopg.Connection[Any], conversation_id: str, kind: int, rows: Sequence[tuple[Any, ...]]
) -> None:
    """Write segments ``k >= 1``: ``(owner, k, text, tsv)`` rows."""
    if rows:
        conn.execute(
            "INSERT INTO search_segments (conversation_id, kind, owner, segment, body, tsv)"
            " SELECT %s, %s, * FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::tsvector[])"
            " ON CONFLICT DO NOTHING",
            [conversation_id, kind, *(list(column) for column in zip(*rows, strict=True))],
        )


def segment_rows(owner: int, segments: Sequence[str]) -> list[tuple[Any, ...]]:
    return [(owner, k, text, tsvector(text)) for k, text in enumerate(segments) if k]


def index_data(segments: Sequence[str], ctx: str) -> tuple[str, str, list[tuple[Any, ...]]]:
    """A message's ``body``, ``tsv`` and later ``(k, text, tsv)`` segments, NUL-free.

    The bulk path's :data:`~contextengine.store.bulk.IndexHook`: it runs in the
    producer thread, where it overlaps the server's work on the previous chunk.
    """
    clean = [text.replace("\x00", " ") for text in segments]
    later = [(k, text, tsvector(text)) for k, text in enumerate(clean) if k]
    return clean[0], tsvector(clean[0], ctx), later


def identity_start(
    conn: psycopg.Connection[Any], conversation_id: str, hashes: Sequence[str], count: int
) -> int:
    """Where a batch without ``start_seq`` starts (the rule of ``append_messages``)."""

    def stored_json(lo: int, hi: int) -> list[str]:
        rows = conn.execute(
            "SELECT json FROM messages WHERE conversation_id = %s AND seq >= %s AND seq < %s"
            " ORDER BY seq",
            (conversation_id, lo, hi),
        ).fetchall()
        return [r[0] for r in rows]

    return _common.align_batch(stored_json, count, hashes)


def write_chunks(
    store: PostgresStore,
    conversation_id: str,
    chunks: Iterator[list[_bulk.Prepared]],
    *,
    to_context: bool,
) -> int:
    stored = 0
    expected: int | None = None  # the count our chunks left, while the import started empty
    seen: set[str] = set()  # provider-id identities of this import (h: keys hold positions)
    for chunk in _bulk.pipelined(chunks):
        with store._tx() as conn:
            # GIN inserts go to a pending list merged into the index when full:
            # bigger merges, less work per row (about a tenth faster here).
            conn.execute("SET LOCAL gin_pending_list_limit = '64MB'")
            store._lock_conversation(conn, conversation_id)
            last = conn.execute(
                "SELECT seq, body FROM messages WHERE conversation_id = %s"
                " ORDER BY seq DESC LIMIT 1",
                (conversation_id,),
            ).fetchone()
            count = int(last[0]) + 1 if last else 0
            previous = str(last[1]) if last else ""
            existing: set[str] = set()
            # Into a conversation that was empty, no one else writing (the count is
            # what our own chunks left): no stored row can hold these identities.
            if count != (0 if expected is None else expected):
                existing = {
                    r[0]
                    for r in conn.execute(
                        "SELECT identity_key FROM messages WHERE conversation_id = %s"
                        " AND identity_key = ANY(%s)",
                        (conversation_id, [p.key for p in chunk]),
                    )
                }
            now = store._clock()
            rows: list[tuple[Any, ...]] = []
            later: list[tuple[Any, ...]] = []
            context: list[ContextRef] = []
            for p, seq in _bulk.new_rows(
                chunk, conversation_id, count, existing=existing, seen=seen
            ):
                ctx = previous[:CONTEXT_CHARS]
                # The producer computed the words with the ctx it expected; rarely wrong.
                body, index, later_rows = p.index if ctx == p.ctx else index_data(p.segments, ctx)
                created = now if p.created_at is None else p.created_at
                values = (p.id, conversation_id, seq, p.role, p.json, p.tokens, p.key, created)
                rows.append((*values, body, ctx, index))
                later += [(seq, *segment) for segment in later_rows]
                previous = body
                if to_context and not (seq == 0 and p.role == "system"):
                    context.append(ContextRef(kind="message", id=p.id))
            if rows:
                copy_rows(conn, rows)
                insert_segments(conn, conversation_id, 0, later)
                if context:
                    store._insert_context(
                        conn, conversation_id, store._context_end(conn, conversation_id), context
                    )
                conn.execute(
                    "UPDATE conversations SET updated_at = GREATEST(updated_at, %s) WHERE id = %s",
                    (max(r[7] for r in rows), conversation_id),
                )
            fresh = count == (0 if expected is None else expected)
            expected = count + len(rows) if fresh else -1
            stored += len(rows)
    return stored


def copy_rows(conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]) -> None:
    """``COPY`` message rows, ``tsv`` included (computed by the store), into ``messages``.

    ``COPY`` has no ``ON CONFLICT``: the caller holds the conversation's
    lock and has left out every identity already stored.
    """
    with conn.cursor().copy(
        "COPY messages (id, conversation_id, seq, role, json, token_count, identity_key,"
        " created_at, body, ctx, tsv) FROM STDIN"
    ) as copy:
        for row in rows:
            copy.write_row(row)
