"""The compressor's archive: what it summarises or prunes, kept verbatim and searchable.

Without an archive the compressor drops what it summarises. With one
(``ContextCompressor(archive=...)``), every message of the history is stored,
before anything leaves the context, in the same archive format the lossless
engine writes (:class:`~contextengine.store.Store`): one conversation per
session key (``on_session_start``), messages append-only, each summary a leaf
summary over the ids of the messages it replaced. The model reaches it with
the lossless engine's own tools (``lcm_grep``, ``lcm_describe``,
``lcm_expand``, :mod:`contextengine.engines.lossless.tools`), whose
conversation scoping is the archive's: no id or query reaches another session.

Only the compressor's compactions write (never a request): each stores the
messages of its input not stored yet, recognised by a fingerprint of their
content, so the cost of a compaction grows with the window and nothing is
done per request. The compressor's own rewrites (descriptors, pointers,
shrunk arguments, a summary merged into a user message) are recognised as the
messages they stand for and never stored twice.

Any failure of the store is the caller's to catch (:class:`ArchiveError`
wraps it): the compressor then goes on without the archive.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from contextengine.engines.compressor.prune import DESCRIPTOR_PREFIX, POINTER_PREFIX
from contextengine.engines.compressor.summary import is_summary_message, split_summary
from contextengine.engines.lossless.tools import ToolContext, call_tool, tool_schemas
from contextengine.errors import StoreError
from contextengine.redact import redact_message
from contextengine.store import default_store_path, open_engine_store
from contextengine.store.ids import summary_id_for
from contextengine.store.protocol import NewSummary, Store, SummaryRecord
from contextengine.tokens import count_tokens, message_tokens

__all__ = [
    "ArchiveError",
    "CompressorArchive",
    "PlannedSummary",
    "archive_line",
    "default_archive_path",
    "without_archive_line",
]

Message = dict[str, Any]
_T = TypeVar("_T")
#: Earlier summaries a summary's archive line names besides its own (newest first).
MAX_NAMED_SUMMARIES = 4


class ArchiveError(StoreError):
    """The archive failed (unwritable, locked, gone): the compressor goes on without it."""


def _fingerprint(message: Message) -> str:
    canonical = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def _same(message: Message) -> Message:
    return message


def _is_own_rewrite(message: Message) -> bool:
    """A descriptor or pointer the compressor wrote: it names an archived output."""
    if message.get("role") != "tool":
        return False
    content = message.get("content")
    return isinstance(content, str) and content.startswith((DESCRIPTOR_PREFIX, POINTER_PREFIX))


def default_archive_path() -> Path | None:
    """The default archive file (lcm's), or None when its data directory is not writable.

    Writable means the directory exists and may be written, or does not exist
    yet and its nearest existing parent may be written (it is then created on
    first use, as lcm creates it).
    """
    path = default_store_path()
    directory = path.parent
    while not directory.exists():
        if directory.parent == directory:
            return None
        directory = directory.parent
    if directory.is_dir() and os.access(directory, os.W_OK | os.X_OK):
        return path
    return None


def archive_line(summary_id: str, seq_range: tuple[int, int], earlier: Sequence[str]) -> str:
    """The line a summary carries: its archive id, what it covers and earlier summaries."""
    line = (
        f"[archived: lcm_expand {summary_id} reopens messages seq {seq_range[0]}–{seq_range[1]} "
        "verbatim; lcm_grep searches everything earlier"
    )
    if earlier:
        line += f"; earlier summaries: {', '.join(earlier)}"
    return line + "]"


def without_archive_line(text: str) -> str:
    """A summary's text without the archive line :func:`archive_line` ended it with."""
    head, sep, tail = text.rpartition("\n[archived: lcm_expand ")
    if sep and tail.endswith("]") and "\n" not in tail:
        return head.rstrip()
    return text


@dataclass(frozen=True, kw_only=True)
class PlannedSummary:
    """A summary about to be recorded: its id is known before it is written."""

    id: str
    summary: NewSummary
    #: Earlier summaries named in its archive line, newest first.
    earlier: tuple[str, ...]

    @property
    def line(self) -> str:
        return archive_line(self.id, (self.summary.seq_start, self.summary.seq_end), self.earlier)


class CompressorArchive:
    """One store, the open conversation in it, and the ids of the messages stored.

    ``spec`` takes the values of lcm's ``store=`` (a path, ``":memory:"``, a
    URL or a :class:`~contextengine.store.Store`); the store is opened by
    :func:`~contextengine.store.open_engine_store`, as lcm's is.
    """

    def __init__(
        self,
        spec: Store | str | os.PathLike[str],
        *,
        redact_at_rest: bool = False,
        model: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._spec = spec
        self._redact_at_rest = redact_at_rest
        self._store: Store | None = None
        self._owns = False
        self._at_rest: Callable[[Message], Message] = _same
        self._model = model
        self._session_key: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.conversation_id: str | None = None
        # Fingerprint (at rest) -> ids of stored messages with that content, in order.
        self._index: dict[str, list[str]] = {}
        self._seq: dict[str, tuple[int, float]] = {}
        self._next_seq = 0
        self._loaded = False
        #: Ids of messages that left the context (summarised or pruned).
        self.left: set[str] = set()
        #: Summaries recorded in this conversation, oldest first.
        self.summaries: list[str] = []

    @property
    def store(self) -> Store:
        """The store, opened on first use: a session that never compacts creates no file."""
        if self._store is None:
            try:
                store, self._owns = open_engine_store(
                    self._spec, redact_at_rest=self._redact_at_rest
                )
            except Exception as exc:
                raise ArchiveError(f"cannot open the archive: {type(exc).__name__}: {exc}") from exc
            # A store that redacts at rest holds redacted copies: messages match in that form.
            if getattr(store, "redact_at_rest", False):
                self._at_rest = redact_message
            self._store = store
        return self._store

    @property
    def opened(self) -> bool:
        """Whether the store was opened (something was archived or searched)."""
        return self._store is not None

    # ------------------------------------------------------------------ conversation

    def start(self, session_key: str) -> None:
        """Open (lazily) the conversation stored under ``session_key``."""
        self._reset()
        self._session_key = session_key

    def alias(self, session_key: str) -> None:
        """The host renamed the session after a compaction: the conversation goes on."""
        if self.conversation_id is None:
            self._session_key = session_key
            return
        alias = getattr(self._guard(lambda: self.store), "alias_session", None)
        if callable(alias):
            self._guard(lambda: alias(session_key, self.conversation_id))

    def reset(self) -> None:
        """Forget the open conversation; the next compaction opens a new one."""
        self._reset()
        self._session_key = None

    def _conversation(self) -> str:
        if self.conversation_id is None:
            key = self._session_key or f"compressor-{uuid.uuid4().hex}"
            self._session_key = key
            self.conversation_id = self._guard(lambda: self.store.open_conversation(key))
        return self.conversation_id

    def _load(self, conversation_id: str) -> None:
        """Index what a resumed conversation already holds (once per process)."""
        if self._loaded:
            return
        self._loaded = True
        rows = self._guard(lambda: self.store.get_messages(conversation_id))
        for row in rows:
            self._remember(row.message, row.id, row.seq, row.created_at)

    def _remember(self, at_rest: Message, item_id: str, seq: int, created: float) -> None:
        self._index.setdefault(_fingerprint(at_rest), []).append(item_id)
        self._seq[item_id] = (seq, created)
        self._next_seq = max(self._next_seq, seq + 1)

    # ------------------------------------------------------------------ writing

    def archive(self, messages: Sequence[Message]) -> list[str | None]:
        """Store the messages not stored yet; the archive id of each (None: not archivable).

        A message matches a stored one by content, each stored one at most
        once per call, so a repeated message ("continue") is stored again
        when it was said again. The compressor's own rewrites match the
        messages they stand for; one that matches nothing (its original was
        stored by another process) is not stored.
        """
        conversation_id = self._conversation()
        self._load(conversation_id)
        used: set[str] = set()
        ids: list[str | None] = []
        new: list[tuple[int, Message, str]] = []
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                ids.append(None)
                continue
            lookup = message
            if is_summary_message(message):
                remainder = split_summary(message).remainder
                if remainder is None:
                    ids.append(None)
                    continue
                lookup = remainder
            fingerprint = _fingerprint(self._at_rest(lookup))
            found = next((i for i in self._index.get(fingerprint, ()) if i not in used), None)
            if found is None and self._index.get(fingerprint) and lookup is not message:
                found = self._index[fingerprint][-1]
            if found is not None:
                used.add(found)
                ids.append(found)
                continue
            ids.append(None)
            if _is_own_rewrite(message):
                continue
            new.append((index, lookup, fingerprint))
        if new:
            model = self._model()
            batch = [message for _, message, _ in new]
            rows = self._guard(
                lambda: self.store.append_messages(
                    conversation_id,
                    batch,
                    token_counts=[message_tokens(m, model) for m in batch],
                    start_seq=self._next_seq,
                )
            )
            by_print: dict[str, list[str]] = {}
            for row in rows:
                self._remember(row.message, row.id, row.seq, row.created_at)
                by_print.setdefault(_fingerprint(row.message), []).append(row.id)
            for index, _, fingerprint in new:
                stored = by_print.get(fingerprint)
                if stored:
                    ids[index] = stored.pop(0)
        return ids

    def id_of(self, message: Message) -> str | None:
        """The archive id of a message stored (or of a rewrite standing for one), else None."""
        found = self._index.get(_fingerprint(self._at_rest(message)))
        return found[-1] if found else None

    def alias_rewrite(self, rewritten: Message, item_id: str) -> None:
        """Make a rewrite of a stored message (descriptor, shrunk call) match it from now on."""
        self._index.setdefault(_fingerprint(self._at_rest(rewritten)), []).append(item_id)

    def plan_summary(
        self, body: str, source_ids: Sequence[str], *, fallback: bool
    ) -> PlannedSummary:
        """The leaf summary over ``source_ids``, with the id it will have once recorded."""
        conversation_id = self._conversation()
        seqs = [self._seq[i] for i in source_ids if i in self._seq]
        now = time.time()
        summary = NewSummary(
            kind="leaf",
            depth=0,
            content=body,
            token_count=count_tokens(body, self._model()),
            source_ids=tuple(source_ids),
            seq_start=min((s for s, _ in seqs), default=0),
            seq_end=max((s for s, _ in seqs), default=0),
            time_start=min((t for _, t in seqs), default=now),
            time_end=max((t for _, t in seqs), default=now),
            descendant_count=len(source_ids),
            fallback=fallback,
        )
        planned_id = summary_id_for(conversation_id, "leaf", summary.source_ids, body)
        earlier = tuple(reversed(self.summaries[-MAX_NAMED_SUMMARIES:]))
        return PlannedSummary(id=planned_id, summary=summary, earlier=earlier)

    def record_summary(self, planned: PlannedSummary) -> SummaryRecord:
        """Write the summary and its edges (the active context is not the compressor's)."""
        conversation_id = self._conversation()
        written = self._guard(
            lambda: self.store.commit_compaction(conversation_id, [planned.summary], None)
        )
        record = written[0]
        self.summaries.append(record.id)
        self.left.update(planned.summary.source_ids)
        return record

    def sync(self) -> None:
        """Make what was written durable (a turn or session end)."""
        if self.conversation_id is not None:
            self._guard(self.store.sync)

    def close(self) -> None:
        """Close the store when it was opened here."""
        if self._store is not None and self._owns:
            self._store.close()

    # ------------------------------------------------------------------ tools

    @staticmethod
    def tool_schemas() -> list[dict[str, Any]]:
        """``lcm_grep``, ``lcm_describe``, ``lcm_expand``: the lossless engine's schemas."""
        return tool_schemas()

    def call_tool(self, name: str, args: dict[str, Any]) -> str:
        """Run one tool on the open conversation: the lossless engine's implementation."""
        conversation_id = self._conversation()
        context = ToolContext(
            store=self.store,
            conversation_id=conversation_id,
            in_view=self._in_view,
        )
        return call_tool(name, args, context)

    def _in_view(self, item_id: str) -> bool:
        if item_id.startswith("sum_"):
            return bool(self.summaries) and item_id == self.summaries[-1]
        return item_id in self._seq and item_id not in self.left

    # ------------------------------------------------------------------ failures

    def _guard(self, action: Callable[[], _T]) -> _T:
        try:
            return action()
        except ArchiveError:
            raise
        except Exception as exc:
            raise ArchiveError(f"{type(exc).__name__}: {exc}") from exc
