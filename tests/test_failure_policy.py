"""One failure policy for every engine: cooldowns, anti-thrash, the wait cap, truthful events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextengine import ContextHost, load_engine
from contextengine.engine import ContextEngine
from contextengine.errors import SummarizerAuthError, SummarizerTransientError
from contextengine.events import CompactionEvent, Event
from contextengine.failure_policy import FailurePolicy, cause_of
from contextengine.messages import validate_messages
from contextengine.summarizers import SummaryRequest

Message = dict[str, Any]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Failing:
    """A summariser that always fails with ``error``; counts its calls and their deadlines."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0
        self.deadlines: list[float | None] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        self.deadlines.append(request.deadline)
        raise self.error


def turn(i: int) -> list[Message]:
    call = f"c{i}"
    return [
        {"role": "user", "content": f"Step {i}: read report R-{i}. " + "please check it " * 120},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": f"report {i}: " + "data " * 60},
        {"role": "assistant", "content": f"Report R-{i} is fine."},
    ]


def engine_for(name: str, summarizer: Any, clock: FakeClock) -> ContextEngine:
    options: dict[str, Any] = {"context_length": 3_000, "summarizer": summarizer, "clock": clock}
    if name == "lcm":
        options["store"] = ":memory:"
    return load_engine(name, **options)


def drive(engine: ContextEngine, turns: int) -> list[CompactionEvent]:
    """An agent loop over ``turns`` turns; returns the compaction events."""
    events: list[Event] = []
    host = ContextHost(engine, model="gpt-4o", context_length=3_000, observers=[events.append])
    host.start_session("s")
    history: list[Message] = [{"role": "system", "content": "You are careful."}]
    for i in range(turns):
        messages = turn(i)
        history = [*history, messages[0]]
        request = host.prepare_request(history)
        validate_messages(request)
        history = host.history
        host.record_response({"prompt_tokens": 2_900, "completion_tokens": 10})
        history = [*history, messages[1], messages[2]]
        history = host.after_tool_calls(history)
        host.prepare_request(history)
        history = host.history
        host.record_response({"prompt_tokens": 2_900, "completion_tokens": 10})
        history = [*history, messages[3]]
        host.end_turn(history)
    return [e for e in events if isinstance(e, CompactionEvent)]


ENGINES = [pytest.param("compressor", id="compressor"), pytest.param("lcm", id="lcm")]


@pytest.mark.parametrize("name", ENGINES)
def test_a_summariser_that_is_down_is_called_once_per_cooldown(name: str) -> None:
    clock = FakeClock()
    failing = Failing(SummarizerTransientError("HTTP 500: upstream exploded", cause="server_error"))
    events = drive(engine_for(name, failing, clock), turns=12)
    assert failing.calls == 1  # the clock never moves: one cooldown covers every later turn
    first = next(e for e in events if e.summarizer_calls)
    assert (first.level, first.reason, first.fallback_used) == ("warning", "server_error", True)
    assert "upstream exploded" in (first.error or "")
    assert "offline fallback" in (first.message or "")
    assert "Automatic compaction resumes at" in (first.message or "")
    assert all(e.level != "info" for e in events if e.reason)


@pytest.mark.parametrize("name", ENGINES)
def test_the_cooldown_ends_and_the_ladder_climbs(name: str) -> None:
    clock = FakeClock()
    failing = Failing(SummarizerTransientError("HTTP 503", cause="server_error"))
    engine = engine_for(name, failing, clock)
    policy: FailurePolicy = engine.failure_policy  # type: ignore[attr-defined]
    drive(engine, turns=4)
    assert failing.calls == 1 and round(policy.cooldown_remaining()) == 60
    clock.now += 61
    drive(engine, turns=4)
    assert failing.calls == 2 and round(policy.cooldown_remaining()) == 300


@pytest.mark.parametrize("name", ENGINES)
def test_a_long_retry_after_means_a_long_cooldown(name: str) -> None:
    clock = FakeClock()
    limited = SummarizerTransientError("HTTP 429", cause="rate_limited", retry_after=3_600)
    engine = engine_for(name, Failing(limited), clock)
    events = drive(engine, turns=6)
    status = engine.get_status()
    assert status["last_failure_cause"] == "rate_limited"
    assert status["automatic_compaction"] == "cooling down"
    assert 3_500 < status["automatic_compaction_resumes_in_s"] <= 3_600
    assert any(e.reason == "rate_limited" for e in events)


@pytest.mark.parametrize("name", ENGINES)
def test_an_auth_failure_is_an_error_that_says_nothing_was_summarised(name: str) -> None:
    clock = FakeClock()
    engine = engine_for(name, Failing(SummarizerAuthError("401 invalid api key")), clock)
    events = drive(engine, turns=4)
    failed = [e for e in events if e.reason == "auth"]
    assert failed and all(e.level == "error" for e in failed)
    assert all("nothing was summarised" in (e.message or "") for e in failed)
    assert all("401 invalid api key" in (e.error or "") for e in failed)
    assert not any((e.message or "").startswith(("Compacted", "Context compacted")) for e in events)
    assert engine.get_status()["last_failure_cause"] == "auth"


@pytest.mark.parametrize("name", ENGINES)
def test_every_summariser_call_carries_the_wait_deadline(name: str) -> None:
    clock = FakeClock()
    failing = Failing(SummarizerTransientError("timeout", cause="timeout"))
    drive(engine_for(name, failing, clock), turns=4)
    assert failing.deadlines and all(d is not None for d in failing.deadlines)


def test_another_model_clears_the_cooldown() -> None:
    clock = FakeClock()
    engine = engine_for("compressor", Failing(SummarizerTransientError("x")), clock)
    drive(engine, turns=6)
    policy: FailurePolicy = engine.failure_policy  # type: ignore[attr-defined]
    assert policy.cooldown_remaining() > 0
    engine.update_model("another-model", 3_000)
    assert policy.cooldown_remaining() == 0


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        pytest.param(SummarizerAuthError("no key"), "auth", id="auth"),
        pytest.param(
            SummarizerTransientError("429", cause="rate_limited"), "rate_limited", id="rate-limited"
        ),
        pytest.param(TimeoutError("slow"), "timeout", id="timeout"),
        pytest.param(ValueError("not json"), "bad_response", id="bad-response"),
        pytest.param(ConnectionResetError("reset"), "server_error", id="dropped"),
    ],
)
def test_every_failure_gets_its_cause(error: Exception, cause: str) -> None:
    assert cause_of(error) == cause


def test_the_ladder_and_the_thrash_rule() -> None:
    clock = FakeClock()
    policy = FailurePolicy(clock=clock)
    assert policy.summarizer_failed("server_error") == 60
    assert policy.summarizer_failed("server_error") == 300
    assert policy.summarizer_failed("server_error", retry_after=2_000) == 2_000
    policy.summarizer_succeeded()
    assert policy.block() is None
    for _ in range(2):
        policy.compaction_committed()
        policy.observe_prompt(9_000, 8_000)
    assert policy.block() == ("ineffective", "ineffective")
    assert policy.block(force=True) is None
    policy.observe_prompt(1_000, 8_000)
    assert policy.block() is None
    assert json.dumps(policy.status())  # status is plain JSON
