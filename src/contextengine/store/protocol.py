"""The ``Store`` protocol: what the lossless engine needs from an archive.

The archive is a data format, not an implementation detail. Its rules, which
every store (``SQLiteStore``, ``PostgresStore``, a third-party one) keeps:

* **Conversations** are keyed by a stable session key chosen by the host
  (``open_conversation``). Every other call is scoped to one conversation id:
  no id, query or regular expression can reach another conversation's rows.
* **Messages are append-only.** They arrive one turn at a time
  (:meth:`Store.append_messages`) or in bulk (:meth:`Store.import_messages`,
  :meth:`Store.copy_messages`); both paths store the same rows. A message is
  stored verbatim (its JSON), with its role, a 0-based ``seq`` in order of
  first storage, a token count and an *identity key*: the provider's message
  id when it has one, else its position plus a hash of the content (tool-call
  ids are not identities: providers recycle them).
  Storing the same prefix again adds nothing, so replays and retries cannot
  duplicate rows.
* **Summaries** (id ``sum_`` + 16 hex) are leaf (over messages) or condensed
  (over summaries), with ordered edges to their sources. They are written, with
  their edges and the new active context, in one atomic step
  (:meth:`Store.commit_compaction`), so a crash never leaves half a summary
  visible.
* **The active context** is an ordered list of references to messages and
  summaries: what the engine assembles the model's view from. Only its order
  is meaningful: positions may have gaps, since a compaction step replaces a
  run of items in place (:class:`ContextSplice`) without renumbering the rest.
  A message or summary appears in it at most once.
* **Large contents** (huge tool results) are stored once, by id, outside the
  view.
* **Search** (:meth:`Store.search`) never reads more than a bounded window of
  any row: long texts are indexed in segments (:mod:`contextengine.store.segments`),
  and text-mode ranking reads a bounded set of candidates
  (:mod:`contextengine.store.ranking`).
* **Deletion** happens only through retention (``delete_conversation``,
  ``prune``), which removes a conversation with all its rows and index entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ContextRef",
    "ContextSplice",
    "ConversationInfo",
    "LargeContent",
    "LineageStore",
    "NewSummary",
    "SearchHit",
    "SearchPage",
    "Store",
    "StoredMessage",
    "SummaryRecord",
]

ItemKind = Literal["message", "summary"]


@dataclass(frozen=True, kw_only=True)
class ContextRef:
    """One entry of the active context: a stored message or a summary."""

    kind: ItemKind
    id: str


@dataclass(frozen=True, kw_only=True)
class ContextSplice:
    """One compaction step's change to the active context: a contiguous run replaced in place.

    The run starts at the item ``first_id`` and ends at ``last_id`` (both
    included) and holds exactly ``count`` items; ``replacement`` (at most
    ``count`` references, usually the one new summary as ``"new:0"``) takes
    its place. Items before and after the run are not read or rewritten, so a
    step costs what it replaces, not the length of the context. If the run is
    not there as described (another writer changed the context first), the
    store raises :class:`~contextengine.errors.StoreConflictError` and writes
    nothing.
    """

    first_id: str
    last_id: str
    count: int
    replacement: Sequence[ContextRef]


@dataclass(frozen=True, kw_only=True)
class StoredMessage:
    """A message as the archive holds it."""

    id: str
    conversation_id: str
    seq: int
    role: str
    message: dict[str, Any]
    token_count: int
    identity_key: str
    created_at: float


@dataclass(frozen=True, kw_only=True)
class NewSummary:
    """A summary about to be written by :meth:`Store.commit_compaction`."""

    kind: Literal["leaf", "condensed"]
    depth: int
    content: str
    token_count: int
    #: Ordered sources: message ids for a leaf, summary ids for a condensed summary.
    source_ids: Sequence[str]
    seq_start: int
    seq_end: int
    time_start: float
    time_end: float
    descendant_count: int
    #: True when the summariser failed and a deterministic fallback was used;
    #: such summaries can be redone later.
    fallback: bool = False


@dataclass(frozen=True, kw_only=True)
class SummaryRecord:
    """A summary as the archive holds it."""

    id: str
    conversation_id: str
    kind: Literal["leaf", "condensed"]
    depth: int
    content: str
    token_count: int
    seq_start: int
    seq_end: int
    time_start: float
    time_end: float
    descendant_count: int
    fallback: bool
    created_at: float
    source_ids: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LargeContent:
    """A tool result too large for the view, stored once and referenced by id."""

    id: str
    conversation_id: str
    message_id: str
    content: str
    token_count: int
    created_at: float


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    """One ``lcm_grep`` result."""

    id: str
    kind: ItemKind
    seq: int | None
    role: str
    snippet: str
    score: float
    #: The summary covering this item once it has left the view (None while in view).
    summary_id: str | None = None
    #: Set when the item holds none of the query's words and ranks only through
    #: the message before it (text search indexes each message with the start of
    #: the previous one, so a reply is found by its question): that message's
    #: matching text, bounded and highlighted. ``snippet`` is then the start of
    #: the item's own text. None for every other hit.
    context: str | None = None


@dataclass(frozen=True, kw_only=True)
class SearchPage:
    """A page of search results and the opaque cursor of the next page (None at the end)."""

    results: list[SearchHit]
    next_cursor: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConversationInfo:
    """A conversation as listed by retention and ``contextengine archive list``."""

    id: str
    session_key: str
    created_at: float
    updated_at: float
    message_count: int
    summary_count: int
    bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Store(Protocol):
    """An archive of conversations for the lossless engine.

    Every method except the retention ones takes the conversation id returned
    by :meth:`open_conversation` and touches that conversation only.
    """

    def open_conversation(self, session_key: str) -> str:
        """Return the id of the conversation for ``session_key``, creating it if needed."""
        ...

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

        ``start_seq`` is the position of ``messages[0]`` in the conversation
        when the caller knows it (the host's full history): the identity key of
        a message without a provider id is then derived from that position, so
        storing the same prefix twice is a no-op. With ``to_context`` the newly
        stored messages are also appended to the active context in the same
        transaction (all but a system prompt stored at seq 0, which the engine
        keeps outside the context): one commit per turn instead of two.
        """
        ...

    def import_messages(
        self,
        conversation_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        token_counts: Sequence[int] | None = None,
        start_seq: int | None = None,
        to_context: bool = False,
    ) -> int:
        """The bulk path: store many messages fast; return how many were newly stored.

        For importers and replays, not for an agent's turn (that is
        :meth:`append_messages`, one short transaction). Stores exactly what
        ``append_messages`` with the same arguments would (identity keys, ids,
        seqs, token counts, index rows, context), in transactions of a few
        thousand messages with the preparation in a second thread
        (:mod:`contextengine.store.bulk`). Token counts are the caller's
        ``token_counts`` or the store's exact counter. A failure stops the
        import with the chunks before it committed; importing the same
        messages again stores only what is missing.
        """
        ...

    def copy_messages(self, conversation_id: str, records: Iterable[StoredMessage]) -> int:
        """The bulk path for copies between archives: write records verbatim; return how many.

        Ids, identity keys, seqs, token counts and timestamps are kept, so
        summary texts naming ids stay true (``contextengine archive migrate``).
        A record whose identity is stored is skipped; the others must continue
        the history in order (:class:`~contextengine.errors.StoreError` otherwise).
        """
        ...

    def message_count(self, conversation_id: str) -> int: ...

    def get_messages(
        self, conversation_id: str, seq_start: int = 0, seq_end: int | None = None
    ) -> list[StoredMessage]:
        """Messages with ``seq_start <= seq < seq_end`` in order."""
        ...

    def get_message(self, conversation_id: str, message_id: str) -> StoredMessage | None: ...

    def get_summary(self, conversation_id: str, summary_id: str) -> SummaryRecord | None: ...

    def parent_summary(self, conversation_id: str, item_id: str) -> str | None:
        """The id of the summary whose sources include ``item_id``, if any."""
        ...

    def get_context(self, conversation_id: str) -> list[ContextRef]: ...

    def load_context(self, conversation_id: str) -> list[StoredMessage | SummaryRecord]:
        """The active context with every reference resolved, in order, in a few queries.

        What an engine reads when it opens or resumes a conversation; a
        reference to a row that no longer exists is skipped.
        """
        ...

    def replace_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None: ...

    def append_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None:
        """Add ``items`` at the end of the active context (after ingest), in O(len(items))."""
        ...

    def commit_compaction(
        self,
        conversation_id: str,
        summaries: Sequence[NewSummary],
        new_context: Sequence[ContextRef] | ContextSplice | None,
    ) -> list[SummaryRecord]:
        """Write summaries with their edges, and change the active context, atomically.

        ``new_context`` is the whole new active context, or a
        :class:`ContextSplice` replacing one run of it in place (what the
        lossless engine sends: the cost is the run's, not the context's), or
        None to leave the context alone. Either may reference the new summaries
        by the placeholder ids ``"new:0"``, ``"new:1"``... (their position in
        ``summaries``), since their real ids are only known once written.
        """
        ...

    def put_large_content(
        self, conversation_id: str, message_id: str, content: str, token_count: int
    ) -> LargeContent: ...

    def get_large_content(self, conversation_id: str, content_id: str) -> LargeContent | None: ...

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
        """Ranked full-text (BM25-like) or regex search within one conversation."""
        ...

    # ---------------------------------------------------------------- retention and operations

    def list_conversations(self) -> list[ConversationInfo]: ...

    def delete_conversation(self, conversation_id: str) -> None: ...

    def prune(self, *, older_than_s: float | None = None, max_bytes: int | None = None) -> int:
        """Delete whole conversations (oldest updated first); return how many."""
        ...

    def sync(self) -> None:
        """Make every committed write durable against a power cut or OS crash.

        Called by the lossless engine at the end of every turn and session. A
        store whose commits are already durable (PostgreSQL) does nothing.
        """
        ...

    def vacuum(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class LineageStore(Protocol):
    """A store that also keeps conversation lineage and session aliases (migration 5).

    Optional beside :class:`Store` (a store without it still serves the
    lossless engine, which then carries nothing over): both shipped stores
    have it. A link points from a conversation to the one it continues;
    :meth:`conversation_lineage` follows links that way only, so it never
    reaches a conversation outside the chain.
    """

    def link_conversations(
        self, conversation_id: str, parent_id: str, *, reason: str = "reset"
    ) -> None:
        """Record that ``conversation_id`` continues ``parent_id``; idempotent."""
        ...

    def conversation_lineage(self, conversation_id: str) -> list[str]:
        """``conversation_id`` and the conversations it continues, nearest first."""
        ...

    def alias_session(self, session_key: str, conversation_id: str) -> None:
        """Make ``session_key`` open ``conversation_id`` from now on."""
        ...

    def session_alias(self, session_key: str) -> str | None:
        """The conversation ``session_key`` was made to open, or None."""
        ...
