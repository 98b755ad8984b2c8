"""Manual compaction through the host: ``compress_now(keep_last=N)`` and ``plan_compression``.

What a library user sees: the cut (moved back to a tool call when needed, and
said so in the event), engines that cannot keep a chosen tail told apart from
those that can, and a preview that calls no summariser and changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from contextengine import (
    AsyncContextHost,
    CompactionEvent,
    ContextCompressor,
    ContextEngine,
    ContextHost,
    DeterministicSummarizer,
    LosslessEngine,
    SummaryRequest,
    is_summary_message,
    keep_last_cut,
    validate_messages,
)
from contextengine.testing import RecordingEngine

Message = dict[str, Any]


class CountingSummarizer:
    """The offline summariser, counting its calls (a preview must make none)."""

    def __init__(self) -> None:
        self.calls = 0
        self._inner = DeterministicSummarizer()

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        return self._inner.summarize(request)


def compressor(summarizer: CountingSummarizer, context_length: int = 4_000) -> ContextEngine:
    return ContextCompressor(
        context_length=context_length, model="gpt-4o", summarizer=summarizer, archive=False
    )


def lossless(summarizer: CountingSummarizer, context_length: int = 4_000) -> ContextEngine:
    return LosslessEngine(
        context_length=context_length, model="gpt-4o", store=":memory:", summarizer=summarizer
    )


ENGINES = [pytest.param(compressor, id="compressor"), pytest.param(lossless, id="lcm")]
Factory = Callable[[CountingSummarizer], ContextEngine]


def conversation(turns: int) -> list[Message]:
    """Turns of [user, assistant call, tool result, assistant answer], big enough to summarise."""
    messages: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"command": "cat f{turn}.py"}}'},
        }
        output = "\n".join(f"line {n} of f{turn}.py: value = {n * turn}" for n in range(50))
        messages += [
            {"role": "user", "content": f"Task {turn}: fix bug #{100 + turn} in f{turn}.py."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": output},
            {"role": "assistant", "content": f"Fixed bug #{100 + turn}: " + "details " * 40},
        ]
    return messages


def host_for(engine: ContextEngine, events: list[Any]) -> ContextHost:
    host = ContextHost(engine, model="gpt-4o", context_length=4_000, observers=[events.append])
    host.start_session("manual")
    return host


def compactions(events: list[Any]) -> list[CompactionEvent]:
    return [event for event in events if isinstance(event, CompactionEvent)]


@pytest.mark.parametrize("make", ENGINES)
def test_keep_last_moves_the_cut_to_the_call_and_the_event_says_so(make: Factory) -> None:
    events: list[Any] = []
    host = host_for(make(CountingSummarizer()), events)
    messages = conversation(6)
    # The last two are [tool result, answer]: keeping them keeps their call too.
    result = host.compress_now(messages, keep_last=2)
    assert result[-3:] == messages[-3:] and len(result) == 1 + 1 + 3
    assert host.history is result
    (event,) = compactions(events)
    assert event.phase == "manual" and event.level == "info" and not event.aborted
    assert event.trigger == "manual request (keep last 2)"
    assert event.message is not None and event.message.endswith(
        "kept the last 3 messages verbatim (2 asked; the cut moved back so a tool call "
        "stays with its results)."
    )


@pytest.mark.parametrize("make", ENGINES)
def test_preview_calls_no_summariser_and_matches_what_compress_then_does(make: Factory) -> None:
    summarizer = CountingSummarizer()
    events: list[Any] = []
    host = host_for(make(summarizer), events)
    messages = conversation(6)
    plan = host.plan_compression(messages, keep_last=3, focus_topic="bug #103")
    assert plan is not None
    assert summarizer.calls == 0 and events == [] and host.history == []
    assert (plan.kept_messages, plan.moved) == (3, False)
    assert len(plan.messages) == len(messages) - 1 - 3
    result = host.compress_now(messages, "bug #103", keep_last=3)
    assert summarizer.calls >= 1
    assert result[-3:] == messages[-3:]
    (event,) = compactions(events)
    # An estimate, but a useful one: the right order of size, not a promise of more.
    saved = event.tokens_before - event.tokens_after
    assert saved > 0 and plan.estimated_saving > 0
    assert saved / 3 < plan.estimated_saving < saved * 1.25


@pytest.mark.parametrize("make", ENGINES)
def test_nothing_before_the_kept_tail_is_nothing_to_compress(make: Factory) -> None:
    summarizer = CountingSummarizer()
    events: list[Any] = []
    host = host_for(make(summarizer), events)
    messages = conversation(2)
    assert host.compress_now(messages, keep_last=len(messages)) is messages
    (event,) = compactions(events)
    assert event.aborted and event.level == "info"
    assert (
        event.message
        == "Nothing to compress (kept the last 8 messages verbatim: nothing before them)."
    )
    assert summarizer.calls == 0


@pytest.mark.parametrize("make", ENGINES)
def test_keep_last_zero_compacts_everything_but_the_system_prompt(make: Factory) -> None:
    host = host_for(make(CountingSummarizer()), [])
    messages = conversation(4)
    result = host.compress_now(messages, keep_last=0)
    validate_messages(result)
    assert result[0] == messages[0] and len(result) == 2
    assert result[1]["role"] == "user"  # the summary (or the block of summaries) alone


def test_the_compressor_summarises_even_when_pruning_would_be_enough() -> None:
    messages = conversation(6)
    roomy = compressor(CountingSummarizer(), context_length=16_000)
    plan = roomy.plan_compression(messages)
    assert plan.messages == () and "no summary would be written" in plan.note
    roomy.compress(messages, force=True)
    assert roomy.last_compression is not None and roomy.last_compression.reason == "pruned"
    kept = compressor(CountingSummarizer(), context_length=16_000)
    output = kept.compress(messages, force=True, keep_last=3)
    assert kept.last_compression is not None and kept.last_compression.reason == "summarized"
    assert output[-3:] == messages[-3:] and len(output) == 1 + 1 + 3


def test_the_compressor_folds_its_previous_summary_into_the_new_one() -> None:
    engine = compressor(CountingSummarizer())
    first = engine.compress(conversation(6), force=True, keep_last=3)
    later = [*first, *conversation(8)[25:]]  # two more turns
    plan = engine.plan_compression(later, keep_last=3)
    assert plan.previous_summaries == 1
    output = engine.compress(later, force=True, keep_last=3)
    assert sum(1 for message in output if is_summary_message(message)) == 1
    assert output[-3:] == later[-3:] and len(output) == 1 + 1 + 3
    assert "Task 0: fix bug #100" in str(output[1]["content"])  # the old summary, carried on


def test_lcm_counts_the_tail_on_the_view_it_handed_back() -> None:
    engine = lossless(CountingSummarizer())
    engine.on_session_start("view")
    view = engine.compress(conversation(4), force=True, keep_last=3)
    grown = [*view, *conversation(6)[17:]]  # the host's history: the view, then two turns
    output = engine.compress(grown, force=True, keep_last=2)
    assert output[-3:] == grown[-3:]  # moved back from the tool result to its call
    assert len(output) == 1 + 1 + 3  # system prompt, the reference block, the tail


class _OldEngine(RecordingEngine):
    """An engine written before keep_last: its compress does not name it."""

    def compress(  # type: ignore[override]  # the old signature, on purpose
        self, messages: list[Message], current_tokens: int | None = None, **kwargs: Any
    ) -> list[Message]:
        return super().compress(messages, current_tokens)


def test_an_engine_without_keep_last_is_not_asked_and_the_user_is_told() -> None:
    engine = _OldEngine()
    events: list[Any] = []
    host = host_for(engine, events)
    messages = conversation(3)
    assert host.compress_now(messages, keep_last=2) is messages
    assert host.plan_compression(messages, keep_last=2) is None
    assert "compress" not in engine.hook_names()
    (event,) = compactions(events)
    assert event.aborted and event.level == "warning" and event.reason == "unsupported"
    assert event.message is not None and "cannot keep a chosen number of messages" in event.message
    # Without keep_last it compacts as before.
    assert len(host.compress_now(messages)) < len(messages)


def test_an_engine_that_cannot_preview_gets_none() -> None:
    class NoPreview(RecordingEngine):
        plan_compression = ContextEngine.plan_compression

    host = host_for(NoPreview(), [])
    assert host.plan_compression(conversation(3)) is None


@pytest.mark.parametrize("keep_last", [-1, True, 2.5])
def test_a_bad_keep_last_raises_before_any_hook(keep_last: Any) -> None:
    engine = RecordingEngine()
    host = host_for(engine, [])
    calls = len(engine.calls)
    with pytest.raises(ValueError, match="keep_last must be a whole number"):
        host.compress_now(conversation(2), keep_last=keep_last)
    with pytest.raises(ValueError, match="keep_last must be a whole number"):
        host.plan_compression(conversation(2), keep_last=keep_last)
    assert len(engine.calls) == calls


def test_keep_last_cut_never_splits_a_call_from_its_results() -> None:
    messages = conversation(3)
    for keep in range(len(messages) + 2):
        cut = keep_last_cut(messages, keep)
        assert cut.index == len(messages) or messages[cut.index]["role"] != "tool"
        assert cut.kept >= min(keep, len(messages) - 1)
        assert cut.moved == (cut.kept > cut.requested)
    assert keep_last_cut(messages, 100).index == 1  # all but the system prompt


def test_the_async_host_keeps_and_previews_the_same_way() -> None:
    async def run() -> tuple[Any, list[Message]]:
        host = AsyncContextHost(
            compressor(CountingSummarizer()), model="gpt-4o", context_length=4_000
        )
        await host.start_session("async")
        plan = await host.plan_compression(conversation(6), keep_last=2)
        return plan, await host.compress_now(conversation(6), keep_last=2)

    plan, result = asyncio.run(run())
    assert plan is not None and plan.kept_messages == 3
    assert result[-3:] == conversation(6)[-3:]
