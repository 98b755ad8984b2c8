"""The ``Store`` protocol: what the lossless engine needs from an archive.

The archive is a data format, not an implementation detail. Its rules, which
every store (``SQLiteStore``, ``PostgresStore``, a third-party one) keeps:

* **Conversations** are keyed by a stable session key chosen by the host
  (``open_conversation``). Every other call is scoped to one conversation id:
  no id, query or regular expression can reach another conversation's rows.
* **Messages are append-only.** A message is stored verbatim (its JSON), with
  its role, a 0-based ``seq`` in order of first storage, a token count and an
  *identity key*: the provider's id when the message has one (``id``, or the
  ``tool_call_id`` of a tool result), else ``seq`` plus a hash of the content.
  Storing the same prefix again adds nothing, so replays and retries cannot
  duplicate rows.
* **Summaries** (id ``sum_`` + 16 hex) are leaf (over messages) or condensed
  (over summaries), with ordered edges to their sources. They are written, with
  their edges and the new active context, in one atomic step
  (:meth:`Store.commit_compaction`), so a crash never leaves half a summary
  visible.
* **The active context** is an ordered list of references to messages and
  summaries: what the engine assembles the model's view from.
* **Large contents** (huge tool results) are stored once, by id, outside the
  view.
* **Deletion** happens only through retention (``delete_conversation``,
  ``prune``), which removes a conversation with all its rows and index entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "ContextRef",
    "ConversationInfo",
    "LargeContent",
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
    ) -> list[StoredMessage]:
        """Store messages not yet stored; return only the newly stored ones.

        ``start_seq`` is the position of ``messages[0]`` in the conversation
        when the caller knows it (the host's full history): the identity key of
        a message without a provider id is then derived from that position, so
        storing the same prefix twice is a no-op.
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

    def replace_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None: ...

    def append_context(self, conversation_id: str, items: Sequence[ContextRef]) -> None:
        """Add ``items`` at the end of the active context (after ingest), in O(len(items))."""
        ...

    def commit_compaction(
        self,
        conversation_id: str,
        summaries: Sequence[NewSummary],
        new_context: Sequence[ContextRef] | None,
    ) -> list[SummaryRecord]:
        """Write summaries with their edges, and replace the active context, atomically.

        ``new_context`` may reference the new summaries by the placeholder ids
        ``"new:0"``, ``"new:1"``... (their position in ``summaries``), since
        their real ids are only known once written.
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

    def vacuum(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
