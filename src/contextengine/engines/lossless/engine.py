"""``LosslessEngine`` ("lcm"): every message kept, the model's context as a budgeted view.

The engine stores every message verbatim in a :class:`~contextengine.store.Store`
and never deletes anything. What the model sees is a *view* assembled from the
persisted active context (:mod:`.assemble`): the system prompt, summaries of
what left the view, and the fresh tail of raw messages. Compaction
(:mod:`.compaction`) only replaces references in the active context with
summaries that point back at their sources; huge tool results are moved out of
the view once (:mod:`.large_content`); and the model gets ``lcm_grep``,
``lcm_describe`` and ``lcm_expand`` (:mod:`.tools`) to search and reopen
anything.

How a host drives it (see :class:`~contextengine.ContextEngine` for the order):

* ``on_session_start(key)`` opens or resumes the conversation stored under
  ``key``. Without it the first hook opens a fresh conversation (or the one
  named by the ``session_key`` constructor argument).
* ``select_context(..., conversation_messages=history)`` on every request and
  ``on_turn_complete(history)`` after every turn store the messages not yet
  stored and, for ``select_context``, return the view. Ingest is incremental:
  the engine remembers how much of the host's history it has seen, so the work
  per call grows with the new messages only. A host that replaces its history
  with the view :meth:`compress` returned is recognised (its reference blocks
  and large-content references are the engine's own and are never stored).
* ``should_compress`` / ``compress`` summarise what is outside the fresh tail
  (or before the last ``keep_last`` messages, for a manual compaction);
  ``compress`` returns the new view. ``plan_compression`` previews that.
* ``chat_commands`` gives ``contextengine chat`` the ``/grep`` command
  (:mod:`.chat_commands`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from contextengine.commands import ChatCommand
from contextengine.compaction_plan import CompressionPlan, keep_last_cut
from contextengine.engine import CompactionGate, ContextEngine, sanitize_memory_context
from contextengine.engines.lossless.assemble import (
    REFERENCE_CLOSE,
    REFERENCE_OPEN,
    ContextItem,
    TailSplit,
    View,
    fresh_tail,
    group_bounds,
    is_reference_message,
    summary_entry_tokens,
)
from contextengine.engines.lossless.chat_commands import lcm_chat_commands
from contextengine.engines.lossless.compaction import (
    CompactionOutcome,
    CompactionSettings,
    run_compaction,
)
from contextengine.engines.lossless.large_content import (
    is_large_content_reference,
    reference_message,
)
from contextengine.engines.lossless.tools import ToolContext, call_tool, tool_schemas
from contextengine.engines.lossless.view import ActiveContext, IncrementalView
from contextengine.failure_policy import DEFAULT_MAX_WAIT_S, FailurePolicy
from contextengine.messages import repair_message
from contextengine.redact import redact, redact_message
from contextengine.store import open_engine_store
from contextengine.store.protocol import Store, StoredMessage, SummaryRecord
from contextengine.summarizers import DeterministicSummarizer
from contextengine.summary_chain import SummaryChain
from contextengine.summary_prompt import content_text
from contextengine.summary_request import Summarizer
from contextengine.tokens import count_tokens, message_tokens
from contextengine.usage import normalize_usage

__all__ = ["LosslessEngine"]

Message = dict[str, Any]

# The "[summary sum_… · depth 0 · messages seq a–b]" header and the covers
# line a leaf summary carries besides its body (ids listed, at most eight).
_LEAF_OVERHEAD_TOKENS = 120
# The fences of the reference block the first summary opens.
_REFERENCE_BLOCK_TOKENS = count_tokens(REFERENCE_OPEN + REFERENCE_CLOSE)


def _fingerprint(message: Message) -> str:
    canonical = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def _same(message: Message) -> Message:
    return message


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


class LosslessEngine(ContextEngine):
    """The lossless context engine, registered as ``"lcm"``.

    ``store`` is a path, ``":memory:"``, a URL or a Store object (None: the
    default archive file); a store the engine opened itself is closed by
    :meth:`close`. ``summarizer`` defaults to the offline
    :class:`~contextengine.DeterministicSummarizer`; ``main_summarizer`` (the
    main model's) is asked once when it fails with anything but an auth
    error, before the truncation fallback; ``abort_on_summary_failure`` stops
    the compaction at a failed summary instead of truncating. Sizes left as None derive
    from the context length: ``fresh_tail_tokens`` a quarter of the threshold,
    ``leaf_chunk_tokens`` an eighth of the context (500..20,000), one summary
    at most a 32nd of the context (128..2,000). A tool result is moved out of
    the view above ``large_content_tokens`` or a quarter of the context length,
    whichever is smaller, since a larger one could never fit the view.

    Extras: ``session_key`` names the conversation opened when the host never
    calls ``on_session_start``; ``clock`` and ``compaction_deadline_s`` bound
    the wall-clock time of one compaction; ``max_passes`` the summaries it
    writes; ``summary_tokens`` fixes the budget of one summary;
    ``max_summary_wait_s`` caps how long one compaction waits on the
    summariser (the shared :class:`~contextengine.failure_policy.FailurePolicy`,
    also timed by ``clock``, owns the cooldowns and the anti-thrash block);
    ``redact_at_rest`` opens the store with secrets redacted before they are
    stored (a store passed as an object keeps its own setting): the view then
    shows ``[REDACTED]`` for them too, and they cannot be recovered.
    ``min_tail_user_messages`` (1) user messages are always in the fresh
    tail, as for the compressor; ``max_threshold_tokens`` and
    ``reserved_output_tokens`` shape the threshold as for the compressor
    (:func:`~contextengine.engine.compaction_threshold`).
    """

    def __init__(
        self,
        *,
        context_length: int,
        model: str = "",
        store: Store | str | os.PathLike[str] | None = None,
        summarizer: Summarizer | None = None,
        main_summarizer: Summarizer | None = None,
        abort_on_summary_failure: bool = False,
        threshold_percent: float = 0.75,
        fresh_tail_tokens: int | None = None,
        leaf_chunk_tokens: int | None = None,
        condense_fanin: int = 4,
        large_content_tokens: int = 25_000,
        session_key: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        compaction_deadline_s: float = 60.0,
        max_passes: int = 64,
        summary_tokens: int | None = None,
        max_summary_wait_s: float = DEFAULT_MAX_WAIT_S,
        redact_at_rest: bool = False,
        max_threshold_tokens: int | None = None,
        reserved_output_tokens: int = 0,
        min_tail_user_messages: int = 1,
    ) -> None:
        if min_tail_user_messages < 0:
            raise ValueError(f"min_tail_user_messages must be >= 0, got {min_tail_user_messages}")
        #: User messages the fresh tail always holds raw, their turns with them.
        self.min_tail_user_messages = min_tail_user_messages
        self.threshold_percent = threshold_percent
        self.max_threshold_tokens = max_threshold_tokens
        self.reserved_output_tokens = max(0, int(reserved_output_tokens))
        self.model_thresholds = {}
        self._store, self._owns_store = open_engine_store(store, redact_at_rest=redact_at_rest)
        # A store that redacts at rest holds redacted copies: the host's messages
        # are matched against what it stores in that form.
        self._at_rest: Callable[[Message], Message] = (
            redact_message if getattr(self._store, "redact_at_rest", False) else _same
        )
        self._summarizer: Summarizer = summarizer or DeterministicSummarizer()
        #: The summariser, then the main model once (it keeps the summary model's cooldown).
        self.summary_chain = SummaryChain(self._summarizer, main_summarizer, clock=clock)
        #: A failed summary stops the compaction instead of writing a truncation.
        self.abort_on_summary_failure = bool(abort_on_summary_failure)
        self._fresh_tail_tokens = fresh_tail_tokens
        self._leaf_chunk_tokens = leaf_chunk_tokens
        self._summary_tokens = summary_tokens
        self.condense_fanin = max(2, condense_fanin)
        self.large_content_tokens = large_content_tokens
        self._default_session_key = session_key
        self._clock = clock
        self.compaction_deadline_s = compaction_deadline_s
        self.max_passes = max_passes
        #: Cooldowns, anti-thrash and the wait cap, shared with every engine.
        self.failure_policy = FailurePolicy(max_wait_s=max_summary_wait_s, clock=clock)
        #: What the last compaction did (summaries written, fallback, why it stopped).
        self.last_compression: CompactionOutcome | None = None
        # One compaction at a time, for hosts that call from several threads.
        self._gate = CompactionGate()
        # The conversation left at the last reset, for carry_over_new_session_context.
        self._previous_conversation_id: str | None = None
        self._reset_conversation_state()
        self.update_model(model, context_length)

    # ------------------------------------------------------------------ configuration

    @property
    def name(self) -> str:
        """``"lcm"``."""
        return "lcm"

    @property
    def store(self) -> Store:
        """The archive this engine writes to."""
        return self._store

    @property
    def conversation_id(self) -> str | None:
        """The id of the open conversation, or None before the first hook."""
        return self._conversation_id

    @property
    def fresh_tail_tokens(self) -> int:
        """Tokens of raw recent messages the fresh tail aims to keep."""
        if self._fresh_tail_tokens is not None:
            return self._fresh_tail_tokens
        return max(256, self.threshold_tokens // 4) if self.threshold_tokens else 2_000

    @property
    def leaf_chunk_tokens(self) -> int:
        """About how many tokens of raw messages one leaf summary covers."""
        if self._leaf_chunk_tokens is not None:
            return self._leaf_chunk_tokens
        return _clamp(self.context_length // 8, 500, 20_000)

    @property
    def summary_tokens(self) -> int:
        """The normal budget of one summary."""
        if self._summary_tokens is not None:
            return self._summary_tokens
        return _clamp(self.context_length // 32, 128, 2_000)

    @property
    def effective_large_content_tokens(self) -> int:
        """Tool results above this many tokens leave the view for the large-content store."""
        if self.context_length > 0:
            return min(self.large_content_tokens, max(64, self.context_length // 4))
        return self.large_content_tokens

    def _reset_conversation_state(self) -> None:
        self._conversation_id: str | None = None
        # The lineage of the open conversation as the tools see it (read on first use).
        self._lineage: tuple[str, ...] | None = None
        self._context = ActiveContext()
        self._view = IncrementalView()
        self._system: Message | None = None
        self._stored_system = False
        self._next_seq = 0
        # Histories the host may hand over next, as (length, last message): the
        # last one seen, and the view compress returned (a host adopts it).
        self._known: list[tuple[int, Message]] = []
        self._ahead: list[str] = []
        self._fp_index: dict[str, list[int]] | None = None
        self._large: dict[str, str] = {}
        self._last_view_tokens = 0
        self._overhead = 0

    # ------------------------------------------------------------------ conversation

    def _open(self, session_key: str) -> str:
        """Open (or resume) ``session_key`` and mirror its active context in memory."""
        self._reset_conversation_state()
        conversation_id = self._store.open_conversation(session_key)
        self._conversation_id = conversation_id
        self._next_seq = self._store.message_count(conversation_id)
        first = self._store.get_messages(conversation_id, 0, 1)
        if first and first[0].role == "system":
            self._system = first[0].message
            self._stored_system = True
        self._load_context()
        return conversation_id

    def _load_context(self) -> None:
        """Mirror the stored active context in memory (a few queries, whatever its length)."""
        assert self._conversation_id is not None
        self._context.reset(
            self._summary_item(row) if isinstance(row, SummaryRecord) else self._message_item(row)
            for row in self._store.load_context(self._conversation_id)
        )

    def _ensure_conversation(self) -> str:
        if self._conversation_id is None:
            key = self._default_session_key or f"lcm-{uuid.uuid4().hex}"
            self._default_session_key = key
            return self._open(key)
        return self._conversation_id

    def _summary_item(self, record: SummaryRecord) -> ContextItem:
        return ContextItem(
            kind="summary",
            id=record.id,
            tokens=summary_entry_tokens(record, self.model or None),
            role="summary",
            seq_start=record.seq_start,
            seq_end=record.seq_end,
            time_start=record.time_start,
            time_end=record.time_end,
            summary=record,
        )

    def _large_content_id(self, stored: StoredMessage, *, new: bool) -> str | None:
        """The large-content id of a huge tool result, storing the content the first time."""
        if stored.id in self._large:
            return self._large[stored.id]
        if stored.role != "tool" or stored.token_count <= self.effective_large_content_tokens:
            return None
        assert self._conversation_id is not None
        if not new:
            lookup = getattr(self._store, "large_content_for_message", None)
            if callable(lookup):
                found = lookup(self._conversation_id, stored.id)
                if found is not None:
                    self._large[stored.id] = str(found.id)
                    return self._large[stored.id]
        text = content_text(stored.message.get("content"))
        large = self._store.put_large_content(
            self._conversation_id, stored.id, text, stored.token_count
        )
        self._large[stored.id] = large.id
        return large.id

    def _message_item(self, stored: StoredMessage, *, new: bool = False) -> ContextItem:
        # The archive keeps the message verbatim; the view sends what a provider
        # accepts (a thinking-only turn gets empty text, as the host would send it).
        view_message = repair_message(stored.message)
        tokens = stored.token_count
        large = self._large_content_id(stored, new=new)
        if large is not None:
            view_message = reference_message(stored.message, large, stored.token_count)
            tokens = message_tokens(view_message, self.model or None)
        return ContextItem(
            kind="message",
            id=stored.id,
            tokens=tokens,
            role=stored.role,
            seq_start=stored.seq,
            seq_end=stored.seq,
            time_start=stored.created_at,
            time_end=stored.created_at,
            message=view_message,
        )

    # ------------------------------------------------------------------ ingest

    def _stored_fingerprints(self) -> dict[str, list[int]]:
        if self._fp_index is None:
            assert self._conversation_id is not None
            index: dict[str, list[int]] = {}
            for stored in self._store.get_messages(self._conversation_id):
                index.setdefault(_fingerprint(stored.message), []).append(stored.seq)
            self._fp_index = index
        return self._fp_index

    def _unseen_slow(self, messages: Sequence[Message]) -> list[Message]:
        """Messages of a history that does not extend the last one seen, not yet stored.

        Matches the history in order against the stored messages, so a full
        history (resume) and a view handed back as history both work; what
        matches nothing is new. The index of stored fingerprints is built on
        the first use (one read of the conversation, on a resume) and kept up
        to date after; a conversation with nothing stored needs none.
        """
        if self._next_seq == 0 and self._fp_index is None:
            return list(messages)
        index = self._stored_fingerprints()
        floor = 0
        unseen: list[Message] = []
        for message in messages:
            seqs = index.get(_fingerprint(self._at_rest(message)), [])
            match = next((seq for seq in seqs if seq >= floor), None)
            if match is None:
                unseen.append(message)
            else:
                floor = match + 1
        return unseen

    def _ingest(self, messages: Sequence[Message] | None) -> None:
        """Store the messages of the host's history that are not stored yet."""
        if not messages:
            return
        self._ensure_conversation()
        first = messages[0]
        system = first if isinstance(first, dict) and first.get("role") == "system" else None
        if system is not None:
            self._system = system
        count = len(messages)
        known = self._known_length(messages)
        if known == count:
            return
        fresh = list(messages[known:]) if known else self._unseen_slow(messages)
        self._known = [(count, messages[-1])]
        new: list[Message] = []
        for message in fresh:
            if not isinstance(message, dict):
                continue
            if is_reference_message(message) or is_large_content_reference(message):
                continue
            if message is system and self._next_seq > 0:
                # A changed system prompt is adopted, not appended mid-conversation.
                continue
            if self._ahead and self._ahead[0] == _fingerprint(message):
                self._ahead.pop(0)
                continue
            new.append(message)
        self._store_new(new)

    def _known_length(self, messages: Sequence[Message]) -> int:
        """How many leading messages are a history seen before (0: none recognised).

        A history is recognised, grown, by the identity of its last known
        message (or, for a copied history, its content): the work of an ingest
        then grows with the appended messages only. Anything else takes the
        slow path, which matches the history against what is stored.
        """
        for length, last in self._known:
            if length <= len(messages):
                candidate = messages[length - 1]
                if candidate is last or _fingerprint(candidate) == _fingerprint(last):
                    return length
        return 0

    def _store_new(self, messages: Sequence[Message]) -> list[StoredMessage]:
        if not messages:
            return []
        assert self._conversation_id is not None
        model = self.model or None
        counts = [message_tokens(message, model) for message in messages]
        # One transaction stores the messages and appends them to the active context.
        stored = self._store.append_messages(
            self._conversation_id,
            list(messages),
            token_counts=counts,
            start_seq=self._next_seq,
            to_context=True,
        )
        added: list[ContextItem] = []
        for row in stored:
            self._next_seq = max(self._next_seq, row.seq + 1)
            if self._fp_index is not None:
                self._fp_index.setdefault(_fingerprint(row.message), []).append(row.seq)
            if row.seq == 0 and row.role == "system":
                self._stored_system = True
                continue
            added.append(self._message_item(row, new=True))
        self._context.extend(added)
        return stored

    # ------------------------------------------------------------------ the view

    def _split(self, items: list[ContextItem]) -> TailSplit:
        tail = self.fresh_tail_tokens
        return fresh_tail(
            items,
            tail_tokens=tail,
            reach_back_tokens=max(tail, self.threshold_tokens // 2),
            min_user_messages=self.min_tail_user_messages,
        )

    def _forced_split(self, items: list[ContextItem]) -> TailSplit:
        """The smallest fresh tail: the last group and the latest user turns.

        What a forced compaction (manual, overflow) uses when the normal fresh
        tail holds every stored message, so that a small chat still compacts.
        """
        return fresh_tail(
            items,
            tail_tokens=0,
            reach_back_tokens=self.threshold_tokens // 2,
            min_user_messages=self.min_tail_user_messages,
        )

    def _assemble(self, budget_tokens: int = 0) -> View:
        """The view within ``budget_tokens`` (the threshold when 0): extended, or rebuilt."""
        budget = budget_tokens if budget_tokens > 0 else self.threshold_tokens
        view = self._view.view(
            system=self._system,
            context=self._context,
            budget=budget,
            split_of=self._split,
            model=self.model or None,
        )
        self._last_view_tokens = view.tokens
        self.last_view_reused = self._view.reused
        return view

    @staticmethod
    def _keep_split(items: list[ContextItem], keep: int) -> TailSplit:
        """The tail of a ``keep_last`` compaction: the last ``keep`` raw messages, nothing pinned.

        ``keep`` is counted over message items (summaries in the tail are left
        as they are) and the start moves back to its group's, so a tool call
        keeps its results.
        """
        start, seen = len(items), 0
        while start > 0 and seen < keep:
            start -= 1
            if items[start].kind == "message":
                seen += 1
        for group in group_bounds(items):
            if group.start <= start < group.end:
                start = group.start
                break
        return TailSplit(start, None)

    def _split_for(
        self, messages: Sequence[Message], keep_last: int | None
    ) -> Callable[[list[ContextItem]], TailSplit]:
        """The tail rule of a compaction: the fresh tail, or the last ``keep_last`` messages.

        ``keep_last`` is applied to the host's history first
        (:func:`~contextengine.compaction_plan.keep_last_cut`), so the engine
        keeps what the host reports as kept: the history's last messages are
        the context's last raw messages.
        """
        if keep_last is None:
            return self._split
        keep = keep_last_cut(messages, keep_last).kept
        return lambda items: self._keep_split(items, keep)

    def _compressible(
        self,
        split_of: Callable[[list[ContextItem]], TailSplit] | None = None,
        *,
        forced: bool = False,
    ) -> bool:
        items = self._context.items
        if split_of is None:
            split_of = self._forced_split if forced else self._split
        split = split_of(items)
        return any(
            item.kind == "message" and index < split.tail_start and index != split.pinned
            for index, item in enumerate(items)
        )

    def _estimate_tokens(self) -> int:
        """The view's size without rendering it, from the context's running totals."""
        model = self.model or None
        system = message_tokens(self._system, model) if self._system else 0
        return self._context.estimate_tokens(system, model)

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        """Transform: store what is new in the history and return the assembled view.

        Called by the host for every request with its full persisted history
        as ``conversation_messages`` (``request_messages`` stands in when it is
        None). An ``incoming_message`` not yet at the end of that history is
        stored too. The view fits ``budget_tokens`` (the threshold when 0)
        unless the fresh tail alone is larger. None when nothing is stored.
        """
        source = conversation_messages if conversation_messages is not None else request_messages
        self._ingest(source)
        if incoming_message is not None and (
            not source or _fingerprint(source[-1]) != _fingerprint(incoming_message)
        ):
            self._ensure_conversation()
            if self._store_new([incoming_message]):
                self._ahead.append(_fingerprint(incoming_message))
        if not self._context and self._system is None:
            return None
        return self._assemble(budget_tokens).messages

    def current_view(self, budget_tokens: int = 0) -> list[Message]:
        """The view as :meth:`select_context` would return it now, without ingesting."""
        return self._assemble(budget_tokens).messages

    # ------------------------------------------------------------------ decisions

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Observe a provider response: normalise its usage into the token fields.

        The difference between the real prompt size and the view the engine
        assembled (tool schemas, provider framing) is remembered, so that
        :meth:`should_compress` judges the view the way the provider counts it.
        """
        normal = normalize_usage(usage)
        self.last_prompt_tokens = normal["prompt_tokens"]
        self.last_completion_tokens = normal["completion_tokens"]
        self.last_total_tokens = normal["total_tokens"]
        if self._last_view_tokens and normal["prompt_tokens"]:
            self._overhead = max(0, normal["prompt_tokens"] - self._last_view_tokens)
        self.failure_policy.observe_prompt(normal["prompt_tokens"], self.threshold_tokens)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the view passes the threshold and something can be summarised.

        Called by the host after tool calls and before a request. The view's
        own size (plus the provider overhead learned from real usage) decides;
        a given ``prompt_tokens`` counts when smaller, since a host that counts
        its full history overestimates what this engine sends.
        """
        return self.should_compress_info(prompt_tokens)[0]

    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """The decision and, when the view is over the threshold but it is no, why:
        ``"cooldown:<seconds>"`` or ``"ineffective"`` (the shared failure policy)."""
        if self.threshold_tokens <= 0 or not self._context:
            return False, None
        tokens = self._estimate_tokens() + self._overhead
        if prompt_tokens is not None and prompt_tokens >= 0:
            tokens = min(tokens, prompt_tokens)
        if tokens < self.threshold_tokens:
            return False, "below_threshold"
        blocked = self.failure_policy.block()
        if blocked is not None:
            return False, blocked[1]
        return self._compressible(), None

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        """Store the history's new messages, then judge the view they make (before sending).

        Called by the host before a request; this is what lets a compaction
        happen before :meth:`select_context` rather than a request late.
        """
        self._ingest(messages)
        return self.should_compress()

    def has_content_to_compress(
        self, messages: list[Message], *, keep_last: int | None = None
    ) -> bool:
        """False when every stored message is in the smallest fresh tail (or
        the last ``keep_last``): compress would do nothing. Asked before a
        manual compress, which is forced."""
        self._ingest(messages)
        if keep_last is None:
            return self._compressible(forced=True)
        return self._compressible(self._split_for(messages, keep_last))

    def plan_compression(
        self,
        messages: list[Message],
        *,
        keep_last: int | None = None,
        focus_topic: str | None = None,
    ) -> CompressionPlan:
        """Decide: which raw messages a compaction would summarise, without a summariser.

        Stores what is new in ``messages`` (as every hook does) and changes
        nothing else. The messages are those outside the tail, grouped into
        leaf summaries of about ``leaf_chunk_tokens``; each leaf is estimated
        at its whole budget. Condensing summaries only shrinks the result
        further and is not counted.
        """
        self._ingest(messages)
        items = self._context.items
        split = self._split_for(messages, keep_last)(items)
        head = items[: split.tail_start]
        chosen: list[ContextItem] = []
        estimate = 0
        chunk = 0
        for group in group_bounds(head):
            group_items = head[group.start : group.end]
            pinned = split.pinned is not None and group.start <= split.pinned < group.end
            if not group.raw or pinned:
                if chunk:
                    estimate += self._leaf_estimate(chunk)
                    chunk = 0
                continue
            cost = sum(item.tokens for item in group_items)
            if chunk and chunk + cost > self.leaf_chunk_tokens:
                estimate += self._leaf_estimate(chunk)
                chunk = 0
            chunk += cost
            chosen.extend(group_items)
        if chunk:
            estimate += self._leaf_estimate(chunk)
        tokens = sum(item.tokens for item in chosen)
        before = self._estimate_tokens()
        has_block = any(item.kind == "summary" for item in items)
        opening = 0 if has_block or not chosen else _REFERENCE_BLOCK_TOKENS
        kept = sum(1 for item in items[split.tail_start :] if item.kind == "message")
        return CompressionPlan(
            engine=self.name,
            messages=tuple(item.message for item in chosen if item.message is not None),
            tokens_to_summarize=tokens,
            kept_messages=kept,
            keep_last=keep_last,
            tokens_before=before,
            # Not capped at ``before``: summaries of a few short messages, with
            # their headers and the reference block, can outweigh them, and lcm
            # commits them anyway (each summary is smaller than its input).
            estimated_tokens_after=before - tokens + estimate + opening,
            previous_summaries=sum(1 for item in head if item.kind == "summary"),
            focus_topic=focus_topic,
            note="the originals stay in the archive: lcm_grep and lcm_expand reach them",
        )

    def _leaf_estimate(self, chunk_tokens: int) -> int:
        """A leaf of ``chunk_tokens`` at its whole budget, with its header and covers line."""
        return min(self.summary_tokens, max(32, chunk_tokens // 3)) + _LEAF_OVERHEAD_TOKENS

    def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
        *,
        keep_last: int | None = None,
    ) -> list[Message]:
        """Transform: summarise what is outside the fresh tail and return the new view.

        Called by the host when :meth:`should_compress` says so, on overflow
        and for a manual compress. Stores ``messages`` first; never mutates
        them. Each summary is committed atomically; a summariser auth failure
        stops the compaction with that step unwritten (see
        :attr:`last_compression`). The view is within the threshold unless the
        fresh tail alone exceeds it.

        ``keep_last`` (a manual compaction) replaces the fresh tail with the
        last ``keep_last`` messages of ``messages`` (moved back to a tool
        call's start when the cut falls on its results; nothing pinned), and
        every raw message before them is summarised.

        One call at a time per engine
        (:class:`~contextengine.CompactionGate`): a second thread waits, and
        gets the first one's view when it passed the same list.
        """
        return self._gate.run(
            messages,
            lambda: self._compress_once(messages, focus_topic, force, memory_context, keep_last),
            key=(focus_topic, force, memory_context, keep_last),
        )

    def _compress_once(
        self,
        messages: list[Message],
        focus_topic: str | None,
        force: bool,
        memory_context: str,
        keep_last: int | None,
    ) -> list[Message]:
        self._ingest(messages)
        split_of = self._split_for(messages, keep_last)
        if force:
            self.failure_policy.clear_thrash()
        settings = CompactionSettings(
            leaf_chunk_tokens=self.leaf_chunk_tokens,
            condense_fanin=self.condense_fanin,
            summary_tokens=self.summary_tokens,
            summary_share_tokens=self.threshold_tokens // 3,
            max_passes=self.max_passes,
            deadline_s=self.compaction_deadline_s,
            clock=self._clock,
            model=self.model or None,
            # What leaves for the summariser is redacted, a focus the user typed too.
            focus_topic=redact(focus_topic) if focus_topic else None,
            memory_context=sanitize_memory_context(memory_context) if memory_context else "",
            policy=self.failure_policy,
            force=force,
            abort_on_summary_failure=self.abort_on_summary_failure,
        )
        assert self._conversation_id is not None or not self._context
        if self._conversation_id is not None:
            # A store shared by several workers (PostgresStore) serialises
            # compactions per conversation; the one that waited re-reads the
            # context, which the other may have just rewritten.
            lock = getattr(self._store, "compaction_lock", None)
            guard = lock(self._conversation_id) if callable(lock) else contextlib.nullcontext()
            with guard:
                if callable(lock):
                    self._load_context()
                # A forced compaction of a chat that fits the fresh tail shrinks the tail.
                shrink = force and keep_last is None and not self._compressible()
                try:
                    outcome = run_compaction(
                        store=self._store,
                        conversation_id=self._conversation_id,
                        items=self._context.items,
                        split_of=self._forced_split if shrink else split_of,
                        summarizer=self.summary_chain,
                        settings=settings,
                    )
                except BaseException:
                    # Steps committed before the failure are in the store: mirror it.
                    self._load_context()
                    raise
            if outcome.stopped and outcome.stopped.startswith("conflict"):
                self._load_context()  # another writer changed the context: adopt the store's
            else:
                self._context.reset(outcome.items)
            self.last_compression = outcome
            if outcome.written:
                self.compression_count += 1
                self.last_prompt_tokens = -1
                self.failure_policy.compaction_committed()
            elif not outcome.stopped:
                self.failure_policy.freed_nothing()
        view = self._assemble().messages
        if view:
            # A host that replaces its history with this view hands it back grown:
            # recognise it, rather than match it against the whole archive.
            self._known.append((len(view), view[-1]))
        return view

    # ------------------------------------------------------------------ observation

    def on_turn_complete(
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Observe a finished turn: store the messages not stored yet, and make them durable."""
        self._ingest(messages)
        self._store.sync()

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Open or resume the conversation stored under ``session_id``.

        With ``boundary_reason="compression"`` (the host gave the conversation
        a new id after a compaction) the open conversation simply goes on: the
        new id becomes another key of it in the store, so resuming either id
        later opens it.
        """
        if kwargs.get("boundary_reason") == "compression" and self._conversation_id is not None:
            alias = getattr(self._store, "alias_session", None)
            if callable(alias):
                alias(session_id, self._conversation_id)
            self._default_session_key = session_id
            return
        self._open(session_id)

    def carry_over_new_session_context(
        self, old_session_id: str, new_session_id: str, messages: list[Message] | None = None
    ) -> None:
        """Link the conversation just started to the one the user left (its lineage).

        Called by the host on a reset. The model's ``lcm_grep`` then searches
        the old conversation after the new one, and ``lcm_describe`` /
        ``lcm_expand`` reopen its ids; nothing is copied, and the old
        conversation is never shown in the view. The link goes one way, to the
        conversations this one continues, and never to any other
        conversation. The old history is already stored (``on_session_end``),
        so ``messages`` is not needed.
        """
        parent = self._previous_conversation_id
        link = getattr(self._store, "link_conversations", None)
        if parent is None or not callable(link):
            return
        conversation_id = self._ensure_conversation()
        if conversation_id != parent:
            link(conversation_id, parent, reason="reset")
        self._lineage = None

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        """Store what is left of the session; the archive keeps it for later resumption."""
        self._ingest(messages)
        self._store.sync()

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        """Adopt a model and its context length; another model clears the failure policy.

        Called at construction and by the host on every model switch. The
        view is rebuilt on the next request (token counts are per model), and
        the provider overhead learned from real usage is forgotten with it.
        """
        if model != self.model:
            self.failure_policy.reset()
            self._overhead = 0
        super().update_model(model, context_length, base_url, api_key, provider, api_mode)
        self._view.invalidate()

    def on_session_reset(self) -> None:
        """Forget the token state and the open conversation; the next hook opens a new one.

        The conversation left is remembered for
        :meth:`carry_over_new_session_context`.
        """
        super().on_session_reset()
        previous = self._conversation_id
        self._default_session_key = None
        self._reset_conversation_state()
        self._previous_conversation_id = previous

    # ------------------------------------------------------------------ tools

    def is_own_message(self, message: Message) -> bool:
        """A reference block (summaries) or a large-content reference this engine rendered."""
        return is_reference_message(message) or is_large_content_reference(message)

    def recovery_hint(self, message: Message) -> str | None:
        """``lcm_expand`` with the archived id of a view message the host had to shorten."""
        item_id = self._context.id_of(message)
        return f'lcm_expand {{"id": "{item_id}"}}' if item_id else None

    def chat_commands(self) -> dict[str, ChatCommand]:
        """``/grep WORDS``: search the whole archived conversation from ``contextengine chat``."""
        return lcm_chat_commands(self)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """``lcm_grep``, ``lcm_describe`` and ``lcm_expand`` as OpenAI function schemas."""
        return tool_schemas()

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run one of the tools on the current conversation; always a JSON string.

        A ``messages`` keyword (the host's history) is stored first, so the
        tools see the latest turn.
        """
        history = kwargs.get("messages")
        if isinstance(history, list):
            self._ingest(history)
        conversation_id = self._ensure_conversation()
        context = ToolContext(
            store=self._store,
            conversation_id=conversation_id,
            in_view=self._context.__contains__,
            large_content_of=self._large.get,
            lineage=self._tool_lineage(conversation_id),
        )
        return call_tool(name, args, context)

    def _tool_lineage(self, conversation_id: str) -> tuple[str, ...]:
        """The open conversation and the ones it continues (a store without links: itself)."""
        if self._lineage is None or self._lineage[:1] != (conversation_id,):
            lineage = getattr(self._store, "conversation_lineage", None)
            found = lineage(conversation_id) if callable(lineage) else [conversation_id]
            self._lineage = tuple(str(c) for c in found) or (conversation_id,)
        return self._lineage

    # ------------------------------------------------------------------ status

    def get_status(self) -> dict[str, Any]:
        """The base status plus the stored message count and the active context's shape."""
        status = super().get_status()
        status.update(
            {
                "conversation_id": self._conversation_id,
                "stored_messages": self._next_seq,
                "context_messages": self._context.message_count,
                "context_summaries": self._context.summary_count,
                "view_tokens": self._last_view_tokens,
                **self.failure_policy.status(),
            }
        )
        return status

    def close(self) -> None:
        """Close the store when this engine opened it."""
        if self._owns_store:
            self._store.close()
