"""``ContextCompressor``: the default engine — prune, then summarise the middle.

The host drives it through the :class:`~contextengine.ContextEngine` lifecycle:
after every provider response it calls :meth:`ContextCompressor.update_from_response`,
then :meth:`~ContextCompressor.should_compress` and, when that says yes,
:meth:`~ContextCompressor.compress`. One compaction runs these steps:

1. **Head**: the system prompt, byte-identical, plus ``protect_first_n``
   messages on the first compaction; once a summary exists, the system prompt
   and that summary only (see :mod:`.boundaries`).
2. **Tail**: the recent messages within ``tail_token_budget``, at least
   ``protect_last_n`` of them, always with the latest real user message
   (``min_tail_user_messages`` of them) and its turn, never splitting a tool
   call from its results.
3. **Pass 1** (no model, :mod:`.prune`): descriptors for big tool outputs,
   pointers for repeated ones, shrunk arguments. When the conversation then
   fits under ``target_tokens`` compaction stops here.
4. **Pass 2**: the middle, as it was before pass 1, bounded, stripped of
   thinking blocks and redacted (:mod:`.request`), goes to the summariser in a
   :class:`~contextengine.summarizers.SummaryRequest`.
5. The summary enters as one framed message (:mod:`.summary`).
6. The output is validated, never bigger than the input, and the input list
   is never mutated.
7. :attr:`ContextCompressor.last_compression` reports the attempt.

With an archive (``archive=``, :mod:`.recoverable` and :mod:`.archive`) the
input is archived before step 3, descriptors and the summary name the ids
that reopen what they replace, and the summary is recorded in the archive
when the compaction commits; without one nothing of this happens.

Failures never lose data: an auth error aborts and returns the messages
unchanged; any other summariser failure is retried once on the main model
(``main_summarizer``, when there is one) and then falls back to the offline
:class:`~contextengine.DeterministicSummarizer`, or aborts with
``abort_on_summary_failure=True``. Cooldowns, the anti-thrash
block and the cap on waiting for the summariser are the shared
:class:`~contextengine.failure_policy.FailurePolicy`: a failure starts a
cooldown (60 s, 300 s, 900 s, or the provider's ``Retry-After``) for
automatic compaction; two compactions in a row that leave the next real
prompt over the threshold block automatic compaction as ``"ineffective"``,
with one retry after every three blocked turns. The report says why in one
word (:attr:`CompressionReport.cause`) and in the provider's (``error``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from contextengine.anchors import message_anchors
from contextengine.compaction_plan import CompressionPlan
from contextengine.engine import CompactionGate, sanitize_memory_context
from contextengine.engines.compressor.archive import without_archive_line
from contextengine.engines.compressor.boundaries import (
    LazyTokens,
    Regions,
    input_index,
    is_real_user_message,
    select_keep_regions,
    select_regions,
)
from contextengine.engines.compressor.prune import PruneResult, prune_region
from contextengine.engines.compressor.recoverable import RecoverableEngine, with_archive_line
from contextengine.engines.compressor.request import outbound_region, region_anchors
from contextengine.engines.compressor.summary import (
    frame_summary,
    is_summary_message,
    place_summary,
    split_summary,
    unframe_summary,
)
from contextengine.errors import SummarizerAuthError
from contextengine.failure_policy import (
    COOLDOWN_STEPS_S,
    DEFAULT_MAX_WAIT_S,
    FailureCause,
    FailurePolicy,
)
from contextengine.identifiers import append_missing_identifiers, previous_identifiers
from contextengine.messages import sanitize_tool_pairs, validate_messages
from contextengine.redact import redact
from contextengine.store.protocol import Store
from contextengine.summary_chain import OFFLINE_SUMMARY_MODEL, SummaryChain
from contextengine.summary_prompt import bound_text, content_text, render_summary_prompt
from contextengine.summary_request import Summarizer, SummaryRequest
from contextengine.tokens import (
    REPLY_PRIMING_TOKENS,
    count_tokens,
    estimate_tokens_rough,
    message_tokens,
)
from contextengine.usage import normalize_usage

__all__ = [
    "COOLDOWN_STEPS_S",
    "DEFAULT_SUMMARY_INPUT_CHARS",
    "CompressionReport",
    "ContextCompressor",
]

Message = dict[str, Any]

#: Default ``threshold_percent`` / ``target_percent`` without an archive: what is
#: summarised is gone, so compact late and keep half the threshold.
PLAIN_THRESHOLD = 0.75
PLAIN_TARGET = 0.5
#: The defaults with an archive: chosen from the cost-against-recall sweep on the
#: Claude Code sessions (benchmarks/tradeoff.py; docs/design.md).
RECOVERABLE_THRESHOLD = 0.6
RECOVERABLE_TARGET = 0.2
#: The smallest window the recoverable defaults apply to (see ``_percents``).
RECOVERABLE_MIN_WINDOW = 32_000

#: ``prune_tool_results_only`` commits only when it reclaims at least this many tokens.
MIN_PRUNE_RECLAIM_TOKENS = 4_096
# Rough growth since the last real reading below which preflight waits for the
# provider's count, as a share of the threshold.
_SMALL_GROWTH_SHARE = 0.1
#: Default characters of the middle sent in full to the summariser (newest first).
#: About 12k tokens: several times the summary budget, so the summary has room
#: to choose, while compacting a huge imported session stays as cheap as a normal one.
DEFAULT_SUMMARY_INPUT_CHARS = 48_000
#: Ranges of more messages than this are sized with the rough estimate, not counted.
EXACT_COUNT_LIMIT = 1_000


@dataclass
class CompressionReport:
    """What the last :meth:`ContextCompressor.compress` call did (``last_compression``)."""

    #: True when the messages were returned unchanged.
    aborted: bool = False
    #: True when the deterministic fallback wrote the summary.
    fallback_used: bool = False
    #: ``"pruned"``, ``"summarized"``, or why it aborted or fell back.
    reason: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    #: Calls to a summariser, the fallback included; 0 when pass 1 sufficed.
    summarizer_calls: int = 0
    duration_s: float = 0.0
    #: Tool outputs replaced by descriptors in pass 1.
    pruned_results: int = 0
    #: Tool outputs replaced by a pointer to an identical earlier one.
    duplicate_outputs: int = 0
    #: Tool calls whose arguments were shrunk.
    shrunk_arguments: int = 0
    #: Messages folded into the summary (0 when pass 1 sufficed).
    summarized_messages: int = 0
    #: Why the compaction failed, fell back or freed nothing, in one word
    #: (:data:`~contextengine.failure_policy.FailureCause`), else None.
    cause: FailureCause | None = None
    #: The summariser's (or provider's) own words about the failure, else None.
    error: str | None = None
    #: The model that wrote the summary: the configured summary model, the main
    #: model (after the summary model failed), or ``"offline"`` (the deterministic
    #: summariser); None when no summary was written.
    summary_model: str | None = None
    #: What went wrong with the models that did not write the summary, naming each
    #: (``"model: words; model: words"``), else None.
    summary_error: str | None = None
    #: The models that failed, comma-separated, else None.
    summary_failed_model: str | None = None
    #: The archive summary standing for what was summarised (``lcm_expand`` it), else None.
    summary_id: str | None = None
    #: Why the archive stopped working (the compressor goes on without it), else None.
    #: The host turns it into an ``archive_failed`` warning event.
    warning: str | None = None


class ContextCompressor(RecoverableEngine):
    """The default context engine: prune old tool traffic, then summarise the middle.

    Keyword-only configuration; every budget left as None is derived from the
    model's context length by :meth:`update_model`, and re-derived on every
    model switch:

    * ``tail_token_budget``: 20% of ``threshold_tokens``;
    * ``summary_token_budget``: 5% of ``context_length``, between 1,000 and 10,000;
    * ``target_tokens``: ``target_percent`` of ``threshold_tokens`` — pass 1
      alone is enough when it brings the conversation under this;
    * ``threshold_percent`` / ``target_percent``: 75% / 50% without an archive,
      60% / 20% with one from a 32,000-token window up
      (:data:`RECOVERABLE_THRESHOLD`: what a recoverable compressor removes can
      be searched back, so it compacts earlier and keeps less; the defaults
      come from the cost-against-recall sweep in docs/benchmarks.md);
    * ``summarizer``: :class:`~contextengine.DeterministicSummarizer` (offline).

    ``main_summarizer`` (the main model's, or None) is asked once when
    ``summarizer`` fails with anything but an auth error, before the offline
    fallback. ``abort_on_summary_failure`` makes a failed summary abort the
    compaction, messages unchanged, instead of falling back to the offline one.

    ``summary_input_chars`` bounds how much of the middle is sent to the
    summariser in full (newest first; see :mod:`.request`).
    ``clock`` (seconds, monotonic) times the cooldowns; tests inject a fake.
    ``max_summary_wait_s`` caps how long one compaction waits on the
    summariser, retries included. ``proactive_prune_tokens`` opts in to
    :meth:`prune_tool_results_only`. ``max_threshold_tokens`` caps the
    threshold in tokens beside ``threshold_percent``, and
    ``reserved_output_tokens`` keeps room for the reply (the host updates it
    from each request's ``max_tokens``); see
    :func:`~contextengine.engine.compaction_threshold` for the whole rule.

    ``archive`` makes compaction recoverable (:mod:`.archive`): a path,
    ``":memory:"``, a URL or a :class:`~contextengine.store.Store` (lcm's
    ``store=`` values), or True for the default archive file when its data
    directory is writable. Everything the compressor summarises or prunes is
    then stored verbatim there first, its summaries and descriptors name the
    ids that reopen it, and it offers ``lcm_grep`` / ``lcm_describe`` /
    ``lcm_expand``. None or False (the default for the class itself; ``contextengine
    chat`` turns it on): no archive, exactly the behaviour without one.
    ``redact_at_rest`` stores secrets redacted, as for lcm. An archive that
    fails is dropped with a warning (:attr:`CompressionReport.warning`): the
    conversation never breaks for it.
    """

    def __init__(
        self,
        *,
        context_length: int,
        model: str = "",
        summarizer: Summarizer | None = None,
        main_summarizer: Summarizer | None = None,
        abort_on_summary_failure: bool = False,
        threshold_percent: float | None = None,
        protect_first_n: int = 3,
        protect_last_n: int = 6,
        tail_token_budget: int | None = None,
        summary_token_budget: int | None = None,
        model_thresholds: dict[str, float] | None = None,
        proactive_prune_tokens: int | None = None,
        target_percent: float | None = None,
        target_tokens: int | None = None,
        summary_input_chars: int = DEFAULT_SUMMARY_INPUT_CHARS,
        clock: Callable[[], float] = time.monotonic,
        max_summary_wait_s: float = DEFAULT_MAX_WAIT_S,
        max_threshold_tokens: int | None = None,
        reserved_output_tokens: int = 0,
        min_tail_user_messages: int = 1,
        archive: Store | str | os.PathLike[str] | bool | None = None,
        redact_at_rest: bool = False,
    ) -> None:
        if int(context_length) <= 0:
            raise ValueError(f"context_length must be positive, got {context_length!r}")
        # The archive decides the defaults: what leaves the context of a
        # recoverable compressor can be searched back, so it compacts earlier
        # and keeps a smaller tail (docs/design.md, "Defaults from the trade-off").
        self._init_archive(archive, redact_at_rest)
        #: Decided once: an archive that fails later does not move the thresholds.
        self._recoverable_defaults = self._archive is not None
        self._threshold_percent_setting = threshold_percent
        self._target_percent_setting = target_percent
        threshold_percent, target_percent = self._percents(int(context_length))
        if not 0 < threshold_percent <= 1:
            raise ValueError(f"threshold_percent must be in (0, 1], got {threshold_percent!r}")
        if not 0 < target_percent <= 1:
            raise ValueError(f"target_percent must be in (0, 1], got {target_percent!r}")
        if protect_first_n < 0 or protect_last_n < 0 or min_tail_user_messages < 0:
            raise ValueError(
                "protect_first_n, protect_last_n and min_tail_user_messages must be >= 0"
            )
        #: Real user messages the kept tail always holds (their turns with them).
        self.min_tail_user_messages = min_tail_user_messages
        self.threshold_percent = threshold_percent
        self.max_threshold_tokens = max_threshold_tokens
        self.reserved_output_tokens = max(0, int(reserved_output_tokens))
        self.protect_first_n = protect_first_n
        self.protect_last_n = protect_last_n
        self.model_thresholds = dict(model_thresholds or {})
        self.proactive_prune_tokens = proactive_prune_tokens
        self.target_percent = target_percent
        self.summary_input_chars = summary_input_chars
        self._tail_budget_setting = tail_token_budget
        self._summary_budget_setting = summary_token_budget
        self._target_setting = target_tokens
        self._summarizer = summarizer
        self._main_summarizer = main_summarizer
        self._chain: SummaryChain | None = None
        #: A failed summary aborts the compaction instead of falling back to the offline one.
        self.abort_on_summary_failure = bool(abort_on_summary_failure)
        self._clock = clock
        self.last_compression: CompressionReport | None = None
        #: Cooldowns, anti-thrash and the wait cap, shared with every engine.
        self.failure_policy = FailurePolicy(
            cooldown_steps_s=COOLDOWN_STEPS_S, max_wait_s=max_summary_wait_s, clock=clock
        )
        self._pending_rough: int | None = None
        self._rough_at_usage: int | None = None
        # One compaction at a time, for hosts that call from several threads.
        self._gate = CompactionGate()
        # The history already seen by on_turn_complete: its length and last message.
        self._seen_len = 0
        self._seen_last: Message | None = None
        self.tail_token_budget = 0
        self.summary_token_budget = 0
        self.target_tokens = 0
        self.update_model(model, context_length)

    def _percents(self, context_length: int) -> tuple[float, float]:
        """``threshold_percent`` and ``target_percent``: as given, else the defaults.

        With an archive, from a window of :data:`RECOVERABLE_MIN_WINDOW` up: 60% / 20%
        (compact earlier, keep less: what leaves is one search away). Below it,
        or without an archive, 75% / 50%: in a small window the protected head
        and tail fill most of 60%, and an earlier compaction has too little
        between them to summarise.
        """
        early = self._recoverable_defaults and context_length >= RECOVERABLE_MIN_WINDOW
        threshold = self._threshold_percent_setting
        target = self._target_percent_setting
        if threshold is None:
            threshold = RECOVERABLE_THRESHOLD if early else PLAIN_THRESHOLD
        if target is None:
            target = RECOVERABLE_TARGET if early else PLAIN_TARGET
        return threshold, target

    @property
    def name(self) -> str:
        return "compressor"

    @property
    def summarizer(self) -> Summarizer:
        """The configured summariser, or the offline default (built on first use)."""
        if self._summarizer is None:
            self._summarizer = _deterministic()
        return self._summarizer

    @property
    def summary_chain(self) -> SummaryChain:
        """The summariser, then the main model once: who is asked for a summary, in order."""
        # Rebuilt when the summariser was replaced: its cooldown was the old one's.
        if self._chain is None or self._chain.primary is not self.summarizer:
            self._chain = SummaryChain(self.summarizer, self._main_summarizer, clock=self._clock)
        return self._chain

    # ------------------------------------------------------------------ model and usage

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        """Adopt a model; re-derive the budgets and clear the anti-thrash block.

        Called at construction and by the host on every model switch: a new
        context length makes the old "ineffective" verdict meaningless, and
        another model makes the old cooldown meaningless too, and the
        calibration of the rough estimate against real usage (another tokenizer).
        """
        if model != self.model:
            self.failure_policy.reset()
            self._pending_rough = self._rough_at_usage = None
        # The default percents depend on the window (see _percents); given ones never move.
        threshold_percent, self.target_percent = self._percents(int(context_length))
        if self._threshold_percent_setting is None:
            self._configured_threshold_percent = threshold_percent
        super().update_model(model, context_length, base_url, api_key, provider, api_mode)
        threshold = self.threshold_tokens
        self.tail_token_budget = (
            self._tail_budget_setting
            if self._tail_budget_setting is not None
            else int(threshold * 0.2)
        )
        self.summary_token_budget = (
            self._summary_budget_setting
            if self._summary_budget_setting is not None
            else max(1_000, min(int(self.context_length * 0.05), 10_000))
        )
        self.target_tokens = (
            self._target_setting
            if self._target_setting is not None
            else int(threshold * self.target_percent)
        )
        self.failure_policy.clear_thrash()

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Observe a response's usage; judge the last compaction on the real count.

        Called by the host after every provider response. The usage is
        normalised (any provider shape). A reading under the threshold clears
        the anti-thrash block; the first reading after a compaction that is
        still at or over it counts that compaction as ineffective.
        """
        normalized = normalize_usage(usage)
        prompt = normalized["prompt_tokens"]
        self.last_prompt_tokens = prompt
        self.last_completion_tokens = normalized["completion_tokens"]
        self.last_total_tokens = normalized["total_tokens"]
        if prompt <= 0:
            return  # no usage reported: nothing to judge on
        self._rough_at_usage = self._pending_rough
        self.failure_policy.observe_prompt(prompt, self.threshold_tokens)

    # ------------------------------------------------------------------ decisions

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True when the prompt is at or over the threshold and nothing blocks compaction."""
        return self.should_compress_info(prompt_tokens)[0]

    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """The decision and, when it is no, why: ``"below_threshold"``,
        ``"cooldown:<seconds>"`` or ``"ineffective"``."""
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        if tokens < self.threshold_tokens:
            return False, "below_threshold"
        blocked = self.failure_policy.block()
        if blocked is not None:
            return False, blocked[1]
        return True, None

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        """True when the rough estimate of ``messages`` is at or over the threshold,
        unless the failure policy blocks automatic compaction (a cooldown)."""
        if self.failure_policy.block() is not None:
            return False
        return estimate_tokens_rough(messages) >= self.threshold_tokens

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        """True right after a compaction until real usage arrives, and while the
        last real count fit and the rough growth since then is small.

        Called by the host before each request with the request's rough
        estimate; the estimate seen just before a real reading becomes the
        baseline the next growth is measured from.
        """
        self._pending_rough = rough_tokens
        if self.last_prompt_tokens == -1:
            return True
        last = self.last_prompt_tokens
        if last <= 0 or last >= self.threshold_tokens:
            return False
        baseline = self._rough_at_usage if self._rough_at_usage is not None else last
        growth = rough_tokens - baseline
        return (
            growth <= self.threshold_tokens * _SMALL_GROWTH_SHARE
            and last + max(0, growth) < self.threshold_tokens
        )

    def has_content_to_compress(
        self, messages: list[Message], *, keep_last: int | None = None
    ) -> bool:
        """False when every message is protected (head, tail): compress would do nothing.

        Asked before a manual compress, which is forced: the tail is then only
        ``protect_last_n`` messages and the latest user turns, whatever its
        budget; with ``keep_last``, the last ``keep_last`` messages (see
        :meth:`compress`).
        """
        if not messages:
            return False
        regions = self._regions(messages, LazyTokens(messages, self._count), keep_last, forced=True)
        return bool(regions.middle())

    def plan_compression(
        self,
        messages: list[Message],
        *,
        keep_last: int | None = None,
        focus_topic: str | None = None,
    ) -> CompressionPlan:
        """Decide: what :meth:`compress` with ``force=True`` would do, without a summariser.

        The regions are those :meth:`compress` would cut. Without
        ``keep_last``, when pruning old tool outputs alone would reach
        ``target_tokens`` (pass 1), the plan says so and summarises nothing;
        otherwise the middle is summarised, and the summary is estimated at a
        third of what it replaces, within ``summary_token_budget``: the size
        after is an estimate, never above the size before (a summary that
        would not shrink the conversation is not committed).
        """
        tokens = LazyTokens(messages, self._count)
        regions = self._regions(messages, tokens, keep_last)
        middle = regions.middle()
        before = tokens.total(0, len(messages)) + REPLY_PRIMING_TOKENS
        kept = len(regions.work) - regions.tail_start
        plan = CompressionPlan(
            engine=self.name,
            messages=tuple(middle),
            tokens_to_summarize=0,
            kept_messages=kept,
            keep_last=keep_last,
            tokens_before=before,
            estimated_tokens_after=before,
            previous_summaries=1 if regions.previous_summary else 0,
            focus_topic=focus_topic,
        )
        if not middle:
            return replace(plan, note="nothing outside the protected head and tail")
        start = input_index(regions, regions.head_end)
        end = input_index(regions, regions.tail_start)
        if keep_last is None:
            pruned = prune_region(messages[start:end])
            reclaimed = sum(
                tokens[start + i] - self._count(pruned.messages[i]) for i in pruned.changed
            )
            if pruned.changed and before - reclaimed <= self.target_tokens:
                return replace(
                    plan,
                    messages=(),
                    estimated_tokens_after=before - reclaimed,
                    note=(
                        f"shortening {len(pruned.changed)} old tool output(s) is enough: "
                        "no summary would be written"
                    ),
                )
        middle_tokens = sum(regions.tokens[i] for i in regions.middle_indices)
        if regions.pinned is not None:
            middle_tokens -= regions.tokens[regions.pinned]
        if regions.previous_summary:
            middle_tokens += count_tokens(regions.previous_summary, self.model or None)
        stays = tokens.total(0, regions.head_end) + tokens.total(end, len(messages))
        if regions.pinned is not None:
            stays += regions.tokens[regions.pinned]
        removed = before - REPLY_PRIMING_TOKENS - stays
        # The summary is asked for within summary_token_budget; a third of what
        # it replaces is the ratio the lossless engine budgets its leaves with.
        summary = min(self.summary_token_budget, max(64, middle_tokens // 3))
        summary += count_tokens(frame_summary(""), self.model or None)
        after = min(before, before - removed + summary)
        note = "the latest user message is kept verbatim too" if regions.pinned is not None else ""
        return replace(
            plan,
            tokens_to_summarize=middle_tokens,
            estimated_tokens_after=after,
            note=note,
        )

    # ------------------------------------------------------------------ observation

    def on_turn_complete(
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Observe a finished turn: find the anchors of the messages new since the last turn.

        Called by the host once per turn with the whole history. Only the
        messages appended since the previous call are scanned (recognised by
        the length and the identity of the last message seen), so the cost is
        per turn and proportional to what is new; a compaction then finds the
        anchors of its region in the cache (:func:`contextengine.anchors.message_anchors`).
        After the history was rewritten (a compaction) it is looked up whole
        once: the messages kept are cached already and cost a lookup each.
        """
        seen = self._seen_len
        if not (0 < seen <= len(messages) and messages[seen - 1] is self._seen_last):
            seen = 0
        for message in messages[seen:]:
            if isinstance(message, dict):
                message_anchors(message)
        self._seen_len = len(messages)
        self._seen_last = messages[-1] if messages else None

    def on_session_reset(self) -> None:
        """Forget the token state, the history seen by :meth:`on_turn_complete` and
        the open archive conversation."""
        super().on_session_reset()
        self._seen_len = 0
        self._seen_last = None
        if self._archive is not None:
            # The next compaction opens a new archive conversation (or on_session_start's).
            self._archive.reset()

    # ------------------------------------------------------------------ transforms

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
        """Transform: prune, and summarise the middle when pruning is not enough.

        Called by the host when :meth:`should_compress` says so, on provider
        overflow, and for a manual compress (``force=True``, which also lifts
        the cooldown and the anti-thrash block). Returns a new list, or the
        input unchanged when the attempt aborted; ``last_compression`` says
        which. The engine counts the head and tail itself (cached);
        ``current_tokens``, the host's count of the whole list, is used only
        for a middle too long to count (over 1,000 messages).

        ``keep_last`` (a manual compaction) keeps exactly the last
        ``keep_last`` messages (moved back to a tool call's start when the cut
        falls on its results) and summarises everything after the system
        prompt before them: the protected head, the previous summary and the
        pinned user message are not kept, and pruning alone never ends the
        compaction, since the person asked for a summary.

        One call at a time (:class:`~contextengine.CompactionGate`): a second
        thread waits, and gets the first one's result when it passed the same list.
        """
        return self._gate.run(
            messages,
            lambda: self._compress_once(
                messages, current_tokens, focus_topic, force, memory_context, keep_last
            ),
            key=(focus_topic, force, memory_context, keep_last),
        )

    def _compress_once(
        self,
        messages: list[Message],
        current_tokens: int | None,
        focus_topic: str | None,
        force: bool,
        memory_context: str,
        keep_last: int | None,
    ) -> list[Message]:
        started = time.perf_counter()
        report = CompressionReport(messages_before=len(messages))
        report.warning, self._archive_warning = self._archive_warning, None
        self.last_compression = report
        if force:
            self.failure_policy.clear_thrash()
        try:
            result = self._compress(
                messages, report, current_tokens, focus_topic, force, memory_context, keep_last
            )
        finally:
            report.duration_s = time.perf_counter() - started
        return result

    def is_own_message(self, message: Message) -> bool:
        """A summary message of this engine, standalone (a merged one holds the user's text)."""
        return is_summary_message(message) and split_summary(message).remainder is None

    def prune_tool_results_only(
        self, messages: list[Message], current_tokens: int | None = None
    ) -> tuple[list[Message], int]:
        """Transform without a model: descriptors for old tool outputs outside the tail.

        Called by the host after tool calls when :meth:`should_compress` says
        no. Opt-in through ``proactive_prune_tokens``: runs only when the
        context is at least that big, and commits only when it reclaims at
        least 4,096 tokens, because every prune invalidates the provider's
        prompt cache from the first changed message on. Otherwise returns the
        very same list object and 0. Idempotent; tool pairs stay intact.
        """
        if self.proactive_prune_tokens is None or not messages:
            return messages, 0
        tokens = LazyTokens(messages, self._count)
        current = current_tokens
        if current is None or current <= 0:
            current = (
                self.last_prompt_tokens
                if self.last_prompt_tokens > 0
                else estimate_tokens_rough(messages)
            )
        if current < self.proactive_prune_tokens:
            return messages, 0
        regions = self._regions(messages, tokens)
        start, end = (
            input_index(regions, regions.head_end),
            input_index(regions, regions.tail_start),
        )
        pruned = prune_region(messages[start:end])
        reclaimed = self._reclaimed(pruned, tokens, start)
        if reclaimed < MIN_PRUNE_RECLAIM_TOKENS:
            return messages, 0
        ids = self._archive_ids(messages, None)
        if ids:
            # Pruned again, the descriptors now naming their ids (a little longer).
            pruned = prune_region(messages[start:end], ids=ids[start:end])
            reclaimed = self._reclaimed(pruned, tokens, start)
            self._archive_pruned(pruned, ids, start)
        return [*messages[:start], *pruned.kept(), *messages[end:]], reclaimed

    def get_status(self) -> dict[str, Any]:
        """The base status plus the failure policy's: the last cause, when compaction resumes.

        With an archive, ``archive_conversation_id`` names the conversation it writes.
        """
        status = super().get_status()
        status.update(self.failure_policy.status())
        if self._archive is not None:
            status["archive_conversation_id"] = self._archive.conversation_id
        return status

    # ------------------------------------------------------------------ internals

    def _count(self, msg: Message) -> int:
        return message_tokens(msg, self.model or None)

    def _reclaimed(self, pruned: PruneResult, tokens: LazyTokens, start: int) -> int:
        """Tokens pass 1 frees: changed messages' savings plus the dropped ones whole."""
        saved = sum(tokens[start + i] - self._count(pruned.messages[i]) for i in pruned.changed)
        return saved + sum(tokens[start + i] for i in pruned.dropped)

    def _regions(
        self,
        messages: list[Message],
        tokens: LazyTokens,
        keep_last: int | None = None,
        *,
        forced: bool = False,
    ) -> Regions:
        """The cuts of ``messages``: the last ``keep_last`` kept exactly, when given.

        Otherwise the head and a token-budgeted tail; ``forced`` keeps no more
        tail than ``protect_last_n``: a forced compaction (manual, overflow) of
        a chat that fits the tail budget would otherwise find nothing to
        compact, so it asks again with a tail budget of 0, which still keeps
        ``protect_last_n`` messages and the latest user turns
        (``min_tail_user_messages``).
        """
        if keep_last is not None:
            return select_keep_regions(
                messages,
                tokens=tokens,
                count=self._count,
                protect_first_n=self.protect_first_n,
                keep_last=keep_last,
            )
        regions = self._select(messages, tokens, self.tail_token_budget)
        if forced and not regions.middle():
            regions = self._select(messages, tokens, 0)
        return regions

    def _select(self, messages: list[Message], tokens: LazyTokens, tail_budget: int) -> Regions:
        # The latest turn is kept whole only while it fits in what is left once
        # the summary is written; beyond that its user message is pinned instead.
        turn_cap = max(self.tail_token_budget, self.target_tokens - self.summary_token_budget)
        return select_regions(
            messages,
            tokens=tokens,
            count=self._count,
            is_summary=is_summary_message,
            protect_first_n=self.protect_first_n,
            protect_last_n=self.protect_last_n,
            tail_token_budget=tail_budget,
            turn_cap=turn_cap,
            min_tail_user_messages=self.min_tail_user_messages,
        )

    def _range_tokens(self, tokens: LazyTokens, messages: list[Message], a: int, b: int) -> int:
        """Tokens of ``messages[a:b]``: exact, or estimated for a range too long to count.

        A range over :data:`EXACT_COUNT_LIMIT` messages only arises when a huge
        history is compacted at once; it is summarised anyway, and its size
        only has to be right to within the rough estimate's error.
        """
        if b - a <= EXACT_COUNT_LIMIT:
            return tokens.total(a, b)
        return estimate_tokens_rough(messages[a:b]) - REPLY_PRIMING_TOKENS

    def _compress(
        self,
        messages: list[Message],
        report: CompressionReport,
        current_tokens: int | None,
        focus_topic: str | None,
        force: bool,
        memory_context: str,
        keep_last: int | None = None,
    ) -> list[Message]:
        body: str | None = None
        for repaired in (False, True):
            if repaired:
                # Broken input (a call without its result, an orphan result) is
                # repaired and the attempt redone: the output must be valid
                # whatever came in. Validating the output instead of the input
                # keeps the common case from walking the whole history.
                messages = sanitize_tool_pairs(messages)
            tokens = LazyTokens(messages, self._count)
            regions = self._regions(messages, tokens, keep_last, forced=force)
            middle = regions.middle()
            start = input_index(regions, regions.head_end)
            end = input_index(regions, regions.tail_start)
            if end - start > EXACT_COUNT_LIMIT and current_tokens:
                before = current_tokens  # the host's count beats our estimate of a huge range
            else:
                before = (
                    tokens.total(0, start)
                    + self._range_tokens(tokens, messages, start, end)
                    + tokens.total(end, len(messages))
                    + REPLY_PRIMING_TOKENS
                )
            report.tokens_before = report.tokens_after = before
            report.messages_after = len(messages)
            if not middle:
                return self._no_change(self._valid(messages), report, "nothing_to_compress")
            # Everything is archived before anything leaves the context.
            ids = self._archive_ids(messages, report)

            # Pass 1 runs over the input's own slots, so a previous summary
            # between the head and the middle stays exactly where it is. It is
            # skipped when even pruning every tool payload to nothing could not
            # reach the target: a summary is needed anyway, and on a huge
            # history pass 1 would cost more than everything else together.
            pass1: list[Message] | None = None
            pass1_tokens = before
            tool_slots = [
                i
                for i in range(start, end)
                if messages[i].get("role") == "tool" or messages[i].get("tool_calls")
            ]
            if len(tool_slots) <= EXACT_COUNT_LIMIT:
                prunable = sum(tokens[i] for i in tool_slots)
            else:
                prunable = estimate_tokens_rough([messages[i] for i in tool_slots])
            if before - prunable <= self.target_tokens:
                pruned = prune_region(messages[start:end], ids=ids[start:end] if ids else None)
                report.pruned_results = pruned.results_pruned
                report.duplicate_outputs = pruned.duplicates
                report.shrunk_arguments = pruned.arguments_shrunk
                if pruned.changed or pruned.dropped:
                    pass1 = [*messages[:start], *pruned.kept(), *messages[end:]]
                    pass1_tokens = before - self._reclaimed(pruned, tokens, start)
                    if pass1_tokens <= self.target_tokens and keep_last is None:
                        if not _is_valid(pass1):
                            continue
                        self._archive_pruned(pruned, ids, start)
                        return self._commit(pass1, pass1_tokens, report, "pruned")

            # Pass 2: summarise the middle as it was before pass 1.
            if body is None:
                middle_tokens = (
                    before
                    - REPLY_PRIMING_TOKENS
                    - regions.tokens.total(0, regions.head_end)
                    - regions.tokens.total(regions.tail_start, len(regions.work))
                )
                if regions.pinned is not None:
                    middle_tokens -= regions.tokens[regions.pinned]
                request = self._request(regions, middle, focus_topic, memory_context)
                body, failure = self._summarize(request, middle_tokens, force, report)
                if body is None:
                    return self._abort(self._valid(messages), report, failure)
            planned = self._plan_summary(middle, body, report)
            output, after = self._assemble(regions, with_archive_line(body, planned))
            if not _is_valid(output):
                continue
            if after >= pass1_tokens:
                # The summary freed less than pruning alone (a tiny middle):
                # keep the better of the two, or nothing when neither is smaller.
                if pass1 is not None and _is_valid(pass1):
                    self._archive_pruned(pruned, ids, start)
                    return self._commit(pass1, pass1_tokens, report, "pruned")
                return self._no_change(self._valid(messages), report, "not_smaller")
            report.summarized_messages = len(middle)
            if planned is not None and not self._record_summary(planned, report):
                # The summary must not name an id the archive does not hold.
                output, after = self._assemble(regions, body)
            return self._commit(output, after, report, report.reason or "summarized")
        return self._abort(messages, report, "invalid_input")

    @staticmethod
    def _valid(messages: list[Message]) -> list[Message]:
        """``messages`` when valid, else their repaired copy: what an abort returns."""
        return messages if _is_valid(messages) else sanitize_tool_pairs(messages)

    def _request(
        self,
        regions: Regions,
        middle: list[Message],
        focus_topic: str | None,
        memory_context: str,
    ) -> SummaryRequest:
        sent = outbound_region(middle, budget_chars=self.summary_input_chars)
        anchors = region_anchors(middle)
        memory = sanitize_memory_context(memory_context)
        # Everything that leaves for the summariser is redacted: an earlier
        # summary may come from another tool or version, a focus from the user.
        # The previous summary's archive line is ours to write again, not the summariser's.
        previous_text = without_archive_line(regions.previous_summary)
        previous = redact(previous_text) if previous_text else ""
        focus_topic = redact(focus_topic) if focus_topic else focus_topic
        # No focus given: the prompt serves the user's latest request instead.
        # It stays out of focus_topic, which means "what the user asked for".
        automatic = redact(_latest_requests(regions)) if not focus_topic else ""
        metadata: dict[str, Any] = {"engine": self.name, "compression": self.compression_count + 1}
        if automatic:
            metadata["automatic_focus"] = automatic
        return SummaryRequest(
            messages=sent,
            anchors=anchors,
            previous_summary=previous,
            focus_topic=focus_topic,
            memory_context=memory,
            token_budget=self.summary_token_budget,
            prompt=render_summary_prompt(
                messages=sent,
                previous_summary=previous,
                focus_topic=focus_topic or automatic or None,
                memory_context=memory,
                token_budget=self.summary_token_budget,
                anchors=anchors,
                automatic_focus=bool(automatic),
            ),
            metadata=metadata,
        )

    def _summarize(
        self, request: SummaryRequest, input_tokens: int, force: bool, report: CompressionReport
    ) -> tuple[str | None, str]:
        """The summary body, or (None, why) when the compaction must abort.

        The configured summariser is asked first, then (on a failure other
        than auth) the main model once (:class:`~contextengine.summary_chain.SummaryChain`).
        Failures follow the shared :class:`~contextengine.failure_policy.FailurePolicy`:
        an auth error aborts (and cools down); when every model failed, a
        summary no smaller than its input or filling the threshold came back, or
        a cooldown is in progress, the offline fallback writes the summary, or
        the compaction aborts with ``abort_on_summary_failure``. The report
        records the cause, which model wrote the summary and which failed.
        """
        policy = self.failure_policy
        chain = self.summary_chain
        cause: FailureCause
        if not force and policy.cooldown_remaining() > 0:
            # The failing summariser is not called again before its cooldown ends;
            # a compaction that must happen anyway (overflow) gets the fallback.
            cause, error = "cooldown", f"cooling down for {policy.cooldown_remaining():.0f} s"
            policy.record(cause, error)
            report.summary_failed_model = chain.primary_model
        else:
            request = replace(request, deadline=policy.wait_deadline())
            try:
                result = chain.summarize(
                    request,
                    check=lambda text: _check_summary(
                        text, input_tokens, self.model, self.threshold_tokens
                    ),
                )
            except SummarizerAuthError as exc:
                report.summarizer_calls += 1
                policy.summarizer_failed("auth", str(exc))
                report.cause, report.error = "auth", str(exc)
                report.summary_error, report.summary_failed_model = str(exc), chain.primary_model
                return None, f"summarizer_auth: {exc}"
            report.summarizer_calls += result.calls
            report.summary_error, report.summary_failed_model = result.error, result.failed_model
            if result.text is not None:
                policy.summarizer_succeeded()
                report.summary_model = result.model
                if result.model == OFFLINE_SUMMARY_MODEL:
                    return result.text, ""
                return self._with_identifiers(result.text, request, input_tokens), ""
            cause = result.cause or "server_error"
            error = result.error or "no summary"
            # One failure for the whole chain: one step of the cooldown ladder.
            policy.summarizer_failed(cause, error, retry_after=result.retry_after)
        report.cause, report.error = cause, error
        if report.summary_error is None:
            report.summary_error = error
        if self.abort_on_summary_failure:
            return None, f"summary_failed: {error}"[:300]
        report.fallback_used = True
        report.reason = ("fallback: cooldown" if cause == "cooldown" else f"fallback: {error}")[
            :300
        ]
        if isinstance(chain.primary, _deterministic_class()) and cause != "cooldown":
            return None, f"summarizer_failed: {error}"
        report.summarizer_calls += 1
        try:
            body = _deterministic().summarize(request)
        except Exception as exc:  # the fallback failing too must not lose data
            return None, f"fallback_failed: {type(exc).__name__}: {exc}"
        if not body.strip():
            return None, "fallback_failed: empty summary"
        report.summary_model = OFFLINE_SUMMARY_MODEL
        return body.strip(), ""

    def _with_identifiers(self, text: str, request: SummaryRequest, input_tokens: int) -> str:
        """A model's summary with the region's identifiers it left out appended, packed.

        A model paraphrases identifiers away however the prompt asks; the
        offline summariser never does, so only model summaries get this. The
        section fills what is left of ``summary_token_budget``, and at least a
        quarter of it (a model that used its whole budget still loses no more
        than the budget can hold), never making the summary longer than its input.
        """
        text = unframe_summary(text)  # what is added must land inside the markers
        used = count_tokens(text, self.model or None)
        room = max(self.summary_token_budget - used, self.summary_token_budget // 4)
        room = min(room, input_tokens - used)
        # The region's identifiers first, then those of the summary it replaces
        # (already redacted), so that a model cannot drop them on a later pass.
        anchors = [*request.anchors, *previous_identifiers(request.previous_summary)]
        return append_missing_identifiers(
            text, anchors, budget_tokens=room, model=self.model or None
        )

    def _assemble(self, regions: Regions, body: str) -> tuple[list[Message], int]:
        work, tokens = regions.work, regions.tokens
        head = work[: regions.head_end]
        after_list = work[regions.tail_start :]
        after_tokens = tokens.total(regions.tail_start, len(work))
        if regions.pinned is not None:
            after_list = [work[regions.pinned], *after_list]
            after_tokens += tokens[regions.pinned]
        before_msg = head[-1] if head else None
        first_after = after_list[0] if after_list else None
        mode, summary_msg = place_summary(before_msg, first_after, body)
        total = tokens.total(0, regions.head_end) + after_tokens + REPLY_PRIMING_TOKENS
        total += self._count(summary_msg)
        if mode == "merged":
            total -= self._count(after_list[0])
            output = [*head, summary_msg, *after_list[1:]]
        else:
            output = [*head, summary_msg, *after_list]
        return output, total

    def _commit(
        self, output: list[Message], tokens_after: int, report: CompressionReport, reason: str
    ) -> list[Message]:
        report.reason = reason
        report.tokens_after = tokens_after
        report.messages_after = len(output)
        self.compression_count += 1
        self.last_prompt_tokens = -1
        self.failure_policy.compaction_committed()
        return output

    def _no_change(
        self, messages: list[Message], report: CompressionReport, reason: str
    ) -> list[Message]:
        # A compaction that frees nothing is as ineffective as one whose next
        # reading stays over the threshold: it counts toward the block at once.
        self.failure_policy.freed_nothing()
        result = self._abort(messages, report, reason)
        if reason != "nothing_to_compress":
            report.cause = "ineffective"
        return result

    def _abort(
        self, messages: list[Message], report: CompressionReport, reason: str
    ) -> list[Message]:
        report.aborted = True
        report.fallback_used = False
        report.reason = reason
        report.tokens_after = report.tokens_before
        report.messages_after = len(messages)
        return messages


#: The automatic focus: this many latest user messages, each cut to this many characters.
AUTOMATIC_FOCUS_MESSAGES = 2
AUTOMATIC_FOCUS_CHARS = 300


def _latest_requests(regions: Regions) -> str:
    """The latest real user messages after the middle: what a summary must serve next.

    The focus of a compaction nobody gave a ``focus_topic`` to: the user's
    current request, kept verbatim in the tail (or pinned), tells the
    summariser what of the middle matters now.
    """
    kept = [regions.work[i] for i in range(regions.tail_start, len(regions.work))]
    if regions.pinned is not None:
        kept.insert(0, regions.work[regions.pinned])
    texts: list[str] = []
    for message in reversed(kept):
        if is_real_user_message(message, is_summary_message):
            text = " ".join(content_text(message.get("content")).split())
            if text:
                texts.append(bound_text(text, AUTOMATIC_FOCUS_CHARS))
            if len(texts) >= AUTOMATIC_FOCUS_MESSAGES:
                break
    return " / ".join(reversed(texts))


def _is_valid(messages: list[Message]) -> bool:
    try:
        validate_messages(messages)
    except ValueError:
        return False
    return True


def _check_summary(
    body: Any, input_tokens: int, model: str, threshold_tokens: int = 0
) -> tuple[FailureCause, str] | None:
    """Why a summariser's answer is unusable, as (cause, words), or None when it is fine.

    Too long is longer than its input, or (``threshold_tokens`` > 0) at or over
    the threshold: a middle that grew during a cooldown can be longer than a
    runaway answer, which would then fill the context on its own.
    """
    if not isinstance(body, str) or not body.strip():
        return "bad_response", "empty summary"
    tokens = count_tokens(body, model or None)
    if tokens > input_tokens:
        return (
            "over_budget",
            f"summary of {tokens} tokens is longer than its input ({input_tokens})",
        )
    if 0 < threshold_tokens <= tokens:
        return (
            "over_budget",
            f"summary of {tokens} tokens alone fills the {threshold_tokens}-token threshold",
        )
    return None


def _deterministic_class() -> type[Any]:
    # Imported late: the summarisers module imports engine-level helpers, and the
    # compressor must stay importable for engines that never summarise.
    from contextengine.summarizers import DeterministicSummarizer

    return DeterministicSummarizer


def _deterministic() -> Summarizer:
    summarizer: Summarizer = _deterministic_class()()
    return summarizer
