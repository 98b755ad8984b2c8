"""``SQLiteStore``: the embedded archive of the lossless engine, in one SQLite file.

The file format (applied by the numbered migrations in
:mod:`contextengine.store.migrations`, recorded in ``schema_version``):

* ``conversations(id, session_key UNIQUE, search_token, created_at, updated_at)``.
* ``messages``: **append-only**. Never updated; deleted only with their whole
  conversation. ``seq`` is 0-based in order of first storage and has no gaps.
  ``json`` is the message verbatim. ``UNIQUE(conversation_id, identity_key)``
  and ``UNIQUE(conversation_id, seq)``.
* ``summaries`` (id ``sum_`` + 16 hex), ``summary_sources`` (ordered edges to
  source messages or summaries), ``context_items`` (the active context),
  ``large_contents`` (id ``lc_`` + 16 hex).
* ``search_index``: an FTS5 table (``porter unicode61`` tokenizer) over the
  searchable text of every message (:func:`contextengine.messages.message_text`)
  and summary, written in the same transaction as the row it indexes. Each
  message's row also holds the first 300 characters of the message before it
  (column ``ctx``, weighted 0.4): answers are found by the words of the
  question that prompted them.

**Identity keys.** A message's identity is its provider message id when it
has one (``id:<id>``). Otherwise it is ``h:<position>:<sha256 of the canonical
JSON>`` where ``position`` is where the message sits in the caller's history.
Tool-call ids are not identities: providers recycle them for different calls.

* with ``start_seq``, ``messages[i]`` is at ``start_seq + i`` (exact; hosts that
  hold the full history should pass it);
* without it, the batch is aligned against what is stored, by content: if it
  starts with the stored message at seq 0 it is a replay from the start;
  otherwise, if its head repeats the stored tail (the longest such overlap
  wins), it continues from there; otherwise it is all new and starts at the
  current end. So storing the same prefix again adds nothing either way.

A message whose identity is already stored is skipped (``ON CONFLICT DO
NOTHING`` also guards the insert). New messages get the next ``seq`` values in
order. A message's ``id`` is ``msg_`` + 16 hex derived from its conversation
and identity key, so the same archive copied to another store keeps its ids.

**Deletion** happens only in :meth:`SQLiteStore.delete_conversation` and
:meth:`SQLiteStore.prune`: a whole conversation with its messages, summaries,
edges, context, large contents and index rows, in one transaction.

Connections run in WAL mode (files), with foreign keys on, a busy timeout and
``synchronous=FULL``: a committed append survives a power cut.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from contextengine.errors import InvalidMessagesError, StoreError
from contextengine.messages import message_text
from contextengine.store import search as _search
from contextengine.store.ids import (
    conversation_id_for,
    large_content_id_for,
    search_token_for,
    summary_id_for,
)
from contextengine.store.migrations import load_migrations
from contextengine.store.protocol import (
    ContextRef,
    ConversationInfo,
    LargeContent,
    NewSummary,
    SearchHit,
    SearchPage,
    StoredMessage,
    SummaryRecord,
)
from contextengine.store.retention import plan_prune

__all__ = ["SQLiteStore", "identity_key", "message_search_text"]

Message = dict[str, Any]
_CHUNK = 400  # parameters per IN (...) query, well under SQLite's limit
_REGEX_DEADLINE_S = 3.0
#: Characters of the previous message indexed with each message (the ``ctx`` column).
_CONTEXT_CHARS = 300
_MESSAGE_COLUMNS = "id, conversation_id, seq, role, json, token_count, identity_key, created_at"
_SUMMARY_COLUMNS = (
    "id, conversation_id, kind, depth, content, token_count, seq_start, seq_end, "
    "time_start, time_end, descendant_count, fallback, created_at"
)


def message_search_text(msg: Mapping[str, Any]) -> str:
    """The text of a message the full-text index holds: content plus tool calls as name(args)."""
    return message_text(msg if isinstance(msg, dict) else dict(msg))


def _canonical_hash(msg: Mapping[str, Any]) -> str:
    canonical = json.dumps(msg, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def identity_key(msg: Mapping[str, Any], position: int, content_hash: str | None = None) -> str:
    """The identity key of ``msg`` at ``position`` in its history (see the module docstring)."""
    msg_id = msg.get("id")
    if isinstance(msg_id, str) and msg_id:
        return f"id:{msg_id}"
    # Tool-call ids are deliberately not identities: real providers recycle
    # them (tau-bench's gpt-4o runs reuse one id for several different calls),
    # and keying on them silently dropped the later, different messages.
    return f"h:{position}:{content_hash or _canonical_hash(msg)}"


def _default_token_count(msg: Mapping[str, Any]) -> int:
    try:
        from contextengine.tokens import message_tokens
    except ImportError:  # pragma: no cover - tokens.py is written in parallel
        return max(1, len(json.dumps(msg, ensure_ascii=False)) // 4)
    return int(message_tokens(msg))


class SQLiteStore:
    """The archive in one SQLite file (or ``":memory:"``); implements :class:`Store`.

    ``clock`` returns the current time in seconds (injectable for retention
    tests); ``token_counter`` counts a message's tokens when the caller gives
    no ``token_counts`` (default: :func:`contextengine.tokens.message_tokens`).
    One connection serves all threads, behind a lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        clock: Callable[[], float] = time.time,
        token_counter: Callable[[Mapping[str, Any]], int] | None = None,
        busy_timeout_ms: int = 10_000,
    ) -> None:
        self.path = str(path)
        self._clock = clock
        self._count = token_counter or _default_token_count
        self._lock = threading.RLock()
        self._tokens: dict[str, str] = {}
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open archive {self.path}: {exc}") from exc
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._db.execute("PRAGMA foreign_keys = ON")
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except BaseException:
            self._db.close()
            raise

    # ------------------------------------------------------------------ plumbing

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; IMMEDIATE so read-then-write steps see no concurrent writer."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"archive {self.path} is busy or unwritable: {exc}") from exc
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.ProgrammingError as exc:
                raise StoreError(f"archive {self.path} is closed or misused: {exc}") from exc

    def _migrate(self) -> None:
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        (current,) = self._db.execute(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version"
        ).fetchone()
        for migration in load_migrations("SQLITE"):
            if migration.version <= current:
                continue
            try:
                with self._write() as db:
                    for statement in migration.statements:
                        db.execute(statement)
                    db.execute(
                        "INSERT INTO schema_version VALUES (?, ?, ?)",
                        (migration.version, migration.description, self._clock()),
                    )
            except sqlite3.Error as exc:
                raise StoreError(
                    f"archive {self.path}: migration {migration.version} "
                    f"({migration.description}) failed: {exc}"
                ) from exc

    def _search_token(self, conversation_id: str) -> str:
        token = self._tokens.get(conversation_id)
        if token is None:
            rows = self._read(
                "SELECT search_token FROM conversations WHERE id = ?", (conversation_id,)
            )
            if not rows:
                raise StoreError(f"unknown conversation {conversation_id!r}")
            token = self._tokens[conversation_id] = str(rows[0][0])
        return token

    # ------------------------------------------------------------------ conversations

    def open_conversation(self, session_key: str) -> str:
        """Return the id of the conversation for ``session_key``, creating it if needed."""
        rows = self._read("SELECT id FROM conversations WHERE session_key = ?", (session_key,))
        if rows:
            return str(rows[0][0])
        with self._write() as db:
            row = db.execute(
                "SELECT id FROM conversations WHERE session_key = ?", (session_key,)
            ).fetchone()
            if row is not None:
                return str(row[0])
            conversation_id = conversation_id_for(session_key)
            token = search_token_for(conversation_id)
            now = self._clock()
            db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?)",
                (conversation_id, session_key, token, now, now),
            )
        return conversation_id

    # ------------------------------------------------------------------ messages

    def append_messages(
        self,
        conversation_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        token_counts: Sequence[int] | None = None,
        start_seq: int | None = None,
    ) -> list[StoredMessage]:
        """Store messages not yet stored; return only the newly stored ones.

        Called by the engine on every turn and before assembling a view. The
        identity rule is in the module docstring.
        """
        if token_counts is not None and len(token_counts) != len(messages):
            raise StoreError("token_counts must have one entry per message")
        encoded: list[str] = []
        hashes: list[str] = []
        for index, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise InvalidMessagesError("a message must be a JSON object", index=index)
            try:
                encoded.append(json.dumps(msg, ensure_ascii=False, separators=(",", ":")))
            except (TypeError, ValueError) as exc:
                raise InvalidMessagesError(f"not JSON-serialisable: {exc}", index=index) from None
            hashes.append(_canonical_hash(msg))
        token = self._search_token(conversation_id)
        if not messages:
            return []
        with self._write() as db:
            (count,) = db.execute(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            start = (
                start_seq
                if start_seq is not None
                else self._align(db, conversation_id, count, hashes)
            )
            keys = [
                identity_key(m, start + i, h)
                for i, (m, h) in enumerate(zip(messages, hashes, strict=True))
            ]
            existing = self._existing_keys(db, conversation_id, keys)
            (max_rowid,) = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages").fetchone()
            now = self._clock()
            new: list[StoredMessage] = []
            rows: list[tuple[Any, ...]] = []
            index_rows: list[tuple[int, str, str, str]] = []
            previous = self._last_text(db, conversation_id, count)
            for i, msg in enumerate(messages):
                key = keys[i]
                if key in existing:
                    continue
                existing.add(key)
                seq = count + len(new)
                rowid = max_rowid + 1 + len(new)
                tokens = token_counts[i] if token_counts is not None else self._count(msg)
                msg_id = (
                    "msg_" + hashlib.sha256(f"{conversation_id}\0{key}".encode()).hexdigest()[:16]
                )
                role = str(msg.get("role", ""))
                rows.append(
                    (rowid, msg_id, conversation_id, seq, role, encoded[i], int(tokens), key, now)
                )
                text = message_search_text(msg)
                index_rows.append((rowid, token, text, previous[:_CONTEXT_CHARS]))
                previous = text
                stored = StoredMessage(
                    id=msg_id,
                    conversation_id=conversation_id,
                    seq=seq,
                    role=role,
                    message=msg,
                    token_count=int(tokens),
                    identity_key=key,
                    created_at=now,
                )
                new.append(stored)
            if rows:
                db.executemany(
                    "INSERT INTO messages (rowid, id, conversation_id, seq, role, json,"
                    " token_count, identity_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    rows,
                )
                db.executemany(
                    "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, ?)",
                    index_rows,
                )
                db.execute(
                    "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
                )
        return new

    def _align(
        self, db: sqlite3.Connection, conversation_id: str, count: int, hashes: list[str]
    ) -> int:
        """Where a batch given without ``start_seq`` starts in the stored history."""
        if count == 0:
            return 0
        n = len(hashes)

        def stored_hashes(lo: int, hi: int) -> list[str]:
            rows = db.execute(
                "SELECT json FROM messages WHERE conversation_id = ? AND seq >= ? AND seq < ?"
                " ORDER BY seq",
                (conversation_id, lo, hi),
            ).fetchall()
            return [_canonical_hash(json.loads(r[0])) for r in rows]

        head = stored_hashes(0, min(n, count))
        if head == hashes[: len(head)]:
            return 0
        tail_start = max(1, count - n)
        tail = stored_hashes(tail_start, count)
        for start in range(tail_start, count):
            overlap = tail[start - tail_start :]
            if overlap == hashes[: len(overlap)]:
                return start
        return count

    @staticmethod
    def _last_text(db: sqlite3.Connection, conversation_id: str, count: int) -> str:
        """The indexed text of the newest stored message: the context of the next one."""
        if count == 0:
            return ""
        row = db.execute(
            "SELECT s.body FROM messages m JOIN search_index s ON s.rowid = m.rowid"
            " WHERE m.conversation_id = ? AND m.seq = ?",
            (conversation_id, count - 1),
        ).fetchone()
        return str(row[0]) if row else ""

    def _existing_keys(
        self, db: sqlite3.Connection, conversation_id: str, keys: list[str]
    ) -> set[str]:
        found: set[str] = set()
        unique = list(dict.fromkeys(keys))
        for lo in range(0, len(unique), _CHUNK):
            chunk = unique[lo : lo + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT identity_key FROM messages WHERE conversation_id = ?"
                f" AND identity_key IN ({marks})",
                (conversation_id, *chunk),
            ).fetchall()
            found.update(r[0] for r in rows)
        return found

    @staticmethod
    def _message(row: Sequence[Any]) -> StoredMessage:
        return StoredMessage(
            id=row[0],
            conversation_id=row[1],
            seq=row[2],
            role=row[3],
            message=json.loads(row[4]),
            token_count=row[5],
            identity_key=row[6],
            created_at=row[7],
        )

    def message_count(self, conversation_id: str) -> int:
        rows = self._read(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    def get_messages(
        self, conversation_id: str, seq_start: int = 0, seq_end: int | None = None
    ) -> list[StoredMessage]:
        """Messages with ``seq_start <= seq < seq_end`` in order."""
        end = seq_end if seq_end is not None else 2**62
        rows = self._read(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?"
            " AND seq >= ? AND seq < ? ORDER BY seq",
            (conversation_id, seq_start, end),
        )
        return [self._message(r) for r in rows]

    def get_message(self, conversation_id: str, message_id: str) -> StoredMessage | None:
        rows = self._read(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id = ? AND conversation_id = ?",
            (message_id, conversation_id),
        )
        return self._message(rows[0]) if rows else None

    # ------------------------------------------------------------------ summaries and context

    def _summary(self, row: Sequence[Any]) -> SummaryRecord:
        sources = self._read(
            "SELECT source_id FROM summary_sources WHERE summary_id = ? ORDER BY position",
            (row[0],),
        )
        return SummaryRecord(
            id=row[0],
            conversation_id=row[1],
            kind=row[2],
            depth=row[3],
            content=row[4],
            token_count=row[5],
            seq_start=row[6],
            seq_end=row[7],
            time_start=row[8],
            time_end=row[9],
            descendant_count=row[10],
            fallback=bool(row[11]),
            created_at=row[12],
            source_ids=tuple(r[0] for r in sources),
        )

    def get_summary(self, conversation_id: str, summary_id: str) -> SummaryRecord | None:
        rows = self._read(
            f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE id = ? AND conversation_id = ?",
            (summary_id, conversation_id),
        )
        return self._summary(rows[0]) if rows else None

    def parent_summary(self, conversation_id: str, item_id: str) -> str | None:
        """The id of the summary whose sources include ``item_id``, if any."""
        rows = self._read(
            "SELECT summary_id FROM summary_sources WHERE conversation_id = ? AND source_id = ?"
            " LIMIT 1",
            (conversation_id, item_id),
        )
        return str(rows[0][0]) if rows else None

    def get_context(self, conversation_id: str) -> list[ContextRef]:
        rows = self._read(
            "SELECT kind, ref_id FROM context_items WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        )
        return [ContextRef(kind=r[0], id=r[1]) for r in rows]

    def _check_refs(
        self, db: sqlite3.Connection, conversation_id: str, kind: str, ids: Sequence[str]
    ) -> None:
        """Refuse references to items this conversation does not hold (isolation, integrity)."""
        table = "messages" if kind == "message" else "summaries"
        unique = list(dict.fromkeys(ids))
        for lo in range(0, len(unique), _CHUNK):
            chunk = unique[lo : lo + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT id FROM {table} WHERE conversation_id = ? AND id IN ({marks})",
                (conversation_id, *chunk),
            ).fetchall()
            if len(rows) != len(chunk):
                missing = sorted(set(chunk) - {r[0] for r in rows})
                raise StoreError(
                    f"unknown {kind} id(s) in conversation {conversation_id!r}: "
                    + ", ".join(missing[:5])
                )

    def _write_context(
        self, db: sqlite3.Connection, conversation_id: str, items: Sequence[ContextRef]
    ) -> None:
        for kind in ("message", "summary"):
            self._check_refs(db, conversation_id, kind, [i.id for i in items if i.kind == kind])
        db.execute("DELETE FROM context_items WHERE conversation_id = ?", (conversation_id,))
        db.executemany(
            "INSERT INTO context_items VALUES (?, ?, ?, ?)",
            [(conversation_id, pos, item.kind, item.id) for pos, item in enumerate(items)],
        )
        db.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?",
            (self._clock(), conversation_id),
        )

    def replace_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None:
        """Persist the active context; every reference must belong to this conversation."""
        self._search_token(conversation_id)
        with self._write() as db:
            self._write_context(db, conversation_id, items)

    def commit_compaction(
        self,
        conversation_id: str,
        summaries: Sequence[NewSummary],
        new_context: Sequence[ContextRef] | None,
    ) -> list[SummaryRecord]:
        """Write summaries with their edges, and replace the active context, in one transaction.

        Called by the engine once per compaction step. ``new_context`` may name
        the new summaries as ``"new:0"``, ``"new:1"``...
        """
        token = self._search_token(conversation_id)
        now = self._clock()
        records: list[SummaryRecord] = []
        with self._write() as db:
            (max_rowid,) = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM summaries").fetchone()
            written: list[str] = []
            for n, summary in enumerate(summaries):
                if summary.kind not in ("leaf", "condensed"):
                    raise StoreError(
                        f"summary kind must be leaf or condensed, not {summary.kind!r}"
                    )
                source_kind = "message" if summary.kind == "leaf" else "summary"
                sources = [
                    written[int(s[4:])] if s.startswith("new:") else s for s in summary.source_ids
                ]
                self._check_refs(db, conversation_id, source_kind, sources)
                summary_id = summary_id_for(conversation_id, summary.kind, sources, summary.content)
                rowid = max_rowid + 1 + n
                db.execute(
                    f"INSERT INTO summaries (rowid, {_SUMMARY_COLUMNS})"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rowid,
                        summary_id,
                        conversation_id,
                        summary.kind,
                        summary.depth,
                        summary.content,
                        summary.token_count,
                        summary.seq_start,
                        summary.seq_end,
                        summary.time_start,
                        summary.time_end,
                        summary.descendant_count,
                        int(summary.fallback),
                        now,
                    ),
                )
                db.executemany(
                    "INSERT INTO summary_sources VALUES (?, ?, ?, ?, ?)",
                    [
                        (summary_id, pos, source_kind, source, conversation_id)
                        for pos, source in enumerate(sources)
                    ],
                )
                db.execute(
                    "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, '')",
                    (-rowid, token, summary.content),
                )
                written.append(summary_id)
                records.append(
                    SummaryRecord(
                        id=summary_id,
                        conversation_id=conversation_id,
                        kind=summary.kind,
                        depth=summary.depth,
                        content=summary.content,
                        token_count=summary.token_count,
                        seq_start=summary.seq_start,
                        seq_end=summary.seq_end,
                        time_start=summary.time_start,
                        time_end=summary.time_end,
                        descendant_count=summary.descendant_count,
                        fallback=summary.fallback,
                        created_at=now,
                        source_ids=tuple(sources),
                    )
                )
            if new_context is not None:
                resolved = []
                for item in new_context:
                    if item.id.startswith("new:"):
                        try:
                            item = ContextRef(kind="summary", id=written[int(item.id[4:])])
                        except (ValueError, IndexError):
                            raise StoreError(
                                f"no new summary for placeholder {item.id!r}"
                            ) from None
                    resolved.append(item)
                self._write_context(db, conversation_id, resolved)
            db.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
            )
        return records

    # ------------------------------------------------------------------ large contents

    def put_large_content(
        self, conversation_id: str, message_id: str, content: str, token_count: int
    ) -> LargeContent:
        """Store a tool result too large for the view; the engine calls it when swapping one out.

        Idempotent per message: a second call (a resumed session in a new
        process) returns the row already stored.
        """
        self._search_token(conversation_id)
        content_id = large_content_id_for(conversation_id, message_id)
        with self._write() as db:
            db.execute(
                "INSERT INTO large_contents VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (content_id, conversation_id, message_id, content, token_count, self._clock()),
            )
        stored = self.get_large_content(conversation_id, content_id)
        if stored is None:  # pragma: no cover - the row was just written in this conversation
            raise StoreError(f"large content {content_id} vanished after it was written")
        return stored

    def large_content_for_message(
        self, conversation_id: str, message_id: str
    ) -> LargeContent | None:
        """The large content stored for ``message_id``, if any."""
        return self.get_large_content(
            conversation_id, large_content_id_for(conversation_id, message_id)
        )

    def get_large_content(self, conversation_id: str, content_id: str) -> LargeContent | None:
        rows = self._read(
            "SELECT id, conversation_id, message_id, content, token_count, created_at"
            " FROM large_contents WHERE id = ? AND conversation_id = ?",
            (content_id, conversation_id),
        )
        if not rows:
            return None
        r = rows[0]
        return LargeContent(
            id=r[0],
            conversation_id=r[1],
            message_id=r[2],
            content=r[3],
            token_count=r[4],
            created_at=r[5],
        )

    # ------------------------------------------------------------------ search

    def search(
        self,
        conversation_id: str,
        query: str,
        *,
        mode: Literal["text", "regex"] = "text",
        scope: Literal["messages", "summaries", "all"] = "all",
        limit: int = 20,
        cursor: str | None = None,
    ) -> SearchPage:
        """Ranked full-text (BM25 + proximity rerank) or bounded regex search in one conversation.

        The engine of ``lcm_grep``. Raises :class:`StoreError` for an unknown
        conversation, a bad mode/scope/cursor or an invalid regex.
        """
        if mode not in ("text", "regex"):
            raise StoreError(f"mode must be 'text' or 'regex', not {mode!r}")
        if scope not in ("messages", "summaries", "all"):
            raise StoreError(f"scope must be 'messages', 'summaries' or 'all', not {scope!r}")
        token = self._search_token(conversation_id)
        limit = max(1, min(int(limit), _search.MAX_LIMIT))
        offset = 0
        if cursor:
            offset = _search.decode_cursor(cursor, conversation_id, mode, scope, query)
        if mode == "regex":
            return self._search_regex(conversation_id, query, scope, limit, offset)
        return self._search_text(conversation_id, token, query, scope, limit, offset)

    def _search_text(
        self, conversation_id: str, token: str, query: str, scope: str, limit: int, offset: int
    ) -> SearchPage:
        if offset > _search.MAX_OFFSET:
            raise StoreError(
                f"search results beyond {_search.MAX_OFFSET} are not served; refine the query"
            )
        parsed = _search.parse_query(query)
        if parsed.empty:
            return SearchPage(results=[])
        # The parentheses matter: AND binds tighter than OR in FTS5.
        match = f'conv : "{token}" AND (' + _search.fts5_match(parsed) + ")"
        where = {"messages": " AND rowid > 0", "summaries": " AND rowid < 0", "all": ""}[scope]
        fetch = max(_search.RERANK_WINDOW, offset + limit + 1)
        try:
            rows = self._read(
                "SELECT rowid, rank, substr(body, 1, 20000) || ' ' || ctx FROM search_index"
                f" WHERE search_index MATCH ?{where} ORDER BY rank, rowid LIMIT ?",
                (match, fetch),
            )
        except sqlite3.OperationalError as exc:  # pragma: no cover - parse_query quotes all
            raise StoreError(f"search failed for {query!r}: {exc}") from exc
        order = _search.rerank(parsed, [(-r[1], r[2]) for r in rows])
        page = [rows[i] for i in order[offset : offset + limit]]
        hits: list[SearchHit] = []
        for rowid, rank, _body in page:
            snippet = self._read(
                "SELECT snippet(search_index, 1, ?, ?, '…', 24) FROM search_index"
                " WHERE search_index MATCH ? AND rowid = ?",
                (_search.HIGHLIGHT_OPEN, _search.HIGHLIGHT_CLOSE, match, rowid),
            )
            hits.append(self._hit(conversation_id, rowid, -rank, snippet[0][0] if snippet else ""))
        hits = self._with_summary_ids(conversation_id, hits)
        more = len(order) > offset + limit
        next_cursor = (
            _search.encode_cursor(conversation_id, "text", scope, query, offset + limit)
            if more and offset + limit <= _search.MAX_OFFSET
            else None
        )
        return SearchPage(results=hits, next_cursor=next_cursor)

    def _hit(self, conversation_id: str, rowid: int, score: float, snippet: str) -> SearchHit:
        if rowid > 0:
            row = self._read(
                "SELECT id, seq, role FROM messages WHERE rowid = ? AND conversation_id = ?",
                (rowid, conversation_id),
            )[0]
            return SearchHit(
                id=row[0], kind="message", seq=row[1], role=row[2], snippet=snippet, score=score
            )
        row = self._read(
            "SELECT id FROM summaries WHERE rowid = ? AND conversation_id = ?",
            (-rowid, conversation_id),
        )[0]
        return SearchHit(
            id=row[0], kind="summary", seq=None, role="summary", snippet=snippet, score=score
        )

    def _with_summary_ids(self, conversation_id: str, hits: list[SearchHit]) -> list[SearchHit]:
        """Fill ``summary_id`` for hits that left the active context."""
        if not hits:
            return hits
        in_view = {
            r[0]
            for r in self._read(
                "SELECT ref_id FROM context_items WHERE conversation_id = ?", (conversation_id,)
            )
        }
        out = []
        for hit in hits:
            parent = None if hit.id in in_view else self.parent_summary(conversation_id, hit.id)
            out.append(hit if parent is None else dataclasses.replace(hit, summary_id=parent))
        return out

    def _search_regex(
        self, conversation_id: str, pattern: str, scope: str, limit: int, offset: int
    ) -> SearchPage:
        compiled = _search.compile_regex(pattern)
        parts = []
        if scope in ("messages", "all"):
            parts.append(
                "SELECT 0, m.seq, m.rowid, s.body FROM messages m JOIN search_index s"
                " ON s.rowid = m.rowid WHERE m.conversation_id = ?1"
            )
        if scope in ("summaries", "all"):
            parts.append(
                "SELECT 1, u.rowid, -u.rowid, s.body FROM summaries u JOIN search_index s"
                " ON s.rowid = -u.rowid WHERE u.conversation_id = ?1"
            )
        sql = " UNION ALL ".join(parts) + " ORDER BY 1, 2 LIMIT ?2 OFFSET ?3"
        deadline = time.monotonic() + _REGEX_DEADLINE_S
        hits: list[SearchHit] = []
        position = offset
        scanned = 0
        exhausted = False
        while len(hits) < limit and scanned < _search.REGEX_MAX_ROWS:
            batch = self._read(sql, (conversation_id, 200, position))
            if not batch:
                exhausted = True
                break
            for _k, _o, rowid, body in batch:
                position += 1
                scanned += 1
                span = _search.regex_find(compiled, body)
                if span is not None:
                    snippet = _search.snippet_around(body, *span)
                    hits.append(self._hit(conversation_id, rowid, 0.0, snippet))
                if len(hits) >= limit or time.monotonic() > deadline:
                    break
            if time.monotonic() > deadline:
                break
        if not exhausted:
            more = self._read(sql, (conversation_id, 1, position))
            exhausted = not more
        next_cursor = (
            None
            if exhausted
            else _search.encode_cursor(conversation_id, "regex", scope, pattern, position)
        )
        return SearchPage(
            results=self._with_summary_ids(conversation_id, hits), next_cursor=next_cursor
        )

    # ------------------------------------------------------------------ retention and operations

    def list_conversations(self) -> list[ConversationInfo]:
        """Every conversation with its counts and stored bytes, oldest updated first."""
        rows = self._read(
            "SELECT c.id, c.session_key, c.created_at, c.updated_at,"
            " (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id),"
            " (SELECT COUNT(*) FROM summaries s WHERE s.conversation_id = c.id),"
            " (SELECT COALESCE(SUM(LENGTH(CAST(m.json AS BLOB))), 0) FROM messages m"
            "   WHERE m.conversation_id = c.id)"
            " + (SELECT COALESCE(SUM(LENGTH(CAST(s.content AS BLOB))), 0) FROM summaries s"
            "   WHERE s.conversation_id = c.id)"
            " + (SELECT COALESCE(SUM(LENGTH(CAST(l.content AS BLOB))), 0) FROM large_contents l"
            "   WHERE l.conversation_id = c.id)"
            " FROM conversations c ORDER BY c.updated_at, c.id"
        )
        return [
            ConversationInfo(
                id=r[0],
                session_key=r[1],
                created_at=r[2],
                updated_at=r[3],
                message_count=r[4],
                summary_count=r[5],
                bytes=r[6],
            )
            for r in rows
        ]

    def delete_conversation(self, conversation_id: str) -> None:
        """Delete a conversation with all its rows and index entries (retention only)."""
        with self._write() as db:
            self._delete(db, conversation_id)

    def _delete(self, db: sqlite3.Connection, conversation_id: str) -> None:
        index_rows = db.execute(
            "SELECT rowid FROM messages WHERE conversation_id = ?"
            " UNION ALL SELECT -rowid FROM summaries WHERE conversation_id = ?",
            (conversation_id, conversation_id),
        ).fetchall()
        db.executemany("DELETE FROM search_index WHERE rowid = ?", index_rows)
        # Edges and context rows go by cascade; deleting them first keeps the
        # cascade from checking summary ids one by one.
        db.execute("DELETE FROM summary_sources WHERE conversation_id = ?", (conversation_id,))
        db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        self._tokens.pop(conversation_id, None)

    def prune(self, *, older_than_s: float | None = None, max_bytes: int | None = None) -> int:
        """Delete whole conversations by age and size cap; return how many (see ``retention``)."""
        doomed = plan_prune(
            self.list_conversations(),
            now=self._clock(),
            older_than_s=older_than_s,
            max_bytes=max_bytes,
        )
        if doomed:
            with self._write() as db:
                for info in doomed:
                    self._delete(db, info.id)
        return len(doomed)

    def vacuum(self) -> None:
        """Merge the index, rewrite the file compactly and truncate the WAL."""
        with self._lock:
            self._db.execute("INSERT INTO search_index(search_index) VALUES ('optimize')")
            self._db.execute("VACUUM")
            if self.path != ":memory:":
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def stats(self) -> dict[str, Any]:
        """Counts of every kind of row, the schema version and the bytes on disk."""

        def one(sql: str) -> int:
            return int(self._read(sql)[0][0])

        page_size = one("PRAGMA page_size")
        wal = Path(self.path + "-wal")
        return {
            "path": self.path,
            "schema_version": one("SELECT MAX(version) FROM schema_version"),
            "conversations": one("SELECT COUNT(*) FROM conversations"),
            "messages": one("SELECT COUNT(*) FROM messages"),
            "summaries": one("SELECT COUNT(*) FROM summaries"),
            "summary_edges": one("SELECT COUNT(*) FROM summary_sources"),
            "context_items": one("SELECT COUNT(*) FROM context_items"),
            "large_contents": one("SELECT COUNT(*) FROM large_contents"),
            "index_rows": one("SELECT COUNT(*) FROM search_index"),
            "file_bytes": one("PRAGMA page_count") * page_size,
            "free_bytes": one("PRAGMA freelist_count") * page_size,
            "wal_bytes": wal.stat().st_size if self.path != ":memory:" and wal.exists() else 0,
        }

    def close(self) -> None:
        """Close the connection; further calls raise :class:`StoreError`. Idempotent."""
        with self._lock:
            self._db.close()
