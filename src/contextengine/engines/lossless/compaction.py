"""Compaction for the lossless engine: the summary DAG and the escalation ladder.

Called by :meth:`LosslessEngine.compress`. Nothing is deleted: compaction only
changes the *active context*, replacing references to raw messages with a
summary that points at them (and several summaries with one of the next depth):

* **Leaf summaries.** The oldest raw messages outside the fresh tail are cut
  into chunks of about ``leaf_chunk_tokens``, on tool-group boundaries, and
  each chunk becomes one leaf summary (depth 0) in its place.
* **Condensation.** Once ``condense_fanin`` adjacent summaries of one depth
  accumulate, the oldest ``condense_fanin`` become one summary of the next
  depth. Adjacent runs also condense early when the summaries together
  outgrow their share of the budget.
* **Escalation ladder,** per summary: the summariser with the normal budget,
  then again with an aggressive one (half the budget, a terse instruction),
  then deterministic truncation, flagged ``fallback=True`` so it can be redone
  later. A result is accepted only when it is strictly smaller than its input.
  Failures follow the engine's shared
  :class:`~contextengine.failure_policy.FailurePolicy`: a transient failure
  goes straight to truncation, and the summariser is not called again for the
  rest of the compaction nor, automatically, until its cooldown ends (so a
  summariser that is down costs one call, not one per summary); an auth
  failure aborts the compaction with nothing of that step persisted, because
  truncating would hide a configuration problem. All the summariser calls of
  one compaction share one wait cap.
* **Which model.** The engine's :class:`~contextengine.summary_chain.SummaryChain`
  asks the configured summariser and, when it fails with anything but an auth
  error, the main model once; only when both failed does the step fall back
  to truncation (or, with ``abort_on_summary_failure``, stop the compaction
  with that step unwritten, like an auth failure). The outcome names the
  models that wrote and that failed (``summary_model``, ``summary_failed_model``).
* **Bounds.** At most ``max_passes`` summaries per compaction and a wall-clock
  deadline (checked before every summariser call, with an injectable clock).
* **Atomicity.** Every summary is written with its edges and its change to
  the active context (a :class:`~contextengine.store.ContextSplice` of the run
  it replaces) in one :meth:`Store.commit_compaction` call, so a crash leaves
  either the old context or the new one.
* **Cost.** The fresh tail is found once; then the context is walked once
  from the oldest item (:class:`_Plan`), so a step reads and writes the
  messages it summarises and the summaries it condenses, never the whole
  conversation. Another writer that changed the context first makes the
  store refuse the splice (:class:`~contextengine.errors.StoreConflictError`):
  the compaction stops there and the engine reloads the context.

Each summary's text ends with the ids it covers, so the model knows what to
hand to ``lcm_expand``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from contextengine.engines.lossless.assemble import (
    ContextItem,
    Group,
    TailSplit,
    group_bounds,
    summary_entry_tokens,
)
from contextengine.errors import StoreConflictError, SummarizerAuthError
from contextengine.failure_policy import FailureCause, FailurePolicy
from contextengine.redact import redact_bounded, redact_messages
from contextengine.store.protocol import (
    ContextRef,
    ContextSplice,
    NewSummary,
    Store,
    SummaryRecord,
)
from contextengine.summary_chain import OFFLINE_SUMMARY_MODEL, ChainResult, SummaryChain
from contextengine.summary_prompt import (
    content_text,
    render_summary_prompt,
    render_transcript,
)
from contextengine.summary_request import Summarizer, SummaryRequest
from contextengine.tokens import count_tokens, encoding_for_model, get_encoding

__all__ = [
    "COVERS_PREFIX",
    "FALLBACK_PREFIX",
    "CompactionOutcome",
    "CompactionSettings",
    "covers_line",
    "run_compaction",
    "strip_covers",
]

Message = dict[str, Any]

#: Start of the last line of every summary: the ids it covers.
COVERS_PREFIX = "\n\n[covers "
FALLBACK_PREFIX = "[fallback summary: deterministic truncation; lcm_expand shows the originals]\n"
# Ids cost ~9 tokens each; past this many the middle is elided (the seq range
# and lcm_expand on the summary itself give the rest).
_MAX_LISTED_IDS = 8
_SUMMARISER_MESSAGE_CHARS = 8_000
_THINKING_KEYS = ("reasoning_content", "reasoning", "thinking", "reasoning_details")
_THINKING_PARTS = ("thinking", "redacted_thinking", "reasoning")


@dataclass(frozen=True, kw_only=True)
class CompactionSettings:
    """How one compaction runs; built by the engine from its configuration."""

    leaf_chunk_tokens: int
    condense_fanin: int
    #: Normal budget of one summary; the aggressive rung uses half.
    summary_tokens: int
    #: Condense adjacent summaries early once all summaries in the context
    #: exceed this many tokens (0: only at fan-in).
    summary_share_tokens: int = 0
    max_passes: int = 64
    deadline_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    model: str | None = None
    focus_topic: str | None = None
    memory_context: str = ""
    #: The engine's failure policy; None: no cooldowns (the summariser is always called).
    policy: FailurePolicy | None = None
    #: A forced compaction (overflow, manual) calls the summariser even while it cools down.
    force: bool = False
    #: A failed summary stops the compaction with that step unwritten, instead of
    #: writing the deterministic truncation.
    abort_on_summary_failure: bool = False


@dataclass(kw_only=True)
class CompactionOutcome:
    """What one compaction did; the engine adopts ``items`` as its new context."""

    items: list[ContextItem]
    written: list[SummaryRecord] = field(default_factory=list)
    summarizer_calls: int = 0
    fallback_used: bool = False
    #: Why the compaction stopped early: "auth: ...", "conflict: ...", "deadline",
    #: "max_passes", or None.
    stopped: str | None = None
    #: Why summaries fell back or the compaction aborted, in one word
    #: (:data:`~contextengine.failure_policy.FailureCause`), else None.
    cause: FailureCause | None = None
    #: The summariser's own words about that failure, else None.
    error: str | None = None
    #: The models that wrote this compaction's summaries, comma-separated in
    #: order of first use (a summary model, the main model after it failed,
    #: ``"offline"`` for the deterministic truncation); None when none was written.
    summary_model: str | None = None
    #: What went wrong with the models that did not write a summary, naming each, else None.
    summary_error: str | None = None
    #: The models that failed, comma-separated, else None.
    summary_failed_model: str | None = None

    @property
    def aborted(self) -> bool:
        """True when an auth failure (or, with ``abort_on_summary_failure``, any
        summary failure) stopped the compaction."""
        return bool(self.stopped and self.stopped.startswith(("auth", "summary_failed")))


class _Deadline:
    def __init__(self, settings: CompactionSettings) -> None:
        self._clock = settings.clock
        self._end = settings.clock() + settings.deadline_s

    def passed(self) -> bool:
        return self._clock() >= self._end


def covers_line(kind: str, source_ids: Sequence[str], seq_start: int, seq_end: int) -> str:
    """The closing line of a summary: which ids it covers (long lists shortened in the middle)."""
    ids = list(source_ids)
    shown = ids
    if len(ids) > _MAX_LISTED_IDS:
        shown = [*ids[:4], f"… {len(ids) - 6} more …", *ids[-2:]]
    what = "messages" if kind == "leaf" else "summaries"
    return f"{COVERS_PREFIX}{what} seq {seq_start}–{seq_end}: {', '.join(shown)}]"


def strip_covers(content: str) -> str:
    """A summary's text without its closing covers line."""
    head, sep, _ = content.rpartition(COVERS_PREFIX)
    return head if sep else content


def _for_summariser(messages: Sequence[Message]) -> list[Message]:
    """Bounded copies without thinking blocks, redacted: all that may leave for a summariser."""
    cleaned: list[Message] = []
    for message in messages:
        new = {key: value for key, value in message.items() if key not in _THINKING_KEYS}
        content = new.get("content")
        if isinstance(content, list):
            new["content"] = [
                part
                for part in content
                if not (isinstance(part, dict) and part.get("type") in _THINKING_PARTS)
            ]
        text = content_text(new.get("content"))
        if len(text) > _SUMMARISER_MESSAGE_CHARS:
            # Cut and redacted together: a secret the cut goes through is not sent in part.
            new["content"] = redact_bounded(text, _SUMMARISER_MESSAGE_CHARS)
        cleaned.append(new)
    return redact_messages(cleaned)


def _truncate(text: str, max_tokens: int, model: str | None) -> str:
    encoding = get_encoding(encoding_for_model(model))
    tokens = encoding.encode(text, disallowed_special=())
    if len(tokens) <= max_tokens:
        return text
    return str(encoding.decode(tokens[: max(0, max_tokens)]))


class _SummaryFailed(Exception):
    """A summary failed and ``abort_on_summary_failure`` asks to stop rather than truncate."""


@dataclass
class _Ladder:
    chain: SummaryChain
    settings: CompactionSettings
    deadline: _Deadline
    calls: int = 0
    #: The first failure of this compaction, as (cause, words); once set, the
    #: summariser is not called again: the rest of the compaction falls back.
    failure: tuple[FailureCause, str] | None = None
    wait_deadline: float | None = None
    #: The models that wrote summaries, in order of first use.
    models: list[str] = field(default_factory=list)
    #: Failures of models that did not write a summary, as (model, words), in order.
    failed: list[tuple[str, str]] = field(default_factory=list)

    def _note(self, result: ChainResult) -> None:
        for attempt in result.failures:
            if (attempt.model, attempt.error) not in self.failed:
                self.failed.append((attempt.model, attempt.error))

    def wrote(self, model: str) -> None:
        if model not in self.models:
            self.models.append(model)

    def _usable(self) -> bool:
        """Whether to call the summariser for the next summary, recording why not."""
        if self.failure is not None:
            return False
        policy = self.settings.policy
        if policy is None:
            return True
        if not self.settings.force and policy.cooldown_remaining() > 0:
            words = f"cooling down for {policy.cooldown_remaining():.0f} s"
            self.failure = ("cooldown", words)
            policy.record("cooldown", words)
            return False
        if self.wait_deadline is None:
            self.wait_deadline = policy.wait_deadline()
        return True

    def _failed(self, cause: FailureCause, words: str, retry_after: float | None = None) -> None:
        self.failure = (cause, words)
        if self.settings.policy is not None:
            self.settings.policy.summarizer_failed(cause, words, retry_after=retry_after)

    def run(
        self,
        *,
        messages: list[Message],
        previous: str,
        input_tokens: int,
        budget: int,
        kind: Literal["leaf", "condensed"],
        depth: int,
    ) -> tuple[str, bool]:
        """(summary body, fallback used); raises SummarizerAuthError to abort."""
        model = self.settings.model
        too_long = ""
        for level, level_budget in (("normal", budget), ("aggressive", max(16, budget // 2))):
            if self.deadline.passed() or not self._usable():
                break
            prompt = render_summary_prompt(
                messages=messages,
                previous_summary=previous,
                focus_topic=self.settings.focus_topic,
                memory_context=self.settings.memory_context,
                token_budget=level_budget,
            )
            if level == "aggressive":
                prompt += (
                    f"\n\nThe previous attempt was too long. Be terse: at most {level_budget} "
                    "tokens; keep only exact identifiers, decisions, results and pending requests."
                )
            request = SummaryRequest(
                messages=messages,
                previous_summary=previous,
                focus_topic=self.settings.focus_topic,
                memory_context=self.settings.memory_context,
                token_budget=level_budget,
                prompt=prompt,
                metadata={"engine": "lcm", "kind": kind, "depth": depth, "level": level},
                deadline=self.wait_deadline,
            )
            try:
                result = self.chain.summarize(request)
            except SummarizerAuthError as exc:
                self.calls += 1
                self.failed.append((self.chain.primary_model, str(exc)))
                self._failed("auth", str(exc))
                raise
            self.calls += result.calls
            self._note(result)
            if result.text is None:
                # The whole chain failed: one failure, one step of the cooldown ladder.
                self._failed(
                    result.cause or "server_error", result.error or "no summary", result.retry_after
                )
                break
            tokens = count_tokens(result.text, model)
            if tokens < input_tokens:
                if self.settings.policy is not None:
                    self.settings.policy.summarizer_succeeded()
                self.wrote(result.model or self.chain.primary_model)
                return result.text, False
            too_long = f"a summary of {tokens} tokens for {input_tokens} tokens of input"
        if too_long and self.failure is None:
            self._failed("over_budget", too_long)
        if self.settings.abort_on_summary_failure and self.failure is not None:
            raise _SummaryFailed(self.failure[1])
        self.wrote(OFFLINE_SUMMARY_MODEL)
        source = (
            previous
            if kind == "condensed"
            else render_transcript(
                messages, max_message_chars=600, max_tool_result_chars=300, max_args_chars=200
            )
        )
        limit = min(budget, input_tokens - 1 - count_tokens(FALLBACK_PREFIX, model))
        body = FALLBACK_PREFIX + _truncate(source, limit, model) if limit > 0 else ""
        if not body or count_tokens(body, model) >= input_tokens:
            body = _truncate(source, max(0, input_tokens - 1), model)
        return body.strip() or "(empty)", True


def _condensable_run(
    items: Sequence[ContextItem], fanin: int, over_share: bool
) -> tuple[int, int] | None:
    """The oldest run of adjacent same-depth summaries to condense, as [start, end)."""
    runs: list[tuple[int, int]] = []
    index = 0
    while index < len(items):
        if items[index].kind != "summary":
            index += 1
            continue
        end = index + 1
        while (
            end < len(items)
            and items[end].kind == "summary"
            and items[end].depth == items[index].depth
        ):
            end += 1
        runs.append((index, end))
        index = end
    for start, end in runs:
        if end - start >= fanin:
            return start, start + fanin
    if over_share:
        for start, end in runs:
            if end - start >= 2:
                return start, min(end, start + fanin)
    return None


def _summary_item(record: SummaryRecord, model: str | None) -> ContextItem:
    return ContextItem(
        kind="summary",
        id=record.id,
        tokens=summary_entry_tokens(record, model),
        role="summary",
        seq_start=record.seq_start,
        seq_end=record.seq_end,
        time_start=record.time_start,
        time_end=record.time_end,
        summary=record,
    )


class _Plan:
    """The active context during one compaction, walked once from the oldest item.

    The context is always ``settled + head[cursor:] + tail``: ``settled`` is
    what the compaction has finished with (summaries, and raw items it must
    keep such as the pinned user message), ``head`` the items before the fresh
    tail not visited yet, ``tail`` the fresh tail (never touched). Each step
    either condenses a run inside ``settled`` (small: summaries condense as
    they accumulate) or turns the next chunk of ``head`` into a leaf, so a
    step costs what it summarises, not the length of the context.
    """

    def __init__(self, items: list[ContextItem], split: TailSplit) -> None:
        self.head = items[: split.tail_start]
        self.tail = items[split.tail_start :]
        self.groups = group_bounds(self.head)
        self.pinned = split.pinned
        self.next_group = 0
        self.settled: list[ContextItem] = []
        self.summary_tokens = sum(item.tokens for item in items if item.kind == "summary")

    def items(self) -> list[ContextItem]:
        """The whole context as it stands."""
        rest = self.groups[self.next_group].start if self.next_group < len(self.groups) else None
        pending = self.head[rest:] if rest is not None else []
        return [*self.settled, *pending, *self.tail]

    def _eligible(self, group: Group) -> bool:
        pinned = self.pinned
        return group.raw and not (pinned is not None and group.start <= pinned < group.end)

    def settle_ineligible(self) -> None:
        """Move the groups at the cursor that are not to be summarised into ``settled``."""
        while self.next_group < len(self.groups) and not self._eligible(
            self.groups[self.next_group]
        ):
            group = self.groups[self.next_group]
            self.settled.extend(self.head[group.start : group.end])
            self.next_group += 1

    def next_chunk(self, chunk_tokens: int) -> tuple[int, int] | None:
        """Groups ``[first, end)`` of the next leaf: eligible groups up to ``chunk_tokens``."""
        first = self.next_group
        if first >= len(self.groups) or not self._eligible(self.groups[first]):
            return None
        used = 0
        end = first
        while end < len(self.groups) and self._eligible(self.groups[end]):
            group = self.groups[end]
            cost = sum(item.tokens for item in self.head[group.start : group.end])
            if end > first and used + cost > chunk_tokens:
                break
            used += cost
            end += 1
        return first, end

    def chunk_items(self, chunk: tuple[int, int]) -> list[ContextItem]:
        return self.head[self.groups[chunk[0]].start : self.groups[chunk[1] - 1].end]

    def leaf_done(self, chunk: tuple[int, int], summary: ContextItem) -> None:
        self.settled.append(summary)
        self.next_group = chunk[1]
        self.summary_tokens += summary.tokens

    def condensed(self, run: tuple[int, int], summary: ContextItem) -> None:
        start, end = run
        self.summary_tokens += summary.tokens - sum(i.tokens for i in self.settled[start:end])
        self.settled[start:end] = [summary]


def _splice(sources: Sequence[ContextItem]) -> ContextSplice:
    return ContextSplice(
        first_id=sources[0].id,
        last_id=sources[-1].id,
        count=len(sources),
        replacement=[ContextRef(kind="summary", id="new:0")],
    )


def run_compaction(
    *,
    store: Store,
    conversation_id: str,
    items: list[ContextItem],
    split_of: Callable[[list[ContextItem]], TailSplit],
    summarizer: Summarizer | SummaryChain,
    settings: CompactionSettings,
) -> CompactionOutcome:
    """Summarise everything outside the fresh tail, condensing as summaries accumulate.

    ``split_of`` computes the fresh tail of a context; it is computed once, at
    the start (replacing older items by summaries does not move it). Each
    summary is committed with a :class:`~contextengine.store.ContextSplice` of
    the run it replaces. Returns the new context; the store already holds it.
    ``summarizer`` may be a :class:`~contextengine.summary_chain.SummaryChain`
    (the engine's, which keeps the summary model's cooldown across compactions).
    """
    deadline = _Deadline(settings)
    chain = summarizer if isinstance(summarizer, SummaryChain) else SummaryChain(summarizer)
    ladder = _Ladder(chain, settings, deadline)
    plan = _Plan(list(items), split_of(list(items)))
    outcome = CompactionOutcome(items=list(items))
    model = settings.model
    fanin = max(2, settings.condense_fanin)
    passes = 0
    while True:
        if passes >= settings.max_passes:
            outcome.stopped = "max_passes"
            break
        if deadline.passed():
            outcome.stopped = "deadline"
            break
        plan.settle_ineligible()
        over_share = 0 < settings.summary_share_tokens < plan.summary_tokens
        run = _condensable_run(plan.settled, fanin, over_share)
        chunk = None if run else plan.next_chunk(settings.leaf_chunk_tokens)
        if run is None and chunk is None:
            break
        if run is not None:
            sources = plan.settled[run[0] : run[1]]
        else:
            assert chunk is not None
            sources = plan.chunk_items(chunk)
        try:
            new = _condensed(ladder, sources, settings) if run else _leaf(ladder, sources, settings)
            record = store.commit_compaction(conversation_id, [new], _splice(sources))[0]
        except SummarizerAuthError as exc:
            outcome.stopped = f"auth: {exc}"
            break
        except _SummaryFailed as exc:
            outcome.stopped = f"summary_failed: {exc}"
            break
        except StoreConflictError as exc:
            outcome.stopped = f"conflict: {exc}"
            break
        finally:
            outcome.summarizer_calls = ladder.calls
            if ladder.failure is not None:
                outcome.cause, outcome.error = ladder.failure
            outcome.summary_model = ", ".join(ladder.models) or None
            outcome.summary_error = "; ".join(f"{m}: {w}" for m, w in ladder.failed) or None
            outcome.summary_failed_model = (
                ", ".join(dict.fromkeys(m for m, _ in ladder.failed)) or None
            )
        if not record.source_ids:
            record = replace(record, source_ids=tuple(new.source_ids))
        summary = _summary_item(record, model)
        if run is not None:
            plan.condensed(run, summary)
        else:
            assert chunk is not None
            plan.leaf_done(chunk, summary)
        outcome.written.append(record)
        outcome.fallback_used = outcome.fallback_used or new.fallback
        passes += 1
    outcome.items = plan.items()
    return outcome


def _leaf(
    ladder: _Ladder, sources: Sequence[ContextItem], settings: CompactionSettings
) -> NewSummary:
    messages = _for_summariser([item.message for item in sources if item.message is not None])
    input_tokens = sum(item.tokens for item in sources)
    budget = min(settings.summary_tokens, max(32, input_tokens // 3))
    body, fallback = ladder.run(
        messages=messages,
        previous="",
        input_tokens=input_tokens,
        budget=budget,
        kind="leaf",
        depth=0,
    )
    seq_start = min(item.seq_start for item in sources)
    seq_end = max(item.seq_end for item in sources)
    ids = [item.id for item in sources]
    content = body + covers_line("leaf", ids, seq_start, seq_end)
    return NewSummary(
        kind="leaf",
        depth=0,
        content=content,
        token_count=count_tokens(content, settings.model),
        source_ids=ids,
        seq_start=seq_start,
        seq_end=seq_end,
        time_start=min(item.time_start for item in sources),
        time_end=max(item.time_end for item in sources),
        descendant_count=len(sources),
        fallback=fallback,
    )


def _condensed(
    ladder: _Ladder, sources: Sequence[ContextItem], settings: CompactionSettings
) -> NewSummary:
    records = [item.summary for item in sources if item.summary is not None]
    bodies = [strip_covers(record.content).removeprefix(FALLBACK_PREFIX) for record in records]
    previous = "\n\n".join(body.strip() for body in bodies)
    input_tokens = sum(
        count_tokens(strip_covers(record.content), settings.model) for record in records
    )
    budget = min(settings.summary_tokens, max(32, input_tokens // 2))
    depth = max(record.depth for record in records) + 1
    body, fallback = ladder.run(
        messages=[],
        previous=previous,
        input_tokens=input_tokens,
        budget=budget,
        kind="condensed",
        depth=depth,
    )
    seq_start = min(record.seq_start for record in records)
    seq_end = max(record.seq_end for record in records)
    ids = [record.id for record in records]
    content = body + covers_line("condensed", ids, seq_start, seq_end)
    return NewSummary(
        kind="condensed",
        depth=depth,
        content=content,
        token_count=count_tokens(content, settings.model),
        source_ids=ids,
        seq_start=seq_start,
        seq_end=seq_end,
        time_start=min(record.time_start for record in records),
        time_end=max(record.time_end for record in records),
        descendant_count=sum(record.descendant_count for record in records) + len(records),
        fallback=fallback,
    )
