"""Copying an archive from one store to another: ``contextengine archive migrate``.

:func:`migrate_archive` copies every conversation of a source archive (an
``SQLiteStore`` file or a ``PostgresStore``) into a ``PostgresStore`` with
all its rows: conversations, messages, summaries, their edges, the active
context, large contents, and the lineage links and session aliases between
the conversations copied. Ids, ``seq`` numbers and timestamps are kept, so
summary texts that name ids stay true and a host can switch its ``store=``
setting without noticing.

Messages go through the target's bulk path, :meth:`Store.copy_messages`
(``COPY`` in chunks, prepared in a second thread, ids and token counts kept).
It is idempotent: every insert is ``ON CONFLICT DO NOTHING`` and only
messages past the target's end are read again, so running it twice copies
nothing new, and an interrupted run is finished by running it again. The
active context is the source's (replaced when it differs). A conversation
the target already holds with another history (an agent started writing
there under the same session key before the migration) is skipped and
reported, never merged. Stop the agents writing to the source while migrating.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any

from contextengine.errors import StoreError
from contextengine.store.protocol import Store, StoredMessage

__all__ = ["MigrationReport", "migrate_archive"]

#: Messages read and written per transaction.
BATCH = 2_000


@dataclass(kw_only=True)
class MigrationReport:
    """What one :func:`migrate_archive` run copied (rows newly written to the target)."""

    conversations: int = 0
    messages: int = 0
    summaries: int = 0
    edges: int = 0
    context_items: int = 0
    large_contents: int = 0
    #: Session keys the target holds with another history: not copied.
    skipped: list[str] = field(default_factory=list)

    @property
    def copied(self) -> int:
        """Rows written in all; 0 when the target already held everything."""
        return (
            self.conversations
            + self.messages
            + self.summaries
            + self.edges
            + self.context_items
            + self.large_contents
        )


Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


@contextmanager
def _reader(source: Store) -> Iterator[tuple[Query, str]]:
    """A query function over the source's tables and the SQL of its content-with-NUL flag."""
    from contextengine.store import sqlite_readonly
    from contextengine.store.sqlite import SQLiteStore

    if isinstance(source, SQLiteStore):
        if source.path == ":memory:":
            raise StoreError("cannot migrate from an in-memory archive; give its file")
        # A read-only connection of our own: it sees committed rows (WAL), cannot
        # write and creates no file (sqlite_readonly). The bulk path reads
        # messages from its producer thread, one thread at a time.
        with closing(sqlite_readonly.connect(source.path)) as db:

            def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
                return db.execute(sql, tuple(params)).fetchall()

            yield query, "0"
        return
    from contextengine.store.postgres import PostgresStore

    if isinstance(source, PostgresStore):
        with source._tx() as conn:  # one snapshot-consistent read transaction per run
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

            def pg_query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
                return conn.execute(sql.replace("?", "%s"), params).fetchall()

            yield pg_query, "nul_escaped"
        return
    raise StoreError(
        f"cannot migrate from {type(source).__name__}: give a SQLite or PostgreSQL store"
    )


def _text(value: str, escaped: Any) -> str:
    return str(json.loads(value)) if escaped else value


def migrate_archive(
    source: Store,
    target: Store,
    *,
    progress: Callable[[str], None] | None = None,
) -> MigrationReport:
    """Copy every conversation of ``source`` into ``target`` (a ``PostgresStore``), idempotently.

    Called by ``contextengine archive migrate``. ``progress`` receives one
    line per conversation. Raises :class:`StoreError` for an unsupported pair
    of stores or a database failure; rows committed before it stay and the
    next run continues from them.
    """
    from contextengine.store.postgres import PostgresStore

    if not isinstance(target, PostgresStore):
        raise StoreError(
            f"cannot migrate into {type(target).__name__}: the target must be a postgresql:// store"
        )
    report = MigrationReport()
    with _reader(source) as (query, nul_flag):
        conversations = query(
            "SELECT id, session_key, created_at, updated_at FROM conversations"
            " ORDER BY created_at, id",
            (),
        )
        for conversation_id, session_key, created_at, updated_at in conversations:
            copied = _copy_conversation(
                query,
                nul_flag,
                target,
                report,
                conversation_id=conversation_id,
                session_key=session_key,
                created_at=float(created_at),
                updated_at=float(updated_at),
            )
            if progress is not None:
                progress(
                    f"{conversation_id} {session_key}: "
                    + ("skipped (session key taken)" if copied is None else f"{copied} rows")
                )
        _copy_lineage(query, target)
    return report


def _copy_lineage(query: Query, target: Any) -> None:
    """Conversation links and session aliases (migration 5), between conversations copied.

    A link or alias whose conversation the target does not hold (skipped, or
    never copied) is left out rather than pointed at another conversation.
    """
    links = query(
        "SELECT conversation_id, parent_id, reason, created_at FROM conversation_links", ()
    )
    aliases = query("SELECT session_key, conversation_id, created_at FROM session_aliases", ())
    if not links and not aliases:
        return
    with target._tx() as conn:
        for child, parent, reason, created_at in links:
            conn.execute(
                "INSERT INTO conversation_links SELECT %s, %s, %s, %s WHERE EXISTS"
                " (SELECT 1 FROM conversations WHERE id = %s) AND EXISTS"
                " (SELECT 1 FROM conversations WHERE id = %s) ON CONFLICT DO NOTHING",
                (child, parent, reason, float(created_at), child, parent),
            )
        for key, conversation_id, created_at in aliases:
            conn.execute(
                "INSERT INTO session_aliases SELECT %s, %s, %s WHERE EXISTS"
                " (SELECT 1 FROM conversations WHERE id = %s) ON CONFLICT DO NOTHING",
                (key, conversation_id, float(created_at), conversation_id),
            )


def _copy_conversation(
    query: Query,
    nul_flag: str,
    target: Any,
    report: MigrationReport,
    *,
    conversation_id: str,
    session_key: str,
    created_at: float,
    updated_at: float,
) -> int | None:
    """Copy one conversation; the number of rows written, or None when skipped."""
    from contextengine.store.postgres import _to_pg_text as to_pg_text
    from contextengine.store.postgres import insert_summary

    before = report.copied
    with target._tx() as conn:
        cur = conn.execute(
            "INSERT INTO conversations VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (conversation_id, session_key, created_at, updated_at),
        )
        created = cur.rowcount > 0
        report.conversations += int(created)
        row = conn.execute(
            "SELECT id FROM conversations WHERE session_key = %s", (session_key,)
        ).fetchone()
        target_keys = [
            str(r[0])
            for r in conn.execute(
                "SELECT identity_key FROM messages WHERE conversation_id = %s ORDER BY seq",
                (conversation_id,),
            )
        ]
    if row is None or row[0] != conversation_id:
        report.skipped.append(session_key)
        return None
    if target_keys:
        # Continue only a copy of this very history: an agent may have written to the
        # target under the same session key (ids derive from it), and merging two
        # histories would interleave them.
        source_keys = [
            str(r[0])
            for r in query(
                "SELECT identity_key FROM messages WHERE conversation_id = ? AND seq < ?"
                " ORDER BY seq",
                (conversation_id, len(target_keys)),
            )
        ]
        if source_keys != target_keys:
            report.skipped.append(session_key)
            return None
    next_seq = len(target_keys)

    def records() -> Iterator[StoredMessage]:
        lo = next_seq
        while True:
            rows = query(
                "SELECT id, seq, role, json, token_count, identity_key, created_at FROM messages"
                " WHERE conversation_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (conversation_id, lo, BATCH),
            )
            for msg_id, seq, role, text, tokens, key, created in rows:
                yield StoredMessage(
                    id=msg_id,
                    conversation_id=conversation_id,
                    seq=int(seq),
                    role=role,
                    message=json.loads(text),
                    token_count=int(tokens),
                    identity_key=key,
                    created_at=float(created),
                )
            if len(rows) < BATCH:
                return
            lo = int(rows[-1][1]) + 1

    # The bulk path: COPY in chunks, prepared in a second thread; ids and counts kept.
    report.messages += target.copy_messages(conversation_id, records())

    summaries = query(
        "SELECT id, kind, depth, content, token_count, seq_start, seq_end, time_start, time_end,"
        f" descendant_count, fallback, created_at, {nul_flag} FROM summaries"
        " WHERE conversation_id = ?",
        (conversation_id,),
    )
    edges = query(
        "SELECT summary_id, position, source_kind, source_id FROM summary_sources"
        " WHERE conversation_id = ? ORDER BY summary_id, position",
        (conversation_id,),
    )
    context = query(
        "SELECT kind, ref_id FROM context_items WHERE conversation_id = ? ORDER BY position",
        (conversation_id,),
    )
    large = query(
        f"SELECT id, message_id, content, token_count, created_at, {nul_flag}"
        " FROM large_contents WHERE conversation_id = ?",
        (conversation_id,),
    )
    # Summaries, edges, context and large contents in one transaction: the
    # target never shows a summary without its edges or a context naming it half-copied.
    with target._tx() as conn, conn.cursor() as cur:
        for s in summaries:
            content = _text(s[3], s[12])
            pg_content, escaped = to_pg_text(content)
            values = (
                s[0], conversation_id, s[1], s[2], pg_content, escaped, s[4], s[5], s[6],
                s[7], s[8], s[9], bool(s[10]), s[11],
            )  # fmt: skip
            report.summaries += insert_summary(
                conn, conversation_id, values, content, skip_existing=True
            )
        for summary_id, position, source_kind, source_id in edges:
            cur.execute(
                "INSERT INTO summary_sources VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (summary_id, position, source_kind, source_id, conversation_id),
            )
            report.edges += max(cur.rowcount, 0)
        for lc_id, message_id, text, tokens, created, flag in large:
            pg_text, escaped = to_pg_text(_text(text, flag))
            cur.execute(
                "INSERT INTO large_contents VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (lc_id, conversation_id, message_id, pg_text, escaped, tokens, created),
            )
            report.large_contents += max(cur.rowcount, 0)
        current = cur.execute(
            "SELECT kind, ref_id FROM context_items WHERE conversation_id = %s ORDER BY position",
            (conversation_id,),
        ).fetchall()
        if [tuple(r) for r in current] != [tuple(r) for r in context]:
            cur.execute("DELETE FROM context_items WHERE conversation_id = %s", (conversation_id,))
            if context:
                cur.executemany(
                    "INSERT INTO context_items VALUES (%s, %s, %s, %s)",
                    [(conversation_id, pos, kind, ref) for pos, (kind, ref) in enumerate(context)],
                )
            report.context_items += len(context)
        cur.execute(
            "UPDATE conversations SET updated_at = GREATEST(updated_at, %s) WHERE id = %s",
            (updated_at, conversation_id),
        )
    return report.copied - before
