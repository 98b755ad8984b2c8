"""ContextCompressor when things go wrong: summariser failures, cooldowns, compaction loops."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from compressor_conversations import (
    FakeClock,
    RaisingSummarizer,
    RecordingSummarizer,
    ScriptedSummarizer,
    assistant,
    call,
    coding_session,
    result,
    system,
    tool_pairs_intact,
    user,
)
from contextengine.engines.compressor import ContextCompressor, is_summary_message
from contextengine.errors import SummarizerAuthError, SummarizerTransientError
from contextengine.messages import validate_messages
from contextengine.openai_summarizer import OpenAICompatibleSummarizer
from contextengine.testing import ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens

Message = dict[str, Any]


def engine(summarizer: Any, clock: FakeClock | None = None, **kwargs: Any) -> ContextCompressor:
    kwargs.setdefault("archive", False)  # the plain compressor's budgets
    return ContextCompressor(
        context_length=16_000, summarizer=summarizer, clock=clock or FakeClock(), **kwargs
    )


def big_session() -> list[Message]:
    """A session pass 1 cannot shrink enough: pass 2 must run."""
    return coding_session(chatter=2_000)


# ---------------------------------------------------------------- auth: abort, nothing lost


def test_auth_error_aborts_and_returns_the_messages_unchanged() -> None:
    convo = big_session()
    snapshot = copy.deepcopy(convo)
    e = engine(RaisingSummarizer(SummarizerAuthError("401 invalid api key")))
    e.update_from_response({"prompt_tokens": 13_000})
    out = e.compress(convo)
    assert out == snapshot and convo == snapshot
    report = e.last_compression
    assert report is not None
    assert report.aborted and not report.fallback_used
    assert "401 invalid api key" in report.reason
    assert (report.tokens_after, report.messages_after) == (report.tokens_before, len(convo))
    assert (e.compression_count, e.last_prompt_tokens) == (0, 13_000)


# ---------------------------------------------------------------- anything else: fallback


class _Boom(RuntimeError):
    pass


@pytest.mark.parametrize(
    ("summarizer", "why"),
    [
        pytest.param(RaisingSummarizer(SummarizerTransientError("HTTP 503")), "HTTP 503", id="5xx"),
        pytest.param(RaisingSummarizer(TimeoutError("read timed out")), "timed out", id="timeout"),
        pytest.param(
            RaisingSummarizer(_Boom("bug in plugin")), "bug in plugin", id="any-exception"
        ),
        pytest.param(ScriptedSummarizer("   \n"), "empty summary", id="empty-answer"),
        pytest.param(ScriptedSummarizer("word " * 40_000), "longer than its input", id="too-long"),
    ],
)
def test_other_failures_fall_back_to_the_deterministic_summary(summarizer: Any, why: str) -> None:
    convo = big_session()
    e = engine(summarizer)
    out = e.compress(convo)
    report = e.last_compression
    assert report is not None
    assert report.fallback_used and not report.aborted
    assert why in report.reason
    assert report.summarizer_calls == 2, "the failing call, then the fallback"
    validate_messages(out)
    assert tool_pairs_intact(out)
    (summary,) = [m for m in out if is_summary_message(m)]
    # The offline summary keeps the user's requests verbatim.
    assert "Also check module_3 handles ERR_3." in str(summary["content"])
    assert count_message_tokens(out) < count_message_tokens(convo)
    assert e.compression_count == 1


def test_a_summary_that_fills_the_threshold_falls_back_even_when_its_input_was_longer() -> None:
    # Found by benchmarks/reliability/faults.py: after a cooldown let the middle grow
    # past a runaway 6,000-token answer, the compressor took that answer, reported an
    # "info" success, and left every later request to be cut by the window guarantee.
    convo = coding_session(chatter=6_000)
    e = engine(ScriptedSummarizer("summary " * 12_500))  # under its input, over 12,000
    out = e.compress(convo)
    report = e.last_compression
    assert report is not None and report.fallback_used
    assert report.cause == "over_budget" and "fills the 12000-token threshold" in report.reason
    assert count_message_tokens(out) < e.threshold_tokens


# ---------------------------------------------------------------- cooldown


def test_cooldown_grows_60_300_900_and_expires() -> None:
    clock = FakeClock()
    failing = RaisingSummarizer(SummarizerTransientError("HTTP 500"))
    e = engine(failing, clock)
    for expected in (60, 300, 900, 900):
        e.compress(big_session())
        assert e.should_compress_info(20_000) == (False, f"cooldown:{expected}")
        clock.advance(expected - 1)
        assert e.should_compress_info(20_000) == (False, "cooldown:1")
        clock.advance(1)
        assert e.should_compress_info(20_000) == (True, None), "the cooldown expired"
    assert failing.calls == 4


def test_during_cooldown_the_failing_summariser_is_not_called_but_nothing_is_lost() -> None:
    clock = FakeClock()
    failing = RaisingSummarizer(SummarizerTransientError("HTTP 500"))
    e = engine(failing, clock)
    e.compress(big_session())
    out = e.compress(big_session())  # e.g. an overflow while cooling down
    assert failing.calls == 1
    report = e.last_compression
    assert report is not None and report.fallback_used and report.reason == "fallback: cooldown"
    validate_messages(out)


def test_force_bypasses_the_cooldown() -> None:
    clock = FakeClock()
    summarizer = ScriptedSummarizer(SummarizerTransientError("HTTP 502"), "## Goal\nrecovered")
    e = engine(summarizer, clock)
    e.compress(big_session())
    assert e.should_compress_info(20_000)[1] == "cooldown:60"
    out = e.compress(big_session(), force=True)
    assert summarizer.calls == 2
    report = e.last_compression
    assert report is not None and not report.fallback_used and report.reason == "summarized"
    assert any("recovered" in str(m["content"]) for m in out if is_summary_message(m))
    assert e.should_compress_info(20_000) == (True, None), "a success resets the cooldown"


def test_a_success_resets_the_cooldown_ladder() -> None:
    clock = FakeClock()
    summarizer = ScriptedSummarizer(
        SummarizerTransientError("a"), "## Goal\nok", SummarizerTransientError("b")
    )
    e = engine(summarizer, clock)
    e.compress(big_session())
    clock.advance(60)
    e.compress(big_session())
    e.compress(big_session())
    assert e.should_compress_info(20_000) == (False, "cooldown:60"), "back to the first step"


# ---------------------------------------------------------------- anti-thrashing


def test_two_ineffective_compactions_block_until_a_reading_fits() -> None:
    e = engine(RecordingSummarizer())
    for _ in range(2):
        assert e.should_compress(13_000)
        e.compress(big_session())
        e.update_from_response({"prompt_tokens": 13_000})
    assert e.should_compress_info() == (False, "ineffective")
    e.update_from_response({"prompt_tokens": 5_000})
    assert e.should_compress_info(13_000) == (True, None)


@pytest.mark.parametrize(
    "clear",
    [
        pytest.param(lambda e: e.update_model("other-model", 16_000), id="update_model"),
        pytest.param(lambda e: e.compress(big_session(), force=True), id="force"),
    ],
)
def test_the_ineffective_block_is_cleared(clear: Any) -> None:
    e = engine(RecordingSummarizer())
    for _ in range(2):
        e.compress(big_session())
        e.update_from_response({"prompt_tokens": 13_000})
    assert e.should_compress_info()[1] == "ineffective"
    clear(e)
    assert e.should_compress_info(13_000) == (True, None)


def _incompressible_session(turn: int) -> list[Message]:
    """A session whose protected tail alone is over the threshold."""
    convo = [system(), user("task")]
    for i in range(turn + 6):
        convo += [call((f"c{i}", "bash", {"command": f"step {i}"})), result(f"c{i}", f"ok {i}")]
    convo.append(user("Summarise this log: " + "line of log output\n" * 3_000))
    return convo


@pytest.mark.parametrize(
    "floor_tokens",
    [pytest.param(13_000, id="floor-just-over"), pytest.param(40_000, id="floor-far-over")],
)
def test_an_incompressible_context_is_compacted_at_most_3_times_in_any_6_turns(
    floor_tokens: int,
) -> None:
    e = engine(RecordingSummarizer())
    compacted_on: list[int] = []
    for turn in range(30):
        # The host loop: a response arrives, then the engine decides.
        e.update_from_response({"prompt_tokens": floor_tokens + turn})
        if e.should_compress():
            e.compress(_incompressible_session(turn))
            compacted_on.append(turn)
    assert compacted_on, "the first attempt is allowed"
    for start in range(30):
        window = [t for t in compacted_on if start <= t < start + 6]
        assert len(window) <= 3, compacted_on


# ---------------------------------------------------------------- the real HTTP summariser


@pytest.fixture
def server() -> Any:
    with ScriptedOpenAIServer() as running:
        yield running


def test_http_5xx_falls_back_and_401_aborts(server: ScriptedOpenAIServer) -> None:
    summarizer = OpenAICompatibleSummarizer(
        base_url=server.base_url, api_key="test", model="m", max_retries=0, timeout=5
    )
    try:
        e = engine(summarizer)
        server.add_error(500)
        out = e.compress(big_session())
        report = e.last_compression
        assert report is not None and report.fallback_used and not report.aborted
        validate_messages(out)
        assert "## Goal" in server.requests[0]["messages"][-1]["content"]

        server.add_error(401)
        convo = big_session()
        assert e.compress(convo, force=True) == convo
        report = e.last_compression
        assert report is not None and report.aborted and not report.fallback_used

        server.add_reply("## Goal\nFix tests/test_api.py.")
        out = e.compress(big_session(), force=True)
        report = e.last_compression
        assert report is not None and report.reason == "summarized"
        assert any("Fix tests/test_api.py." in str(m["content"]) for m in out)
    finally:
        summarizer.close()


def test_secrets_never_reach_the_http_summariser(server: ScriptedOpenAIServer) -> None:
    convo = big_session()
    convo[4] = assistant("export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    server.add_reply("## Goal\nok")
    summarizer = OpenAICompatibleSummarizer(
        base_url=server.base_url, api_key="test", model="m", max_retries=0, timeout=5
    )
    try:
        engine(summarizer).compress(convo)
    finally:
        summarizer.close()
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in repr(server.requests)
