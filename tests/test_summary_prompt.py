"""The summary prompt and the summary it yields: date, automatic focus, framing, no-user regions."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest

from compressor_conversations import (
    RecordingSummarizer,
    call,
    coding_session,
    log_output,
    result,
    system,
    user,
)
from contextengine import ContextCompressor, DeterministicSummarizer, SummaryRequest
from contextengine.engines.compressor.summary import SUMMARY_END, SUMMARY_START, frame_summary
from contextengine.summary_prompt import render_summary_prompt


def compress_with(
    summarizer: RecordingSummarizer, focus_topic: str | None = None
) -> list[dict[str, Any]]:
    engine = ContextCompressor(context_length=16_000, model="gpt-4o", summarizer=summarizer)
    history = coding_session(turns=12, chatter=1_500)
    return engine.compress(history, focus_topic=focus_topic, force=True)


def test_the_prompt_anchors_relative_dates_to_today() -> None:
    messages = [user("Deploy what we tested yesterday.")]
    fixed = render_summary_prompt(messages=messages, today=date(2026, 3, 4))
    assert "Today is 2026-03-04" in fixed and "'yesterday'" in fixed
    today = datetime.now(UTC).date().isoformat()
    assert f"Today is {today}" in render_summary_prompt(messages=messages)


def test_without_a_focus_topic_the_prompt_serves_the_latest_user_request() -> None:
    summarizer = RecordingSummarizer()
    compress_with(summarizer)
    (request,) = summarizer.requests
    latest = (
        "Also check module_11 handles ERR_11. / Now run the whole suite and tell me the result."
    )
    assert f"the user's latest messages: {latest!r}" in request.prompt
    assert request.focus_topic is None  # still "what the user asked for": nothing
    assert request.metadata["automatic_focus"] == latest
    assert "Focus topic:" not in request.prompt


def test_a_focus_topic_given_replaces_the_automatic_one() -> None:
    summarizer = RecordingSummarizer()
    compress_with(summarizer, focus_topic="module_3 errors")
    (request,) = summarizer.requests
    assert "Focus topic: 'module_3 errors'" in request.prompt
    assert "latest messages:" not in request.prompt
    assert "automatic_focus" not in request.metadata


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(frame_summary("## Goal\nFix the test."), id="framed-once"),
        pytest.param(frame_summary(frame_summary("## Goal\nFix the test.")), id="framed-twice"),
        pytest.param("[CONTEXT SUMMARY]\n## Goal\nFix the test.", id="tag-only"),
    ],
)
def test_a_summary_that_echoes_the_prefix_is_not_prefixed_twice(answer: str) -> None:
    compacted = compress_with(RecordingSummarizer(answer))
    texts = [m["content"] for m in compacted if isinstance(m.get("content"), str)]
    framed = [t for t in texts if SUMMARY_START in t or "[CONTEXT SUMMARY]" in t]
    assert len(framed) == 1
    (summary,) = framed
    assert summary.count("[CONTEXT SUMMARY]") == 1 and summary.count(SUMMARY_END) == 1
    assert "## Goal\nFix the test." in summary


def tool_loop(rounds: int) -> list[dict[str, Any]]:
    """The agent's own work: tool calls and results, not one user message."""
    messages: list[dict[str, Any]] = []
    for i in range(rounds):
        messages.append(call((f"c{i}", "bash", {"command": f"make step{i}"})))
        messages.append(result(f"c{i}", log_output(i, 400)))
    return messages


def test_a_region_without_user_messages_says_so_in_the_prompt() -> None:
    prompt = render_summary_prompt(messages=tool_loop(3))
    assert "contains no user message" in prompt and "do not infer" in prompt
    with_user = render_summary_prompt(messages=[user("Build it."), *tool_loop(3)])
    assert "contains no user message" not in with_user


def test_the_offline_summary_of_a_region_without_user_messages_says_so() -> None:
    summarizer = DeterministicSummarizer()
    summary = summarizer.summarize(SummaryRequest(messages=tool_loop(4), token_budget=500))
    assert summary.startswith("## User requests\n(none: this part of the conversation holds")
    assert "make step3" in summary
    # Read back by the next compaction, the note is not taken for a request.
    merged = summarizer.summarize(
        SummaryRequest(messages=[user("Ship it.")], previous_summary=summary, token_budget=500)
    )
    assert "(none:" not in merged and "- Ship it." in merged
    with_user = summarizer.summarize(SummaryRequest(messages=[system(), user("Build it.")]))
    assert "(none:" not in with_user
