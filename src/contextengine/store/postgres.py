"""``PostgresStore``: the lossless archive in PostgreSQL, shared by many agents on many hosts.

Same data format and rules as :mod:`contextengine.store.sqlite` (identity
keys, message ids, append-only messages, atomic compaction, deletion only by
retention), in one schema of a PostgreSQL database (default
``contextengine``) created and migrated by the numbered migrations of
:mod:`contextengine.store.postgres_migrations`. Needs the extra:
``pip install 'contextengine[postgres]'`` (psycopg 3 with its pool).

Concurrency, for many processes and hosts writing at once:

* **Appends** lock the conversation's row (``SELECT ... FOR NO KEY UPDATE``)
  while they assign ``seq`` values, so two workers appending to the same
  conversation queue up: seqs have no gaps and no duplicates, and a message
  both store is stored once (``UNIQUE (conversation_id, identity_key)`` with
  ``ON CONFLICT DO NOTHING`` as the last guard). ``NO KEY`` so foreign-key
  checks of other writers (summaries, context) are not blocked by it.
* **Compaction**: :meth:`PostgresStore.commit_compaction` is one transaction
  under ``pg_advisory_xact_lock`` on the conversation, so commits of one
  conversation never interleave and a worker dying mid-commit leaves nothing
  visible. :meth:`PostgresStore.compaction_lock` holds a session lock for a
  whole compaction (summariser calls included) when a host wants only one
  worker to compact a conversation at a time.
* **Turns**: :meth:`PostgresStore.try_turn_lock` /
  :meth:`PostgresStore.release_turn_lock` (and the waiting
  :meth:`~contextengine.store.turn_lock.TurnLock.turn_lock`) hold one
  request of a session at a time across processes (``contextengine serve``
  in a fleet): a session advisory lock per held session, all of a process's
  on one dedicated connection outside the pool, taken with
  ``pg_try_advisory_lock`` (never waiting in the server; the caller polls).
  A turn lasts a whole upstream call: holding a pooled connection for each
  would starve the pool at a few concurrent sessions. See
  :mod:`contextengine.store.turn_lock`.
* **Bulk imports** (:meth:`PostgresStore.import_messages`,
  :meth:`PostgresStore.copy_messages`) take the same row lock per chunk and
  write each chunk with one ``COPY``.
* **Migrations** run under a database-wide advisory lock.

The index (migration 3): ``messages.body`` / ``summaries.body`` hold segment 0
of the searchable text and ``search_segments`` the rest
(:mod:`contextengine.store.segments`); every ``tsv`` is a ``tsvector`` of
Porter stems the store computes (:mod:`contextengine.store.postgres_text`),
the words SQLite's index holds, so both stores match the same rows. Search
(:mod:`contextengine.store.postgres_search`): text mode ranks with the shared
:mod:`contextengine.store.ranking` over bounded GIN probes (never
``ts_rank_cd``, whose cost grows with the matching rows); regex mode uses
``~`` under ``statement_timeout`` over a bounded window of rows per call.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "PostgresStore needs psycopg 3 with its pool: pip install 'contextengine[postgres]'"
        f" ({_exc})"
    ) from _exc

from contextengine.errors import StoreError
from contextengine.store import _common
from contextengine.store import bulk as _bulk
from contextengine.store import postgres_bulk as _pg_bulk
from contextengine.store import search as _search
from contextengine.store._common import message_search_text
from contextengine.store.ids import conversation_id_for, large_content_id_for, summary_id_for
from contextengine.store.postgres_bulk import insert_segments, segment_rows
from contextengine.store.postgres_migrations import apply_pg_migrations, check_pg_schema
from contextengine.store.postgres_search import (
    search_regex,
    search_text,
    translate_regex,
    with_summary_ids,
)
from contextengine.store.postgres_text import tsvector
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
from contextengine.store.segments import segment_text

__all__ = ["DEFAULT_SCHEMA", "PostgresStore", "translate_regex"]

#: Schema of the archive when neither the ``schema`` argument nor ``?schema=`` names one.
DEFAULT_SCHEMA = "contextengine"
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SUMMARY_COLUMNS = (
    "id, conversation_id, kind, depth, content, nul_escaped, token_count, seq_start, seq_end,"
    " time_start, time_end, descendant_count, fallback, created_at"
)
#: Characters of the previous message indexed with each message (as the SQLite store does).
CONTEXT_CHARS = _common.CONTEXT_CHARS


def _parse_url(url: str) -> tuple[str, str | None]:
    """The libpq connection URL and the ``schema`` query parameter (libpq would refuse it)."""
    if url.startswith("postgresql+psycopg://"):
        url = "postgresql://" + url[len("postgresql+psycopg://") :]
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _connect_error(conninfo: str) -> str:
    """Why one plain connection attempt fails (the pool only reports that it timed out)."""
    try:
        psycopg.connect(conninfo, connect_timeout=3).close()
    except psycopg.Error as exc:
        lines = str(exc).strip().splitlines()
        return f": {lines[0]}" if lines else ""
    return ""


def _to_pg_text(text: str) -> tuple[str, bool]:
    """``text`` as PostgreSQL can store it: a JSON literal (flagged) when it holds NUL."""
    if "\x00" in text:
        return json.dumps(text), True
    return text, False


def _from_pg_text(text: str, escaped: bool) -> str:
    return str(json.loads(text)) if escaped else text


def _lock_key(kind: str, schema: str, conversation_id: str) -> str:
    return f"contextengine.{kind}:{schema}:{conversation_id}"


#: Message rows from arrays (per turn; the bulk path uses ``COPY``). ``tsv`` is
#: computed by the store (:func:`~contextengine.store.postgres_text.tsvector`).
_INSERT_MESSAGES = (
    "INSERT INTO messages (id, conversation_id, seq, role, json, token_count,"
    " identity_key, created_at, body, ctx, tsv)"
    " SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::text[], %s::text[],"
    " %s::int[], %s::text[], %s::float8[], %s::text[], %s::text[], %s::tsvector[])"
    " ON CONFLICT DO NOTHING"
)


def insert_summary(
    conn: psycopg.Connection[Any],
    conversation_id: str,
    values: Sequence[Any],
    content: str,
    *,
    skip_existing: bool = False,
) -> bool:
    """Write one summary row and its index segments; False when it was there (``skip_existing``).

    ``values`` are the ``_SUMMARY_COLUMNS`` after ``content`` was replaced by
    its stored form (:func:`_to_pg_text`); ``content`` is the text itself.
    Shared by :meth:`PostgresStore.commit_compaction` and ``archive migrate``.
    """
    segments = segment_text(content.replace("\x00", " "))
    row = conn.execute(
        f"INSERT INTO summaries ({_SUMMARY_COLUMNS}, body, tsv) VALUES"
        " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector)"
        + (" ON CONFLICT DO NOTHING RETURNING pk" if skip_existing else " RETURNING pk"),
        (*values, segments[0], tsvector(segments[0])),
    ).fetchone()
    if row is None:
        return False
    insert_segments(conn, conversation_id, 1, segment_rows(int(row[0]), segments))
    return True


class PostgresStore(_common.StoreBase):
    """The archive in a PostgreSQL schema; implements :class:`~contextengine.store.Store`.

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``, optionally
    ``?schema=name``). ``schema`` overrides the URL's and defaults to
    ``contextengine``. The pool keeps ``min_size`` to ``max_size`` connections
    per process; each call borrows one for one transaction, so ``max_size`` is
    how many calls of this process run at once. ``regex_timeout_ms`` bounds one
    regex search (``statement_timeout``). ``clock``, ``token_counter`` and
    ``redact_at_rest`` (secrets redacted before anything is stored, for an
    archive many hosts share: what is redacted cannot be recovered) as in
    :class:`~contextengine.store.SQLiteStore`.
    """

    MARK = "%s"
    shared_across_processes = True

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 4,
        connect_timeout_s: float = 10.0,
        regex_timeout_ms: int = 5_000,
        clock: Callable[[], float] = time.time,
        token_counter: Callable[[Mapping[str, Any]], int] | None = None,
        redact_at_rest: bool = False,
        read_only: bool = False,
    ) -> None:
        conninfo, url_schema = _parse_url(url)
        self.redact_at_rest = redact_at_rest
        self.read_only = read_only
        self.schema = schema or url_schema or DEFAULT_SCHEMA
        if not _SCHEMA_NAME.match(self.schema):
            raise StoreError(
                f"invalid schema name {self.schema!r}: use lower-case letters, digits and _"
            )
        self.url = _redact_url(conninfo)
        self._clock = clock
        self._count = token_counter or _common.default_token_count
        self._regex_timeout_ms = int(regex_timeout_ms)
        self._conninfo = conninfo
        self._connect_timeout_s = connect_timeout_s
        # The turn locks' connection (outside the pool) and what it holds; see try_turn_lock.
        self._turn_mutex = threading.Lock()
        self._turn_conn: psycopg.Connection[Any] | None = None
        self._turns: dict[str, psycopg.Connection[Any]] = {}
        self._pool = ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max(min_size, max_size),
            open=False,
            configure=self._configure,
            timeout=connect_timeout_s,
            name=f"contextengine-{self.schema}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
            self._migrate()
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreError(
                f"cannot connect to PostgreSQL at {self.url} within {connect_timeout_s:g} s"
                + _connect_error(conninfo)
            ) from exc
        except BaseException:
            self._pool.close()
            raise

    # ------------------------------------------------------------------ plumbing

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Run by the pool on every new connection: the archive's schema first on the path.

        A read-only store's connections refuse every write (the server enforces it).
        """
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(self.schema)))
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")
        conn.commit()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r}, schema={self.schema!r})"

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on a pooled connection: committed on success, rolled back on error."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield conn
        except StoreError:
            raise
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL archive {self.url} ({self.schema}): {exc}") from exc

    def _read(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._tx() as conn:
            return conn.execute(query, params).fetchall()

    def _migrate(self) -> None:
        label = f"PostgreSQL archive {self.url} ({self.schema})"
        if self.read_only:
            check_pg_schema(self._tx, self.schema, label=label)
            return
        apply_pg_migrations(self._tx, self.schema, self._clock, label=label)

    def _lock_conversation(self, conn: psycopg.Connection[Any], conversation_id: str) -> None:
        """Lock the conversation's row for this transaction; unknown id -> StoreError."""
        row = conn.execute(
            "SELECT 1 FROM conversations WHERE id = %s FOR NO KEY UPDATE", (conversation_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"unknown conversation {conversation_id!r}")

    def _require_conversation(self, conn: psycopg.Connection[Any], conversation_id: str) -> None:
        row = conn.execute(
            "SELECT 1 FROM conversations WHERE id = %s", (conversation_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"unknown conversation {conversation_id!r}")

    # ------------------------------------------------------------------ conversations

    def open_conversation(self, session_key: str) -> str:
        """Return the id of the conversation for ``session_key``, creating it if needed.

        Two hosts opening the same new key at once get the same id (the unique
        ``session_key`` decides which insert wins).
        """
        alias = self.session_alias(session_key)
        if alias is not None and not self._select(
            "SELECT 1 FROM conversations WHERE session_key = ?", (session_key,)
        ):
            return alias
        now = self._clock()
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO conversations VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (session_key) DO NOTHING",
                (conversation_id_for(session_key), session_key, now, now),
            )
            row = conn.execute(
                "SELECT id FROM conversations WHERE session_key = %s", (session_key,)
            ).fetchone()
        assert row is not None
        return str(row[0])

    def link_conversations(
        self, conversation_id: str, parent_id: str, *, reason: str = "reset"
    ) -> None:
        """Record that ``conversation_id`` continues ``parent_id`` (its lineage); idempotent."""
        if conversation_id == parent_id:
            return
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO conversation_links VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (conversation_id, parent_id, reason, self._clock()),
            )

    def alias_session(self, session_key: str, conversation_id: str) -> None:
        """Make ``session_key`` open ``conversation_id`` (a session id rotated mid-conversation).

        A key that already names a conversation of its own keeps it.
        """
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO session_aliases VALUES (%s, %s, %s) ON CONFLICT (session_key)"
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

        Called by the engine on every turn; safe from many processes at once
        (see the module docstring). Identity rule: :mod:`contextengine.store.sqlite`.
        ``to_context`` appends the new messages to the active context in the
        same transaction.
        """
        messages = self._at_rest(messages)
        encoded, hashes = _common.encode_batch(messages, token_counts)
        # Token counting can be slow (exact tokenizer): do it before taking the row lock.
        counts = [
            int(token_counts[i]) if token_counts is not None else int(self._count(m))
            for i, m in enumerate(messages)
        ]
        with self._tx() as conn:
            self._lock_conversation(conn, conversation_id)
            if not messages:
                return []
            # The newest row gives both the next seq and the ctx of the first new message.
            last = conn.execute(
                "SELECT seq, body FROM messages WHERE conversation_id = %s"
                " ORDER BY seq DESC LIMIT 1",
                (conversation_id,),
            ).fetchone()
            count = int(last[0]) + 1 if last else 0
            previous = str(last[1]) if last else ""
            keys = self._identity_keys(conn, conversation_id, messages, hashes, count, start_seq)
            existing = {
                r[0]
                for r in conn.execute(
                    "SELECT identity_key FROM messages WHERE conversation_id = %s"
                    " AND identity_key = ANY(%s)",
                    (conversation_id, list(dict.fromkeys(keys))),
                )
            }
            now = self._clock()
            new = _common.new_messages(
                conversation_id, messages, keys, existing, count, now, counts.__getitem__
            )
            rows: list[tuple[Any, ...]] = []
            later: list[tuple[Any, ...]] = []
            for i, m in new:
                segments = segment_text(message_search_text(m.message).replace("\x00", " "))
                values = (m.id, conversation_id, m.seq, m.role, encoded[i], m.token_count)
                context = previous[:CONTEXT_CHARS]
                index = tsvector(segments[0], context)
                rows.append((*values, m.identity_key, now, segments[0], context, index))
                later += segment_rows(m.seq, segments)
                previous = segments[0]
            if rows:
                # One statement over arrays: far faster than executemany's row-by-row protocol.
                conn.execute(_INSERT_MESSAGES, [list(column) for column in zip(*rows, strict=True)])
                insert_segments(conn, conversation_id, 0, later)
                conn.execute(
                    "UPDATE conversations SET updated_at = %s WHERE id = %s",
                    (now, conversation_id),
                )
            stored = [m for _, m in new]
            if to_context:
                self._append_to_context(conn, conversation_id, stored)
        return stored

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
        in transactions of up to :data:`~contextengine.store.bulk.CHUNK`
        messages, each written with one ``COPY`` (the rows' ``tsv`` computed
        in a second thread with the rest of the preparation,
        :mod:`contextengine.store.postgres_bulk`).
        """
        if not messages:
            with self._tx() as conn:
                self._require_conversation(conn, conversation_id)
            return 0
        start = start_seq
        if start is None:
            with self._tx() as conn:
                self._require_conversation(conn, conversation_id)
                count = self.message_count(conversation_id)
                hashes = [_common.canonical_hash(m) for m in messages[: min(len(messages), count)]]
                start = _pg_bulk.identity_start(conn, conversation_id, hashes, count)
        messages = self._at_rest(messages)
        chunks = _bulk.prepare_messages(
            conversation_id,
            messages,
            start=start,
            token_counts=token_counts,
            count=self._count,
            index=_pg_bulk.index_data,
        )
        return _pg_bulk.write_chunks(self, conversation_id, chunks, to_context=to_context)

    def copy_messages(self, conversation_id: str, records: Iterable[StoredMessage]) -> int:
        """Write messages read from another archive verbatim; return how many were new.

        ``contextengine archive migrate`` uses it. Ids, identity keys, seqs,
        token counts and timestamps are kept. Records whose identity is stored
        are skipped; the others must continue the history (the first new one at
        ``seq == message_count``, then one after another), else :class:`StoreError`.
        """
        chunks = _bulk.prepare_records(self._records_at_rest(records), index=_pg_bulk.index_data)
        return _pg_bulk.write_chunks(self, conversation_id, chunks, to_context=False)

    # ------------------------------------------------------------------ summaries and context

    def _summaries(
        self, conn: psycopg.Connection[Any], rows: Sequence[Sequence[Any]]
    ) -> list[SummaryRecord]:
        ids = [r[0] for r in rows]
        sources: dict[str, list[str]] = {i: [] for i in ids}
        for summary_id, source_id in conn.execute(
            "SELECT summary_id, source_id FROM summary_sources WHERE summary_id = ANY(%s)"
            " ORDER BY summary_id, position",
            (ids,),
        ):
            sources[summary_id].append(source_id)
        # Rows carry ``nul_escaped`` after ``content``; the record wants the decoded text.
        return [
            _common.summary_record((*r[:4], _from_pg_text(r[4], r[5]), *r[6:]), sources[r[0]])
            for r in rows
        ]

    def get_summary(self, conversation_id: str, summary_id: str) -> SummaryRecord | None:
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE id = %s AND conversation_id = %s",
                (summary_id, conversation_id),
            ).fetchall()
            return self._summaries(conn, rows)[0] if rows else None

    def _check_refs(
        self, conn: psycopg.Connection[Any], conversation_id: str, kind: str, ids: Sequence[str]
    ) -> None:
        """Refuse references to items this conversation does not hold (isolation, integrity)."""
        unique = list(dict.fromkeys(ids))
        if not unique:
            return
        table = "messages" if kind == "message" else "summaries"
        found = {
            r[0]
            for r in conn.execute(
                f"SELECT id FROM {table} WHERE conversation_id = %s AND id = ANY(%s)",
                (conversation_id, unique),
            )
        }
        missing = set(unique) - found
        if missing:
            raise _common.unknown_refs(conversation_id, kind, missing)

    def _write_context(
        self, conn: psycopg.Connection[Any], conversation_id: str, items: Sequence[ContextRef]
    ) -> None:
        for kind in ("message", "summary"):
            self._check_refs(conn, conversation_id, kind, [i.id for i in items if i.kind == kind])
        conn.execute("DELETE FROM context_items WHERE conversation_id = %s", (conversation_id,))
        if items:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO context_items VALUES (%s, %s, %s, %s)",
                    [(conversation_id, pos, item.kind, item.id) for pos, item in enumerate(items)],
                )

    def replace_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None:
        """Persist the active context; every reference must belong to this conversation."""
        with self._tx() as conn:
            self._lock_conversation(conn, conversation_id)
            self._write_context(conn, conversation_id, items)
            conn.execute(
                "UPDATE conversations SET updated_at = %s WHERE id = %s",
                (self._clock(), conversation_id),
            )

    def append_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None:
        """Add references at the end of the active context: the per-turn case, in O(new items)."""
        with self._tx() as conn:
            self._lock_conversation(conn, conversation_id)
            for kind in ("message", "summary"):
                self._check_refs(
                    conn, conversation_id, kind, [i.id for i in items if i.kind == kind]
                )
            self._insert_context(
                conn, conversation_id, self._context_end(conn, conversation_id), items
            )
            conn.execute(
                "UPDATE conversations SET updated_at = %s WHERE id = %s",
                (self._clock(), conversation_id),
            )

    def commit_compaction(
        self,
        conversation_id: str,
        summaries: Sequence[NewSummary],
        new_context: Sequence[ContextRef] | ContextSplice | None,
    ) -> list[SummaryRecord]:
        """Write summaries with their edges, and change the active context, in one transaction.

        Called by the engine once per compaction step. Holds the conversation's
        compaction commit lock (``pg_advisory_xact_lock``) for the transaction:
        commits of one conversation never interleave, and nothing is visible
        until the whole step commits. ``new_context`` (the whole context, or a
        :class:`ContextSplice` of one run) may name the new summaries as
        ``"new:0"``, ``"new:1"``...
        """
        now = self._clock()
        records: list[SummaryRecord] = []
        with self._tx() as conn:
            key = _lock_key("commit", self.schema, conversation_id)
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
            self._require_conversation(conn, conversation_id)
            splice_at = (
                self._locate_splice(conn, conversation_id, new_context)
                if isinstance(new_context, ContextSplice)
                else (0, 0)
            )
            written: list[str] = []
            for summary in summaries:
                source_kind = _common.source_kind(summary)
                sources = _common.resolve_sources(summary, written)
                self._check_refs(conn, conversation_id, source_kind, sources)
                summary_id = summary_id_for(conversation_id, summary.kind, sources, summary.content)
                records.append(
                    _common.new_summary_record(conversation_id, summary_id, summary, sources, now)
                )
                written.append(summary_id)
                if self._summary_exists(conn, conversation_id, summary_id):
                    continue
                content, escaped = _to_pg_text(summary.content)
                insert_summary(
                    conn,
                    conversation_id,
                    (
                        summary_id,
                        conversation_id,
                        summary.kind,
                        summary.depth,
                        content,
                        escaped,
                        summary.token_count,
                        summary.seq_start,
                        summary.seq_end,
                        summary.time_start,
                        summary.time_end,
                        summary.descendant_count,
                        bool(summary.fallback),
                        now,
                    ),
                    summary.content,
                )
                if sources:
                    with conn.cursor() as cur:
                        cur.executemany(
                            "INSERT INTO summary_sources VALUES (%s, %s, %s, %s, %s)",
                            [
                                (summary_id, pos, source_kind, source, conversation_id)
                                for pos, source in enumerate(sources)
                            ],
                        )
            if isinstance(new_context, ContextSplice):
                self._apply_splice(conn, conversation_id, new_context, splice_at, written)
            elif new_context is not None:
                resolved = _common.resolve_context(new_context, written)
                self._write_context(conn, conversation_id, resolved)
            conn.execute(
                "UPDATE conversations SET updated_at = %s WHERE id = %s", (now, conversation_id)
            )
        return records

    @contextmanager
    def compaction_lock(self, conversation_id: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the conversation's compaction lock for a whole compaction; yields whether held.

        For hosts running several workers per conversation: wrap the compaction
        (summariser calls and :meth:`commit_compaction`) in it and only one
        worker compacts a conversation at a time. With ``wait=False`` it yields
        False at once when another worker holds the lock (skip compacting).
        The lock is a session advisory lock on a dedicated pooled connection:
        a worker that dies releases it with its connection.
        """
        key = _lock_key("compaction", self.schema, conversation_id)
        try:
            with self._pool.connection() as conn:
                conn.autocommit = True
                try:
                    if wait:
                        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
                        held = True
                    else:
                        row = conn.execute(
                            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)
                        ).fetchone()
                        held = bool(row and row[0])
                    try:
                        yield held
                    finally:
                        if held:
                            conn.execute(
                                "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,)
                            )
                finally:
                    conn.autocommit = False
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL archive {self.url}: compaction lock: {exc}") from exc

    # ------------------------------------------------------------------ turn locks

    def _turn_connection(self) -> psycopg.Connection[Any]:
        """The connection holding this process's turn locks (opened on first use)."""
        conn = self._turn_conn
        if conn is None or conn.closed:
            conn = psycopg.connect(
                self._conninfo, autocommit=True, connect_timeout=int(self._connect_timeout_s)
            )
            self._turn_conn = conn
        return conn

    def _drop_turn_connection(self) -> None:
        conn, self._turn_conn = self._turn_conn, None
        if conn is not None:
            conn.close()

    def try_turn_lock(self, session_key: str) -> bool:
        """Take ``session_key``'s turn lock unless a process (this one included) holds it.

        One round trip, never waiting in the server. The lock is a session
        advisory lock on this store's turn connection, one connection per
        process whatever the number of held locks. When that connection is
        lost, PostgreSQL releases every lock it held: the turns in flight
        finish without it (logged by the caller as a store error on release)
        and the next ones lock on a new connection.
        """
        key = _lock_key("turn", self.schema, session_key)
        with self._turn_mutex:
            if session_key in self._turns:
                return False  # advisory locks are re-entrant per connection: refuse it here
            try:
                conn = self._turn_connection()
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)
                ).fetchone()
            except psycopg.Error as exc:
                self._drop_turn_connection()
                raise StoreError(f"PostgreSQL archive {self.url}: turn lock: {exc}") from exc
            if row and row[0]:
                self._turns[session_key] = conn
                return True
            return False

    def release_turn_lock(self, session_key: str) -> None:
        """Release a turn lock :meth:`try_turn_lock` took (a key not held: nothing happens)."""
        key = _lock_key("turn", self.schema, session_key)
        with self._turn_mutex:
            conn = self._turns.pop(session_key, None)
            if conn is None or conn is not self._turn_conn or conn.closed:
                return  # its connection is gone, and the lock with it
            try:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
            except psycopg.Error as exc:
                self._drop_turn_connection()  # which releases whatever it held
                raise StoreError(f"PostgreSQL archive {self.url}: turn unlock: {exc}") from exc

    # ------------------------------------------------------------------ large contents

    def put_large_content(
        self, conversation_id: str, message_id: str, content: str, token_count: int
    ) -> LargeContent:
        """Store a tool result too large for the view; the engine calls it when swapping one out.

        One large content per message (its id derives from the message's):
        storing it again returns the stored one.
        """
        content = self._content_at_rest(content)
        content_id = large_content_id_for(conversation_id, message_id)
        text, escaped = _to_pg_text(content)
        with self._tx() as conn:
            self._require_conversation(conn, conversation_id)
            conn.execute(
                "INSERT INTO large_contents VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (
                    content_id,
                    conversation_id,
                    message_id,
                    text,
                    escaped,
                    token_count,
                    self._clock(),
                ),
            )
        return self._written_large_content(conversation_id, content_id)

    def get_large_content(self, conversation_id: str, content_id: str) -> LargeContent | None:
        rows = self._read(
            "SELECT id, conversation_id, message_id, content, nul_escaped, token_count, created_at"
            " FROM large_contents WHERE id = %s AND conversation_id = %s",
            (content_id, conversation_id),
        )
        if not rows:
            return None
        r = rows[0]
        return _common.large_content((*r[:3], _from_pg_text(r[3], r[4]), *r[5:]))

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
        """Ranked full-text (``ts_rank_cd`` + proximity rerank) or bounded regex search.

        The engine of ``lcm_grep``, scoped to one conversation. Raises
        :class:`StoreError` for an unknown conversation, a bad mode/scope/cursor,
        an invalid regex or a regex that runs past ``regex_timeout_ms``.
        """
        limit, offset = _common.check_search(conversation_id, query, mode, scope, limit, cursor)
        with self._tx() as conn:
            # One snapshot for every query of the search.
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._require_conversation(conn, conversation_id)
            if mode == "regex":
                hits, resume = search_regex(
                    conn, conversation_id, query, scope, limit, offset, self._regex_timeout_ms
                )
                more, next_offset = resume is not None, resume or 0
            else:
                hits, more = search_text(conn, conversation_id, query, scope, limit, offset)
                next_offset = offset + limit
                more = more and next_offset <= _search.MAX_OFFSET
            hits = with_summary_ids(conn, conversation_id, hits)
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
            " (SELECT COALESCE(SUM(octet_length(m.json)), 0) FROM messages m"
            "   WHERE m.conversation_id = c.id)"
            " + (SELECT COALESCE(SUM(octet_length(s.content)), 0) FROM summaries s"
            "   WHERE s.conversation_id = c.id)"
            " + (SELECT COALESCE(SUM(octet_length(l.content)), 0) FROM large_contents l"
            "   WHERE l.conversation_id = c.id)"
            " FROM conversations c ORDER BY c.updated_at, c.id"
        )
        return [_common.conversation_info(r) for r in rows]

    def _delete_conversations(self, conversation_ids: Sequence[str]) -> None:
        with self._tx() as conn:
            for conversation_id in conversation_ids:
                # Edges first: the cascade from summaries would otherwise check them one by one.
                conn.execute(
                    "DELETE FROM summary_sources WHERE conversation_id = %s", (conversation_id,)
                )
                conn.execute("DELETE FROM conversations WHERE id = %s", (conversation_id,))

    def vacuum(self) -> None:
        """``VACUUM (ANALYZE)`` the archive's tables, outside a transaction as PostgreSQL needs."""
        try:
            with self._pool.connection() as conn:
                conn.autocommit = True
                try:
                    for table in (*_common.TABLE_COUNTS.values(), "search_segments"):
                        conn.execute(
                            sql.SQL("VACUUM (ANALYZE) {}.{}").format(
                                sql.Identifier(self.schema), sql.Identifier(table)
                            )
                        )
                finally:
                    conn.autocommit = False
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreError(f"PostgreSQL archive {self.url}: vacuum failed: {exc}") from exc

    def stats(self) -> dict[str, Any]:
        """Counts of every kind of row, the schema version and the bytes the schema takes."""
        with self._tx() as conn:

            def one(query: str, params: Sequence[Any] = ()) -> int:
                row = conn.execute(query, params).fetchone()
                return int(row[0]) if row and row[0] is not None else 0

            return {
                "url": self.url,
                "schema": self.schema,
                "schema_version": one("SELECT MAX(version) FROM schema_version"),
                **{k: one(f"SELECT COUNT(*) FROM {t}") for k, t in _common.TABLE_COUNTS.items()},
                "index_rows": one(
                    "SELECT (SELECT COUNT(*) FROM messages) + (SELECT COUNT(*) FROM summaries)"
                    " + (SELECT COUNT(*) FROM search_segments)"
                ),
                "file_bytes": one(
                    "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE n.nspname = %s AND c.relkind = 'r'",
                    (self.schema,),
                ),
                "trigram_index": bool(
                    one(
                        "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = %s"
                        " AND indexname = 'messages_body_trgm'",
                        (self.schema,),
                    )
                ),
            }

    def close(self) -> None:
        """Close the pool and the turn connection; further calls raise :class:`StoreError`."""
        with self._turn_mutex:
            self._turns.clear()
            self._drop_turn_connection()
        self._pool.close()
