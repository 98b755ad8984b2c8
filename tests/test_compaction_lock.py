"""One compaction at a time per engine: hosts that call from several threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from contextengine import (
    ContextCompressor,
    ContextEngine,
    DeterministicSummarizer,
    LosslessEngine,
    SummaryRequest,
)

Message = dict[str, Any]


class HeldSummarizer:
    """Summarises offline, but holds its first call until released; counts overlaps."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self._count = threading.Lock()

    def summarize(self, request: SummaryRequest) -> str:
        with self._count:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.entered.set()
            self.release.wait(10)
            return DeterministicSummarizer().summarize(request)
        finally:
            with self._count:
                self.active -= 1


def chat(turns: int, tag: str = "") -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "You are helpful."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"{tag}Question {turn}: " + "why " * 80})
        messages.append({"role": "assistant", "content": f"Answer {turn}: " + "because " * 80})
    return messages


def _compressor(summarizer: HeldSummarizer) -> ContextEngine:
    return ContextCompressor(context_length=128_000, model="gpt-4o", summarizer=summarizer)


def _lcm(summarizer: HeldSummarizer) -> ContextEngine:
    engine = LosslessEngine(
        context_length=128_000, model="gpt-4o", store=":memory:", summarizer=summarizer
    )
    engine.on_session_start("threads")
    return engine


ENGINES = [pytest.param(_compressor, id="compressor"), pytest.param(_lcm, id="lcm")]


def run_two(
    engine: ContextEngine,
    summarizer: HeldSummarizer,
    first: list[Message],
    second: list[Message],
    *,
    second_keep_last: int | None = None,
) -> tuple[list[Message], list[Message], int]:
    """Compact ``first`` and, while that is inside the summariser, ``second`` from another thread.

    Returns both results and the summariser calls the first compaction made.
    """
    results: dict[int, list[Message]] = {}

    def compact(key: int, messages: list[Message], keep_last: int | None) -> None:
        results[key] = engine.compress(messages, force=True, keep_last=keep_last)

    one = threading.Thread(target=compact, args=(1, first, None))
    two = threading.Thread(target=compact, args=(2, second, second_keep_last))
    one.start()
    assert summarizer.entered.wait(10)
    two.start()
    time.sleep(0.3)  # long enough for the second caller to reach the engine
    overlapping = summarizer.max_active
    summarizer.release.set()
    one.join(10)
    two.join(10)
    assert overlapping == 1 and summarizer.max_active == 1
    return results[1], results[2], summarizer.calls


@pytest.mark.parametrize("make", ENGINES)
def test_a_second_caller_with_the_same_history_gets_the_first_ones_result(
    make: Callable[[HeldSummarizer], ContextEngine],
) -> None:
    summarizer = HeldSummarizer()
    engine = make(summarizer)
    history = chat(10)
    first, second, calls = run_two(engine, summarizer, history, history)
    assert len(first) < len(history)
    assert second == first
    assert engine.compression_count == 1  # compacted once, not twice
    assert calls == summarizer.calls


@pytest.mark.parametrize("make", ENGINES)
def test_a_second_caller_with_another_history_waits_then_compacts_its_own(
    make: Callable[[HeldSummarizer], ContextEngine],
) -> None:
    summarizer = HeldSummarizer()
    engine = make(summarizer)
    history = chat(10)
    longer = [*history, {"role": "user", "content": "One more: " + "why " * 80}]
    first, second, _calls = run_two(engine, summarizer, history, longer)
    assert len(first) < len(history) and second != first
    assert second[-1] == longer[-1]


def test_the_same_history_with_another_keep_last_is_compacted_again_as_asked() -> None:
    # The compressor shows it: lcm, once the first caller summarised the history,
    # has no raw messages left to keep, so both answers are alike whoever computed them.
    summarizer = HeldSummarizer()
    engine = _compressor(summarizer)
    history = chat(10)
    first, second, _calls = run_two(engine, summarizer, history, history, second_keep_last=2)
    assert second != first  # not the first caller's result: it asked for something else
    # The system prompt, the summary (merged into the first kept message by the
    # compressor) and the last two messages, as the second caller asked.
    assert len(second) <= 4 < len(first)
    assert second[-1] == history[-1]
