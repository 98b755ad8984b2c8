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
  and summary. A summary's rows, and the rows of messages stored by the bulk
  path, are written in the transaction that stores them; a message stored by
  the per-turn path is listed in ``index_pending`` (migration 4) in its own
  transaction and indexed with others later (:meth:`SQLiteStore.flush_index`:
  when enough are pending, before every search, when the store closes), since
  an FTS5 write per request was most of the per-request cost. Its
  ``conv`` column holds the conversation's ``search_token``, so every query is
  scoped to one conversation inside FTS5. Each message's row also holds the
  first 300 characters of the message before it (column ``ctx``, weighted 0.4
  when ranking): answers are found by the words of the question that prompted
  them.
* **Segments** (migration 3, :mod:`contextengine.store.segments`): a text
  longer than 4,000 characters is indexed in bounded segments. Rowids of
  ``search_index``: ``r`` in ``(0, 2**61)`` is segment 0 of ``messages.rowid =
  r``; ``-r`` the same for ``summaries.rowid = r``; ``±(2**61 + (r << 20) + k)``
  is segment ``k >= 1`` of that row (empty ``ctx``). Search, snippets and regex
  read one segment at a time, never a whole 10 MB row.

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

**Two write paths, one result.** :meth:`SQLiteStore.append_messages` is the
per-turn path: one short ``BEGIN IMMEDIATE`` transaction per call.
:meth:`SQLiteStore.import_messages` and :meth:`SQLiteStore.copy_messages` are
the bulk path (:mod:`contextengine.store.bulk`): chunks prepared in a second
thread, one transaction per chunk, the WAL checkpointed by a background
connection meanwhile. Both store the same rows.

**Durability.** Connections run in WAL mode (files), with foreign keys on and
a busy timeout. A committed write survives a crash of the process at once
(the WAL is in the operating system's hands when ``COMMIT`` returns). It
survives a power cut or an OS crash once :meth:`SQLiteStore.sync` has run,
which the lossless engine calls at the end of every turn and session: by
default (``synchronous="normal"``) the per-request appends of a turn are not
each forced to disk, because one ``fsync`` per request cost 0.2-4 ms on the
shared disks measured (more than everything else the engine does per
request), and a power cut loses the agent's in-memory turn anyway.
``synchronous="full"`` forces every commit to disk instead.

**Read-only.** ``SQLiteStore(path, read_only=True)`` opens an existing
archive without writing anything: no file, folder, ``-wal`` or ``-shm`` is
created, no migration runs (a schema other than the current one is refused
with its version), writes raise :class:`StoreError`, and a search still sees
the messages waiting in ``index_pending`` (:mod:`contextengine.store.sqlite_readonly`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from contextengine.errors import StoreError
from contextengine.store import _common
from contextengine.store import bulk as _bulk
from contextengine.store import search as _search
from contextengine.store import sqlite_bulk as _sqlite_bulk
from contextengine.store import sqlite_readonly as _readonly
from contextengine.store import sqlite_search as _sqlite_search
from contextengine.store._common import identity_key, message_search_text
from contextengine.store.ids import (
    conversation_id_for,
    large_content_id_for,
    search_token_for,
    summary_id_for,
)
from contextengine.store.migrations import load_migrations
from contextengine.store.protocol import (
    ContextRef,
    ContextSplice,
    ConversationInfo,
    LargeContent,
    NewSummary,
    SearchPage,
    StoredMessage,
    SummaryRecord,
)
from contextengine.store.segments import SEGMENT_CHARS, segment_text
from contextengine.store.sqlite_bulk import index_rows

__all__ = ["SQLiteStore", "identity_key", "message_search_text"]

Message = dict[str, Any]
_CHUNK = 400  # parameters per IN (...) query, well under SQLite's limit
#: Messages (and characters of text) the per-turn path lets wait before it
#: indexes them in one go, inside the transaction that reaches either limit.
PENDING_MESSAGES = 64
PENDING_CHARS = 256_000
#: Page cache per connection: the archive's indexes (ids, identity keys) are
#: written at random places, and SQLite's default 2 MB cache makes a bulk import
#: re-read pages it just wrote.
_CACHE_KIB = 64 * 1024
#: Bytes of the file read through a memory map (SQLite caps it near 2 GB by default).
_MMAP_BYTES = 2**31 - 2**16
_SUMMARY_COLUMNS = (
    "id, conversation_id, kind, depth, content, token_count, seq_start, seq_end, "
    "time_start, time_end, descendant_count, fallback, created_at"
)


def _latest_version() -> int:
    """The newest schema version this code knows (the last SQLite migration's number)."""
    return max(m.version for m in load_migrations("SQLITE"))


def _fsync(path: str) -> None:
    """Force a file (or a directory's entries) to disk; a file that does not exist is skipped."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # no write-ahead log yet: nothing was written since the last checkpoint
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SQLiteStore(_common.StoreBase):
    """The archive in one SQLite file (or ``":memory:"``); implements :class:`Store`.

    ``clock`` returns the current time in seconds (injectable for retention
    tests); ``token_counter`` counts a message's tokens when the caller gives
    no ``token_counts`` (default: :func:`contextengine.tokens.message_tokens`).
    ``synchronous`` is ``"normal"`` (durable against a power cut at every
    :meth:`sync`) or ``"full"`` (at every commit); see the module docstring.
    ``redact_at_rest`` redacts secrets (:func:`contextengine.redact.redact_message`)
    before anything is stored: opt-in, since what is redacted cannot be recovered.
    ``read_only`` opens an existing archive for reading only (module docstring).
    One connection serves all threads, behind a lock.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        clock: Callable[[], float] = time.time,
        token_counter: Callable[[Mapping[str, Any]], int] | None = None,
        busy_timeout_ms: int = 10_000,
        synchronous: Literal["normal", "full"] = "normal",
        redact_at_rest: bool = False,
        read_only: bool = False,
    ) -> None:
        if synchronous not in ("normal", "full"):
            raise StoreError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = str(path)
        self.synchronous = synchronous
        self.redact_at_rest = redact_at_rest
        self.read_only = read_only
        self._synced_dir = False
        # The text the next message of a conversation is indexed beside, with
        # the conversation's message count it is valid for.
        self._last_texts: dict[str, tuple[int, str]] = {}
        # Messages (and characters) waiting in index_pending, as this process
        # knows it (None: not read yet); another process's rows are found by
        # the next search or open.
        self._pending: int | None = None
        self._pending_chars = 0
        self._clock = clock
        self._count = token_counter or _common.default_token_count
        self._lock = threading.RLock()
        self._tokens: dict[str, str] = {}
        if read_only:
            if self.path == ":memory:":
                raise StoreError("an in-memory archive cannot be opened read-only: it is empty")
            self._db = _readonly.connect(self.path)
            self._pending = 0  # nothing to flush: search reads index_pending itself
        else:
            try:
                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            except (OSError, sqlite3.Error) as exc:
                raise StoreError(f"cannot open archive {self.path}: {exc}") from exc
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._db.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
            # Reads through a memory map, not a read() per page: search reads
            # scattered pages of the index and content (a quarter faster at 1M).
            self._db.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
            if read_only:
                _readonly.check_schema(self._db, self.path, _latest_version())
            else:
                self._db.execute("PRAGMA foreign_keys = ON")
                if self.path != ":memory:":
                    self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
                self._migrate()
        except sqlite3.Error as exc:
            self._db.close()
            raise _readonly.open_error(self.path, exc, writing=not read_only) from exc
        except BaseException:
            self._db.close()
            raise

    # ------------------------------------------------------------------ plumbing

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"archive {self.path} is open read-only")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; IMMEDIATE so read-then-write steps see no concurrent writer."""
        self._writable()
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
        _readonly.refuse_foreign(self._db, self.path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        (current,) = self._db.execute(
            "SELECT COALESCE(MAX(version), 0) FROM schema_version"
        ).fetchone()
        _readonly.check_version(int(current), _latest_version(), self.path, read_only=False)
        for migration in load_migrations("SQLITE"):
            if migration.version <= current:
                continue
            try:
                with self._write() as db:
                    for statement in migration.statements:
                        db.execute(statement)
                    if migration.step is not None:
                        migration.step(db)
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
        alias = self.session_alias(session_key)
        if alias is not None:
            return alias
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

    def link_conversations(
        self, conversation_id: str, parent_id: str, *, reason: str = "reset"
    ) -> None:
        """Record that ``conversation_id`` continues ``parent_id`` (its lineage); idempotent."""
        if conversation_id == parent_id:
            return
        with self._write() as db:
            db.execute(
                "INSERT INTO conversation_links VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (conversation_id, parent_id, reason, self._clock()),
            )

    def alias_session(self, session_key: str, conversation_id: str) -> None:
        """Make ``session_key`` open ``conversation_id`` (a session id rotated mid-conversation).

        A key that already names a conversation of its own keeps it.
        """
        with self._write() as db:
            db.execute(
                "INSERT INTO session_aliases VALUES (?, ?, ?) ON CONFLICT (session_key)"
                " DO UPDATE SET conversation_id = excluded.conversation_id",
                (session_key, conversation_id, self._clock()),
            )

    # ------------------------------------------------------------------ messages

    def append_messages(
        self,
        conversation_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        token_counts: Sequence[int] | None = None,
        start_seq: int | None = None,
        to_context: bool = False,
    ) -> list[StoredMessage]:
        """Store messages not yet stored; return only the newly stored ones.

        Called by the engine on every turn and before assembling a view. The
        identity rule is in the module docstring; ``to_context`` appends the
        new messages to the active context in the same transaction.
        """
        messages = self._at_rest(messages)
        encoded, hashes = _common.encode_batch(messages, token_counts)
        self._search_token(conversation_id)  # an unknown conversation is an error
        if not messages:
            return []
        with self._write() as db:
            (count,) = db.execute(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            keys = self._identity_keys(db, conversation_id, messages, hashes, count, start_seq)
            existing = self._existing_keys(db, conversation_id, keys)
            (max_rowid,) = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM messages").fetchone()
            now = self._clock()
            new = _common.new_messages(
                conversation_id,
                messages,
                keys,
                existing,
                count,
                now,
                lambda i: token_counts[i] if token_counts is not None else self._count(messages[i]),
            )
            rows: list[tuple[Any, ...]] = []
            pending: list[tuple[int, str]] = []
            previous = self._last_text(db, conversation_id, count)
            chars = 0
            for n, (i, m) in enumerate(new):
                rowid = max_rowid + 1 + n
                values = (m.id, conversation_id, m.seq, m.role, encoded[i], m.token_count)
                rows.append((rowid, *values, m.identity_key, now))
                pending.append((rowid, previous[: _common.CONTEXT_CHARS]))
                text = message_search_text(m.message)
                chars += len(text)
                previous = text[:SEGMENT_CHARS]
            if rows:
                waiting = self._pending_count(db)
                db.executemany(
                    "INSERT INTO messages (rowid, id, conversation_id, seq, role, json,"
                    " token_count, identity_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT DO NOTHING",
                    rows,
                )
                db.executemany("INSERT INTO index_pending (rowid, ctx) VALUES (?, ?)", pending)
                db.execute(
                    "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
                )
                self._last_texts[conversation_id] = (count + len(rows), previous)
                self._pending = waiting + len(rows)
                self._pending_chars += chars
                if self._pending >= PENDING_MESSAGES or self._pending_chars >= PENDING_CHARS:
                    self._flush_pending(db)
            stored = [m for _, m in new]
            if to_context:
                self._append_to_context(db, conversation_id, stored)
        return stored

    def _last_text(self, db: sqlite3.Connection, conversation_id: str, count: int) -> str:
        """The start of the newest stored message's text: what the next one is indexed beside."""
        if count == 0:
            return ""
        cached = self._last_texts.get(conversation_id)
        if cached is not None and cached[0] == count:
            return cached[1]
        row = db.execute(
            "SELECT rowid, json FROM messages WHERE conversation_id = ? AND seq = ?",
            (conversation_id, count - 1),
        ).fetchone()
        if row is None:
            return ""
        indexed = db.execute(
            "SELECT body FROM search_index WHERE rowid = ?", (int(row[0]),)
        ).fetchone()
        if indexed is not None:
            return str(indexed[0])
        return message_search_text(json.loads(row[1]))[:SEGMENT_CHARS]

    # ------------------------------------------------------------------ deferred indexing

    def _pending_count(self, db: sqlite3.Connection) -> int:
        if self._pending is None:
            (self._pending,) = db.execute("SELECT COUNT(*) FROM index_pending").fetchone()
        return int(self._pending)

    def _flush_pending(self, db: sqlite3.Connection) -> int:
        """Index every message waiting in ``index_pending``, inside the caller's transaction."""
        rows = db.execute(
            "SELECT p.rowid, p.ctx, m.json, c.search_token FROM index_pending p"
            " JOIN messages m ON m.rowid = p.rowid"
            " JOIN conversations c ON c.id = m.conversation_id ORDER BY p.rowid"
        ).fetchall()
        fts_rows: list[tuple[int, str, str, str]] = []
        for rowid, ctx, encoded, token in rows:
            segments = segment_text(message_search_text(json.loads(encoded)))
            fts_rows += index_rows(int(rowid), str(token), segments, str(ctx))
        db.executemany(
            "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, ?)", fts_rows
        )
        db.execute("DELETE FROM index_pending")
        self._pending = 0
        self._pending_chars = 0
        return len(rows)

    def flush_index(self) -> int:
        """Index the messages the per-turn path left pending; return how many.

        Called before every search (so a search always sees every stored
        message) and when the store closes; the per-turn path also calls it
        once :data:`PENDING_MESSAGES` messages or :data:`PENDING_CHARS`
        characters wait. Safe to call at any time; free when nothing waits.
        A read-only store indexes nothing (returns 0); its searches read the
        waiting messages themselves.
        """
        with self._lock:
            if self._pending == 0:
                return 0
            with self._write() as db:
                if self._pending_count(db) == 0:
                    return 0
                return self._flush_pending(db)

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

    # ------------------------------------------------------------------ the bulk path

    def import_messages(
        self,
        conversation_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        token_counts: Sequence[int] | None = None,
        start_seq: int | None = None,
        to_context: bool = False,
    ) -> int:
        """Store many messages fast (importers, replays); return how many were newly stored.

        Stores exactly what ``append_messages`` with the same arguments stores,
        in transactions of :data:`~contextengine.store.bulk.CHUNK` messages,
        with the preparation (JSON, hashes, token counts) in a second thread
        (:mod:`contextengine.store.bulk`).
        """
        self._writable()
        token = self._search_token(conversation_id)
        if not messages:
            return 0
        start = start_seq
        if start is None:
            head = min(len(messages), self.message_count(conversation_id))
            hashes = [_common.canonical_hash(m) for m in messages[:head]]
            with self._snapshot() as db:
                start = _sqlite_bulk.align(db, conversation_id, hashes)
        messages = self._at_rest(messages)
        chunks = _bulk.prepare_messages(
            conversation_id, messages, start=start, token_counts=token_counts, count=self._count
        )
        return _sqlite_bulk.write_chunks(
            self, conversation_id, token, chunks, to_context=to_context
        )

    def copy_messages(self, conversation_id: str, records: Iterable[StoredMessage]) -> int:
        """Write messages read from another archive verbatim; return how many were new.

        ``contextengine archive migrate`` uses it. Ids, identity keys, seqs,
        token counts and timestamps are kept. Records whose identity is stored
        are skipped; the others must continue the history (the first new one at
        ``seq == message_count``, then one after another), else
        :class:`StoreError`.
        """
        self._writable()
        token = self._search_token(conversation_id)
        chunks = _bulk.prepare_records(self._records_at_rest(records))
        return _sqlite_bulk.write_chunks(self, conversation_id, token, chunks, to_context=False)

    # ------------------------------------------------------------------ summaries and context

    def _summary(self, row: Sequence[Any]) -> SummaryRecord:
        sources = self._read(
            "SELECT source_id FROM summary_sources WHERE summary_id = ? ORDER BY position",
            (row[0],),
        )
        return _common.summary_record(row, [r[0] for r in sources])

    def get_summary(self, conversation_id: str, summary_id: str) -> SummaryRecord | None:
        rows = self._read(
            f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE id = ? AND conversation_id = ?",
            (summary_id, conversation_id),
        )
        return self._summary(rows[0]) if rows else None

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
                raise _common.unknown_refs(conversation_id, kind, set(chunk) - {r[0] for r in rows})

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

    def append_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None:
        """Add references at the end of the active context: the per-turn case, in O(new items)."""
        self._search_token(conversation_id)
        with self._write() as db:
            for kind in ("message", "summary"):
                self._check_refs(db, conversation_id, kind, [i.id for i in items if i.kind == kind])
            self._insert_context(db, conversation_id, self._context_end(db, conversation_id), items)
            db.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?",
                (self._clock(), conversation_id),
            )

    def commit_compaction(
        self,
        conversation_id: str,
        summaries: Sequence[NewSummary],
        new_context: Sequence[ContextRef] | ContextSplice | None,
    ) -> list[SummaryRecord]:
        """Write summaries with their edges, and change the active context, in one transaction.

        Called by the engine once per compaction step. ``new_context`` (the
        whole context, or a :class:`ContextSplice` of one run) may name the new
        summaries as ``"new:0"``, ``"new:1"``...
        """
        token = self._search_token(conversation_id)
        now = self._clock()
        records: list[SummaryRecord] = []
        with self._write() as db:
            splice_at = (
                self._locate_splice(db, conversation_id, new_context)
                if isinstance(new_context, ContextSplice)
                else (0, 0)
            )
            (max_rowid,) = db.execute("SELECT COALESCE(MAX(rowid), 0) FROM summaries").fetchone()
            written: list[str] = []
            for n, summary in enumerate(summaries):
                source_kind = _common.source_kind(summary)
                sources = _common.resolve_sources(summary, written)
                self._check_refs(db, conversation_id, source_kind, sources)
                summary_id = summary_id_for(conversation_id, summary.kind, sources, summary.content)
                records.append(
                    _common.new_summary_record(conversation_id, summary_id, summary, sources, now)
                )
                written.append(summary_id)
                if self._summary_exists(db, conversation_id, summary_id):
                    continue
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
                db.executemany(
                    "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, ?)",
                    index_rows(-rowid, token, segment_text(summary.content), ""),
                )
            if isinstance(new_context, ContextSplice):
                self._apply_splice(db, conversation_id, new_context, splice_at, written)
            elif new_context is not None:
                self._write_context(
                    db, conversation_id, _common.resolve_context(new_context, written)
                )
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
        content = self._content_at_rest(content)
        content_id = large_content_id_for(conversation_id, message_id)
        with self._write() as db:
            db.execute(
                "INSERT INTO large_contents VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (content_id, conversation_id, message_id, content, token_count, self._clock()),
            )
        return self._written_large_content(conversation_id, content_id)

    def get_large_content(self, conversation_id: str, content_id: str) -> LargeContent | None:
        rows = self._read(
            "SELECT id, conversation_id, message_id, content, token_count, created_at"
            " FROM large_contents WHERE id = ? AND conversation_id = ?",
            (content_id, conversation_id),
        )
        return _common.large_content(rows[0]) if rows else None

    # ------------------------------------------------------------------ search

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query of a search sees the same committed state."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
            except sqlite3.ProgrammingError as exc:
                raise StoreError(f"archive {self.path} is closed or misused: {exc}") from exc
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

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
        """Ranked full-text (bounded BM25, proximity rerank) or bounded regex search.

        The engine of ``lcm_grep`` (:mod:`contextengine.store.sqlite_search`).
        Raises :class:`StoreError` for an unknown conversation, a bad
        mode/scope/cursor or an invalid regex.
        """
        limit, offset = _common.check_search(conversation_id, query, mode, scope, limit, cursor)
        token = self._search_token(conversation_id)
        self.flush_index()
        # Read-only, the messages waiting in index_pending are searched beside the index.
        searcher = _readonly if self.read_only else _sqlite_search
        with self._snapshot() as db:
            if mode == "regex":
                hits, resume = searcher.search_regex(
                    db, conversation_id, token, query, scope, limit, offset
                )
                more = resume is not None
                next_offset = resume or 0
            else:
                try:
                    hits, more = searcher.search_text(
                        db, conversation_id, token, query, scope, limit, offset
                    )
                except sqlite3.OperationalError as exc:  # pragma: no cover - parse_query quotes all
                    raise StoreError(f"search failed for {query!r}: {exc}") from exc
                next_offset = offset + limit
                more = more and next_offset <= _search.MAX_OFFSET
            hits = _sqlite_search.with_summary_ids(db, conversation_id, hits)
        next_cursor = (
            _search.encode_cursor(conversation_id, mode, scope, query, next_offset)
            if more
            else None
        )
        return SearchPage(results=hits, next_cursor=next_cursor)

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
        return [_common.conversation_info(r) for r in rows]

    def _delete_conversations(self, conversation_ids: Sequence[str]) -> None:
        with self._write() as db:
            for conversation_id in conversation_ids:
                row = db.execute(
                    "SELECT search_token FROM conversations WHERE id = ?", (conversation_id,)
                ).fetchone()
                if row is not None:
                    # Every index row of the conversation (segments included) holds its token.
                    doomed = db.execute(
                        "SELECT rowid FROM search_index WHERE search_index MATCH ?",
                        (f'conv : "{row[0]}"',),
                    ).fetchall()
                    db.executemany("DELETE FROM search_index WHERE rowid = ?", doomed)
                db.execute(
                    "DELETE FROM index_pending WHERE rowid IN"
                    " (SELECT rowid FROM messages WHERE conversation_id = ?)",
                    (conversation_id,),
                )
                self._last_texts.pop(conversation_id, None)
                # Edges and context rows go by cascade; deleting them first keeps the
                # cascade from checking summary ids one by one.
                db.execute(
                    "DELETE FROM summary_sources WHERE conversation_id = ?", (conversation_id,)
                )
                db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
                self._tokens.pop(conversation_id, None)

    def sync(self) -> None:
        """Make every committed write durable against a power cut (see the module docstring).

        Called by the lossless engine at the end of every turn and session.
        Forces the write-ahead log to disk (one ``fsync``; the directory too,
        the first time, so the log's name survives as well); copying the log
        into the database file is left to SQLite's own checkpoints, which are
        as durable as the log. Free in memory and with ``synchronous="full"``.
        """
        if self.path == ":memory:" or self.synchronous == "full" or self.read_only:
            return
        with self._lock:
            try:
                _fsync(self.path + "-wal")
                if not self._synced_dir:
                    _fsync(str(Path(self.path).resolve().parent))
                    self._synced_dir = True
            except OSError as exc:
                raise StoreError(f"archive {self.path}: sync failed: {exc}") from exc

    def vacuum(self) -> None:
        """Merge the index, rewrite the file compactly and truncate the WAL."""
        self._writable()
        self.flush_index()
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
            **{k: one(f"SELECT COUNT(*) FROM {t}") for k, t in _common.TABLE_COUNTS.items()},
            "index_rows": one("SELECT COUNT(*) FROM search_index"),
            "index_pending": one("SELECT COUNT(*) FROM index_pending"),
            "file_bytes": one("PRAGMA page_count") * page_size,
            "free_bytes": one("PRAGMA freelist_count") * page_size,
            "wal_bytes": wal.stat().st_size if self.path != ":memory:" and wal.exists() else 0,
        }

    def close(self) -> None:
        """Index what is pending, then close the connection; idempotent.

        Further calls raise :class:`StoreError`. A failing last flush loses
        nothing: the pending rows stay in the file for the next open.
        """
        with self._lock:
            if not self.read_only:
                with suppress(StoreError, sqlite3.Error):
                    self.flush_index()
            self._db.close()
