"""The archive rules every store shares, whatever its SQL: identities, ids, alignment, records.

:class:`~contextengine.store.SQLiteStore` and
:class:`~contextengine.store.postgres.PostgresStore` keep their own SQL (the
dialects differ) and call these helpers for everything that is the archive
*format* rather than a database's way of storing it: the identity key of a
message, its id, how a batch given without ``start_seq`` is aligned against
the stored history, how the ``"new:N"`` placeholders of a compaction resolve,
and how rows become the records of :mod:`contextengine.store.protocol`. One
copy, so an archive copied between stores keeps its identities and ids.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Self

from contextengine.errors import InvalidMessagesError, StoreConflictError, StoreError
from contextengine.messages import message_text
from contextengine.redact import redact, redact_message
from contextengine.store import search as _search
from contextengine.store.ids import large_content_id_for
from contextengine.store.protocol import (
    ContextRef,
    ContextSplice,
    ConversationInfo,
    LargeContent,
    NewSummary,
    StoredMessage,
    SummaryRecord,
)
from contextengine.store.retention import plan_prune
from contextengine.store.turn_lock import TurnLock

__all__ = [
    "CONTEXT_CHARS",
    "MAX_LINEAGE",
    "MESSAGE_COLUMNS",
    "TABLE_COUNTS",
    "StoreBase",
    "align_batch",
    "canonical_hash",
    "check_search",
    "conversation_info",
    "default_token_count",
    "encode_batch",
    "identity_key",
    "large_content",
    "message_id_for",
    "message_search_text",
    "new_messages",
    "new_summary_record",
    "resolve_context",
    "resolve_sources",
    "source_kind",
    "stored_message",
    "summary_record",
    "unknown_refs",
]

#: The most conversations a lineage holds (:meth:`StoreBase.conversation_lineage`).
MAX_LINEAGE = 64
#: Characters of the previous message indexed with each message (its search context).
CONTEXT_CHARS = 300
#: The columns of a message row, in the order :func:`stored_message` reads them.
MESSAGE_COLUMNS = "id, conversation_id, seq, role, json, token_count, identity_key, created_at"
#: Keys of :meth:`Store.stats` counted by ``SELECT COUNT(*)``, and their tables, in report order.
TABLE_COUNTS = {
    "conversations": "conversations",
    "messages": "messages",
    "summaries": "summaries",
    "summary_edges": "summary_sources",
    "context_items": "context_items",
    "large_contents": "large_contents",
}


def message_search_text(msg: Mapping[str, Any]) -> str:
    """The text of a message the full-text index holds: content plus tool calls as name(args)."""
    return message_text(msg if isinstance(msg, dict) else dict(msg))


def canonical_hash(msg: Mapping[str, Any]) -> str:
    """sha256 of the message's canonical JSON (sorted keys): its content identity."""
    canonical = json.dumps(msg, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def identity_key(msg: Mapping[str, Any], position: int, content_hash: str | None = None) -> str:
    """The identity key of ``msg`` at ``position`` in its history (see :mod:`.sqlite`)."""
    msg_id = msg.get("id")
    if isinstance(msg_id, str) and msg_id:
        return f"id:{msg_id}"
    # Tool-call ids are deliberately not identities: real providers recycle
    # them (tau-bench's gpt-4o runs reuse one id for several different calls),
    # and keying on them silently dropped the later, different messages.
    return f"h:{position}:{content_hash or canonical_hash(msg)}"


def message_id_for(conversation_id: str, key: str) -> str:
    """``msg_`` + 16 hex of the conversation and identity key: stable across stores."""
    return "msg_" + hashlib.sha256(f"{conversation_id}\0{key}".encode()).hexdigest()[:16]


def default_token_count(msg: Mapping[str, Any]) -> int:
    """A message's tokens when the caller gives none (the stores' default ``token_counter``)."""
    try:
        from contextengine.tokens import message_tokens
    except ImportError:  # pragma: no cover - tokens.py is written in parallel
        return max(1, len(json.dumps(msg, ensure_ascii=False)) // 4)
    return int(message_tokens(msg))


def encode_batch(
    messages: Sequence[Any], token_counts: Sequence[int] | None
) -> tuple[list[str], list[str]]:
    """Validate a batch for ``append_messages``; return its compact JSON and canonical hashes.

    Runs before any transaction, so a bad message costs no lock.
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
        hashes.append(canonical_hash(msg))
    return encoded, hashes


def align_batch(
    stored_json: Callable[[int, int], Sequence[str]], count: int, hashes: Sequence[str]
) -> int:
    """Where a batch given without ``start_seq`` starts in a history of ``count`` messages.

    ``stored_json(lo, hi)`` returns the stored JSON of seqs ``lo <= seq < hi``
    in order (the store runs it inside its append transaction). The rule is in
    the docstring of :mod:`contextengine.store.sqlite`.
    """
    if count == 0:
        return 0
    n = len(hashes)

    def stored_hashes(lo: int, hi: int) -> list[str]:
        return [canonical_hash(json.loads(text)) for text in stored_json(lo, hi)]

    head = stored_hashes(0, min(n, count))
    if head == list(hashes[: len(head)]):
        return 0
    tail_start = max(1, count - n)
    tail = stored_hashes(tail_start, count)
    for start in range(tail_start, count):
        overlap = tail[start - tail_start :]
        if overlap == list(hashes[: len(overlap)]):
            return start
    return count


def new_messages(
    conversation_id: str,
    messages: Sequence[dict[str, Any]],
    keys: Sequence[str],
    existing: set[str],
    count: int,
    now: float,
    tokens: Callable[[int], int],
) -> list[tuple[int, StoredMessage]]:
    """The messages of a batch to store, each with its index in the batch, in order.

    Skips identities in ``existing`` (which it extends, so a batch repeating a
    message stores it once) and numbers the rest from ``count``.
    ``tokens(i)`` gives the token count of ``messages[i]``; it is called only
    for messages that are stored.
    """
    out: list[tuple[int, StoredMessage]] = []
    for i, msg in enumerate(messages):
        key = keys[i]
        if key in existing:
            continue
        existing.add(key)
        stored = StoredMessage(
            id=message_id_for(conversation_id, key),
            conversation_id=conversation_id,
            seq=count + len(out),
            role=str(msg.get("role", "")),
            message=msg,
            token_count=int(tokens(i)),
            identity_key=key,
            created_at=now,
        )
        out.append((i, stored))
    return out


def stored_message(row: Sequence[Any]) -> StoredMessage:
    """A message row (``id, conversation_id, seq, role, json, token_count, identity_key,
    created_at``) as its record."""
    return StoredMessage(
        id=row[0],
        conversation_id=row[1],
        seq=int(row[2]),
        role=row[3],
        message=json.loads(row[4]),
        token_count=int(row[5]),
        identity_key=row[6],
        created_at=float(row[7]),
    )


def summary_record(row: Sequence[Any], source_ids: Sequence[str]) -> SummaryRecord:
    """A summary row as its record: ``id, conversation_id, kind, depth, content, token_count,
    seq_start, seq_end, time_start, time_end, descendant_count, fallback, created_at``."""
    return SummaryRecord(
        id=row[0],
        conversation_id=row[1],
        kind=row[2],
        depth=int(row[3]),
        content=row[4],
        token_count=int(row[5]),
        seq_start=int(row[6]),
        seq_end=int(row[7]),
        time_start=float(row[8]),
        time_end=float(row[9]),
        descendant_count=int(row[10]),
        fallback=bool(row[11]),
        created_at=float(row[12]),
        source_ids=tuple(source_ids),
    )


def large_content(row: Sequence[Any]) -> LargeContent:
    """A large-content row (``id, conversation_id, message_id, content, token_count,
    created_at``) as its record."""
    return LargeContent(
        id=row[0],
        conversation_id=row[1],
        message_id=row[2],
        content=row[3],
        token_count=int(row[4]),
        created_at=float(row[5]),
    )


def conversation_info(row: Sequence[Any]) -> ConversationInfo:
    """A ``list_conversations`` row (``id, session_key, created_at, updated_at, messages,
    summaries, bytes``) as its record."""
    return ConversationInfo(
        id=row[0],
        session_key=row[1],
        created_at=float(row[2]),
        updated_at=float(row[3]),
        message_count=int(row[4]),
        summary_count=int(row[5]),
        bytes=int(row[6]),
    )


def source_kind(summary: NewSummary) -> str:
    """What a new summary's sources are (``message`` for a leaf); refuses any other kind."""
    if summary.kind not in ("leaf", "condensed"):
        raise StoreError(f"summary kind must be leaf or condensed, not {summary.kind!r}")
    return "message" if summary.kind == "leaf" else "summary"


def resolve_sources(summary: NewSummary, written: Sequence[str]) -> list[str]:
    """The source ids of ``summary`` with ``"new:N"`` replaced by the N-th summary written."""
    try:
        return [written[int(s[4:])] if s.startswith("new:") else s for s in summary.source_ids]
    except (ValueError, IndexError):
        raise StoreError("a source placeholder names no earlier new summary") from None


def resolve_context(items: Sequence[ContextRef], written: Sequence[str]) -> list[ContextRef]:
    """The new context of a compaction with ``"new:N"`` replaced by the N-th summary written."""
    resolved = []
    for item in items:
        if item.id.startswith("new:"):
            try:
                item = ContextRef(kind="summary", id=written[int(item.id[4:])])
            except (ValueError, IndexError):
                raise StoreError(f"no new summary for placeholder {item.id!r}") from None
        resolved.append(item)
    return resolved


def new_summary_record(
    conversation_id: str, summary_id: str, summary: NewSummary, sources: Sequence[str], now: float
) -> SummaryRecord:
    """The record of a summary ``commit_compaction`` just wrote."""
    return SummaryRecord(
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


def unknown_refs(conversation_id: str, kind: str, missing: Iterable[str]) -> StoreError:
    """The error for references to items conversation ``conversation_id`` does not hold."""
    return StoreError(
        f"unknown {kind} id(s) in conversation {conversation_id!r}: "
        + ", ".join(sorted(missing)[:5])
    )


def check_search(
    conversation_id: str, query: str, mode: str, scope: str, limit: int, cursor: str | None
) -> tuple[int, int]:
    """Validate the arguments of ``Store.search``; return the clamped limit and the offset."""
    if mode not in ("text", "regex"):
        raise StoreError(f"mode must be 'text' or 'regex', not {mode!r}")
    if scope not in ("messages", "summaries", "all"):
        raise StoreError(f"scope must be 'messages', 'summaries' or 'all', not {scope!r}")
    limit = max(1, min(int(limit), _search.MAX_LIMIT))
    offset = _search.decode_cursor(cursor, conversation_id, mode, scope, query) if cursor else 0
    if mode == "text" and offset > _search.MAX_OFFSET:
        raise StoreError(
            f"search results beyond {_search.MAX_OFFSET} are not served; refine the query"
        )
    return limit, offset


class StoreBase(abc.ABC, TurnLock):
    """The methods of a store whose SQL is the same in every dialect but for the parameter mark.

    A store subclasses it, sets :attr:`MARK` and implements :meth:`_read` (one
    read-only query), :meth:`_delete_conversations` (one transaction) and the
    methods whose SQL differs. The queries here are written with ``?`` marks
    and hold no other ``?``; :meth:`_select` turns them into the store's marks.
    The turn lock (:class:`~contextengine.store.turn_lock.TurnLock`) is
    in-process unless the store overrides it (PostgreSQL).
    """

    #: The dialect's parameter mark: ``?`` (sqlite3) or ``%s`` (psycopg).
    MARK: ClassVar[str] = "?"
    _clock: Callable[[], float]
    #: Opt-in: secrets are redacted before anything is stored (the constructors'
    #: ``redact_at_rest``). What is redacted at rest cannot be recovered.
    redact_at_rest: bool = False

    def _at_rest(self, messages: Sequence[Any]) -> Sequence[Any]:
        """The messages as this store keeps them: redacted when ``redact_at_rest``.

        Redaction is deterministic and idempotent, so identities (derived from
        the stored content) stay stable when the same message comes again.
        """
        if not self.redact_at_rest:
            return messages
        return [redact_message(m) if isinstance(m, dict) else m for m in messages]

    def _records_at_rest(self, records: Iterable[StoredMessage]) -> Iterable[StoredMessage]:
        """Copied records as this store keeps them (ids and identity keys unchanged)."""
        if not self.redact_at_rest:
            return records
        return (dataclasses.replace(r, message=redact_message(r.message)) for r in records)

    def _content_at_rest(self, content: str) -> str:
        return redact(content) if self.redact_at_rest else content

    @abc.abstractmethod
    def _read(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one read-only query; return its rows (store errors as :class:`StoreError`)."""

    @abc.abstractmethod
    def _delete_conversations(self, conversation_ids: Sequence[str]) -> None:
        """Delete whole conversations with all their rows, in one transaction."""

    @abc.abstractmethod
    def list_conversations(self) -> list[ConversationInfo]: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abc.abstractmethod
    def get_large_content(self, conversation_id: str, content_id: str) -> LargeContent | None: ...

    def _select(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._read(query.replace("?", self.MARK), params)

    # ---------------------------------------------------------------- lineage (migration 5)

    def conversation_lineage(self, conversation_id: str) -> list[str]:
        """``conversation_id`` and the conversations it continues, nearest first.

        Follows ``conversation_links`` from child to parent only, so the
        lineage of a conversation never holds one that merely continues it,
        nor any conversation outside its chain; at most :data:`MAX_LINEAGE`
        ids, each once (a cycle, which no engine writes, cannot loop).
        """
        lineage = [conversation_id]
        seen = {conversation_id}
        frontier = [conversation_id]
        while frontier and len(lineage) < MAX_LINEAGE:
            marks = ", ".join("?" * len(frontier))
            rows = self._select(
                f"SELECT parent_id FROM conversation_links WHERE conversation_id IN ({marks})"
                " ORDER BY created_at DESC, parent_id",
                frontier,
            )
            frontier = []
            for (parent,) in rows:
                if parent not in seen and len(lineage) < MAX_LINEAGE:
                    seen.add(parent)
                    lineage.append(str(parent))
                    frontier.append(str(parent))
        return lineage

    def session_stamp(self, session_key: str) -> tuple[int, float] | None:
        """What ``session_key``'s conversation holds now: (message count, ``updated_at``).

        None when the archive has no conversation for the key. Every write
        that changes what a host would load (messages, context, compactions)
        moves ``updated_at``, so a host that saw one stamp and finds another
        knows someone else wrote since: ``contextengine serve`` compares them
        under its turn lock to notice that another process served the session.
        One indexed query, whatever the conversation's length (two for an alias).
        """
        query = (
            "SELECT COALESCE((SELECT MAX(seq) + 1 FROM messages m WHERE m.conversation_id = c.id),"
            " 0), c.updated_at FROM conversations c WHERE c.{} = ?"
        )
        rows = self._select(query.format("session_key"), (session_key,))
        if not rows:
            alias = self.session_alias(session_key)
            rows = self._select(query.format("id"), (alias,)) if alias is not None else []
        return (int(rows[0][0]), float(rows[0][1])) if rows else None

    def session_alias(self, session_key: str) -> str | None:
        """The conversation ``session_key`` continues (:meth:`alias_session`), or None."""
        rows = self._select(
            "SELECT conversation_id FROM session_aliases WHERE session_key = ?", (session_key,)
        )
        return str(rows[0][0]) if rows else None

    def _identity_keys(
        self,
        conn: Any,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        hashes: Sequence[str],
        count: int,
        start_seq: int | None,
    ) -> list[str]:
        """The identity keys of a batch ``append_messages`` got, inside its transaction.

        ``conn`` is the transaction's connection (sqlite3 or psycopg: both
        ``execute(...).fetchall()``); ``count`` is how many messages are stored.
        Without ``start_seq`` the batch is aligned by :func:`align_batch`.
        """

        def stored_json(lo: int, hi: int) -> list[str]:
            rows = conn.execute(
                "SELECT json FROM messages WHERE conversation_id = ? AND seq >= ? AND seq < ?"
                " ORDER BY seq".replace("?", self.MARK),
                (conversation_id, lo, hi),
            ).fetchall()
            return [r[0] for r in rows]

        start = start_seq if start_seq is not None else align_batch(stored_json, count, hashes)
        return [
            identity_key(m, start + i, h)
            for i, (m, h) in enumerate(zip(messages, hashes, strict=True))
        ]

    @abc.abstractmethod
    def _check_refs(self, conn: Any, conversation_id: str, kind: str, ids: Sequence[str]) -> None:
        """Refuse references to items this conversation does not hold (inside a transaction)."""

    @abc.abstractmethod
    def get_summary(self, conversation_id: str, summary_id: str) -> SummaryRecord | None: ...

    def _context_end(self, conn: Any, conversation_id: str) -> int:
        """The position after the last item of the active context, inside a transaction."""
        row = conn.execute(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM context_items"
            f" WHERE conversation_id = {self.MARK}",
            (conversation_id,),
        ).fetchone()
        return int(row[0]) if row else 0

    def _insert_context(
        self, conn: Any, conversation_id: str, start: int, items: Sequence[ContextRef]
    ) -> None:
        """Write ``items`` at positions ``start``, ``start + 1``... (checked by the caller)."""
        if items:
            conn.cursor().executemany(
                "INSERT INTO context_items VALUES (?, ?, ?, ?)".replace("?", self.MARK),
                [(conversation_id, start + n, item.kind, item.id) for n, item in enumerate(items)],
            )

    def _locate_splice(
        self, conn: Any, conversation_id: str, splice: ContextSplice
    ) -> tuple[int, int]:
        """The positions of a :class:`ContextSplice`'s run, checked before anything is written.

        Raises :class:`StoreConflictError` when the run is not in the active
        context as described (another writer changed it first).
        """
        if splice.count < 1 or len(splice.replacement) > splice.count:
            raise StoreError(
                f"a context splice replaces {splice.count} item(s) with"
                f" {len(splice.replacement)}: it may only shrink a run of at least one item"
            )
        mark = self.MARK
        found = dict(
            conn.execute(
                f"SELECT ref_id, position FROM context_items WHERE conversation_id = {mark}"
                f" AND ref_id IN ({mark}, {mark})",
                (conversation_id, splice.first_id, splice.last_id),
            ).fetchall()
        )
        first, last = found.get(splice.first_id), found.get(splice.last_id)
        span = None
        if first is not None and last is not None and int(first) <= int(last):
            row = conn.execute(
                f"SELECT COUNT(*) FROM context_items WHERE conversation_id = {mark}"
                f" AND position >= {mark} AND position <= {mark}",
                (conversation_id, first, last),
            ).fetchone()
            span = int(row[0])
        if span != splice.count or first is None or last is None:
            raise StoreConflictError(
                f"conversation {conversation_id!r}: the active context no longer holds the"
                f" {splice.count} item(s) from {splice.first_id} to {splice.last_id}"
                " (another writer changed it); reload it and compact again"
            )
        return int(first), int(last)

    def _apply_splice(
        self,
        conn: Any,
        conversation_id: str,
        splice: ContextSplice,
        run: tuple[int, int],
        written: Sequence[str],
    ) -> None:
        """Replace the run located at positions ``run`` in O(run length), in the same transaction.

        The replacement takes the first positions of the run; the items after
        it keep theirs (positions only order the context, gaps are allowed).
        """
        replacement = resolve_context(splice.replacement, written)
        for kind in ("message", "summary"):
            self._check_refs(
                conn, conversation_id, kind, [i.id for i in replacement if i.kind == kind]
            )
        mark = self.MARK
        conn.execute(
            f"DELETE FROM context_items WHERE conversation_id = {mark}"
            f" AND position >= {mark} AND position <= {mark}",
            (conversation_id, *run),
        )
        self._insert_context(conn, conversation_id, run[0], replacement)

    def _summary_exists(self, conn: Any, conversation_id: str, summary_id: str) -> bool:
        """Whether a summary with this id is stored: ids derive from conversation, sources and
        text, so it is this very summary (two workers, or a retried step, wrote it)."""
        row = conn.execute(
            "SELECT 1 FROM summaries WHERE id = ? AND conversation_id = ?".replace("?", self.MARK),
            (summary_id, conversation_id),
        ).fetchone()
        return row is not None

    def _append_to_context(
        self, conn: Any, conversation_id: str, stored: Sequence[StoredMessage]
    ) -> None:
        """``append_messages(to_context=True)``: the new messages join the active context.

        A system prompt stored at seq 0 stays out: the engine sends it from its
        own copy, ahead of everything else.
        """
        refs = [
            ContextRef(kind="message", id=m.id)
            for m in stored
            if not (m.seq == 0 and m.role == "system")
        ]
        if refs:
            self._insert_context(
                conn, conversation_id, self._context_end(conn, conversation_id), refs
            )

    def load_context(self, conversation_id: str) -> list[StoredMessage | SummaryRecord]:
        """The active context with every reference resolved, in order (see :class:`Store`).

        One query for the messages (joined to the context), one per summary:
        a context holds few summaries, since they are condensed as they accumulate.
        """
        columns = ", ".join("m." + column.strip() for column in MESSAGE_COLUMNS.split(","))
        placed: list[tuple[int, StoredMessage | SummaryRecord]] = [
            (int(row[0]), stored_message(row[1:]))
            for row in self._select(
                f"SELECT c.position, {columns} FROM context_items c JOIN messages m"
                " ON m.id = c.ref_id AND m.conversation_id = c.conversation_id"
                " WHERE c.conversation_id = ? AND c.kind = 'message'",
                (conversation_id,),
            )
        ]
        for position, summary_id in self._select(
            "SELECT position, ref_id FROM context_items WHERE conversation_id = ?"
            " AND kind = 'summary'",
            (conversation_id,),
        ):
            record = self.get_summary(conversation_id, summary_id)
            if record is not None:
                placed.append((int(position), record))
        placed.sort(key=lambda entry: entry[0])
        return [item for _, item in placed]

    def message_count(self, conversation_id: str) -> int:
        rows = self._select(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
            (conversation_id,),
        )
        return int(rows[0][0])

    def get_messages(
        self, conversation_id: str, seq_start: int = 0, seq_end: int | None = None
    ) -> list[StoredMessage]:
        """Messages with ``seq_start <= seq < seq_end`` in order."""
        # Seqs are positions, far below 2**62: bounds beyond that are clamped, since
        # SQLite refuses integers past 64 bits (OverflowError) where PostgreSQL compares.
        start = min(max(seq_start, 0), 2**62)
        end = min(max(seq_end, 0), 2**62) if seq_end is not None else 2**62
        rows = self._select(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ?"
            " AND seq >= ? AND seq < ? ORDER BY seq",
            (conversation_id, start, end),
        )
        return [stored_message(r) for r in rows]

    def get_message(self, conversation_id: str, message_id: str) -> StoredMessage | None:
        rows = self._select(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ? AND conversation_id = ?",
            (message_id, conversation_id),
        )
        return stored_message(rows[0]) if rows else None

    def parent_summary(self, conversation_id: str, item_id: str) -> str | None:
        """The id of the summary whose sources include ``item_id``, if any."""
        rows = self._select(
            "SELECT summary_id FROM summary_sources WHERE conversation_id = ? AND source_id = ?"
            " LIMIT 1",
            (conversation_id, item_id),
        )
        return str(rows[0][0]) if rows else None

    def get_context(self, conversation_id: str) -> list[ContextRef]:
        rows = self._select(
            "SELECT kind, ref_id FROM context_items WHERE conversation_id = ? ORDER BY position",
            (conversation_id,),
        )
        return [ContextRef(kind=r[0], id=r[1]) for r in rows]

    def large_content_for_message(
        self, conversation_id: str, message_id: str
    ) -> LargeContent | None:
        """The large content stored for ``message_id``, if any (the engine's resume path)."""
        return self.get_large_content(
            conversation_id, large_content_id_for(conversation_id, message_id)
        )

    def _written_large_content(self, conversation_id: str, content_id: str) -> LargeContent:
        """The large content ``put_large_content`` just wrote (or found already stored)."""
        stored = self.get_large_content(conversation_id, content_id)
        if stored is None:  # pragma: no cover - the row was just written in this conversation
            raise StoreError(f"large content {content_id} vanished after it was written")
        return stored

    def sync(self) -> None:
        """Make committed writes durable; nothing to do where every commit already is."""

    def delete_conversation(self, conversation_id: str) -> None:
        """Delete a conversation with all its rows and index entries (retention only)."""
        self._delete_conversations([conversation_id])

    def prune(self, *, older_than_s: float | None = None, max_bytes: int | None = None) -> int:
        """Delete whole conversations by age and size cap; return how many (see ``retention``)."""
        doomed = plan_prune(
            self.list_conversations(),
            now=self._clock(),
            older_than_s=older_than_s,
            max_bytes=max_bytes,
        )
        if doomed:
            self._delete_conversations([info.id for info in doomed])
        return len(doomed)
