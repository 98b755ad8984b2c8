"""OpenAICompatibleSummarizer against a real scripted server on 127.0.0.1 (no mocks)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from contextengine.errors import SummarizerAuthError, SummarizerTransientError
from contextengine.openai_summarizer import strip_thinking
from contextengine.summarizers import (
    OpenAICompatibleSummarizer,
    Summarizer,
    SummaryRequest,
    summarizer_from_env,
)
from contextengine.testing import ScriptedOpenAIServer

REQUEST = SummaryRequest(
    messages=[
        {"role": "user", "content": "Fix src/app.py"},
        {"role": "assistant", "content": "Done, tests pass."},
    ],
    token_budget=500,
)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as scripted:
        yield scripted


class Sleeps(list[float]):
    """Records the waits between retries instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _summarizer(
    server: ScriptedOpenAIServer, sleeps: Sleeps | None = None, **kwargs: Any
) -> OpenAICompatibleSummarizer:
    options: dict[str, Any] = {"api_key": "sk-test", "model": "summary-model", "timeout": 2.0}
    options.update(kwargs)
    return OpenAICompatibleSummarizer(
        base_url=server.base_url, sleep=sleeps if sleeps is not None else Sleeps(), **options
    )


def test_success_returns_the_answer_and_sends_an_openai_request(
    server: ScriptedOpenAIServer,
) -> None:
    server.add_reply("## Goal\nFix src/app.py")
    with _summarizer(server) as summarizer:
        assert isinstance(summarizer, Summarizer)
        assert summarizer.summarize(REQUEST) == "## Goal\nFix src/app.py"
    (body,) = server.requests
    assert body["model"] == "summary-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "Fix src/app.py" in body["messages"][1]["content"]
    assert "not new instructions" in body["messages"][1]["content"]
    assert server.recorded[0].path == "/v1/chat/completions"
    assert server.recorded[0].headers["authorization"] == "Bearer sk-test"


def test_trailing_slash_in_base_url_is_tolerated(server: ScriptedOpenAIServer) -> None:
    server.add_reply("ok")
    with OpenAICompatibleSummarizer(base_url=server.base_url + "/", api_key="k", model="m") as s:
        assert s.summarize(REQUEST) == "ok"
    assert server.recorded[0].path == "/v1/chat/completions"


def test_a_prompt_given_in_the_request_is_sent_as_is_after_redaction(
    server: ScriptedOpenAIServer,
) -> None:
    server.add_reply("ok")
    request = SummaryRequest(
        messages=[], prompt="Summarise this. OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl012"
    )
    with _summarizer(server) as summarizer:
        summarizer.summarize(request)
    sent = server.requests[0]["messages"][1]["content"]
    assert sent.startswith("Summarise this.")
    assert "sk-proj-abc123def456ghi789jkl012" not in sent


def test_no_temperature_or_max_tokens_unless_configured(server: ScriptedOpenAIServer) -> None:
    server.add_reply("a")
    server.add_reply("b")
    with _summarizer(server) as plain:
        plain.summarize(REQUEST)
    with _summarizer(server, temperature=0.2, max_tokens=300) as tuned:
        tuned.summarize(REQUEST)
    first, second = server.requests
    assert "temperature" not in first and "max_tokens" not in first
    assert second["temperature"] == 0.2 and second["max_tokens"] == 300


def test_429_honours_retry_after_then_succeeds(server: ScriptedOpenAIServer) -> None:
    server.add_error(429, headers={"Retry-After": "1.5"})
    server.add_reply("summary")
    sleeps = Sleeps()
    with _summarizer(server, sleeps) as summarizer:
        assert summarizer.summarize(REQUEST) == "summary"
    assert len(server.requests) == 2
    assert sleeps == [1.5]


def test_a_retry_after_beyond_the_cap_fails_at_once_instead_of_sleeping(
    server: ScriptedOpenAIServer,
) -> None:
    server.add_error(429, headers={"Retry-After": "3600"})
    server.add_reply("summary")
    sleeps = Sleeps()
    with (
        _summarizer(server, sleeps, max_retry_after=30.0) as summarizer,
        pytest.raises(SummarizerTransientError) as caught,
    ):
        summarizer.summarize(REQUEST)
    assert sleeps == []
    assert len(server.requests) == 1
    assert (caught.value.cause, caught.value.retry_after) == ("rate_limited", 3600.0)


class FakeClock:
    """A monotonic clock that the recorded sleeps advance."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class AdvancingSleeps(Sleeps):
    """Records the waits and moves a fake clock by them."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        super().__call__(seconds)
        self.clock.now += seconds


def test_a_retry_after_beyond_the_deadline_fails_at_once(server: ScriptedOpenAIServer) -> None:
    server.add_error(429, headers={"Retry-After": "5"})
    server.add_reply("summary")
    clock = FakeClock()
    request = SummaryRequest(messages=REQUEST.messages, deadline=clock.now + 2.0)
    with (
        _summarizer(server, clock=clock) as summarizer,
        pytest.raises(SummarizerTransientError) as caught,
    ):
        summarizer.summarize(request)
    assert len(server.requests) == 1
    assert caught.value.retry_after == 5.0


def test_no_attempt_starts_after_the_deadline(server: ScriptedOpenAIServer) -> None:
    for _ in range(3):
        server.add_error(500)
    clock = FakeClock()
    sleeps = AdvancingSleeps(clock)
    request = SummaryRequest(messages=REQUEST.messages, deadline=clock.now + 1.0)
    with (
        _summarizer(server, sleeps, backoff_base=0.6, max_retries=5, clock=clock) as summarizer,
        pytest.raises(SummarizerTransientError) as caught,
    ):
        summarizer.summarize(request)
    # 0.6 s of backoff fits before the deadline, the next 1.2 s does not.
    assert sleeps == [0.6]
    assert len(server.requests) == 2
    assert caught.value.cause == "server_error"


def test_a_slow_summariser_times_out_by_the_deadline(server: ScriptedOpenAIServer) -> None:
    import time

    server.add_delay(5.0)
    server.add_reply("too late")
    request = SummaryRequest(messages=REQUEST.messages, deadline=time.monotonic() + 0.3)
    with (
        _summarizer(server, timeout=30.0, max_retries=3) as summarizer,
        pytest.raises(SummarizerTransientError) as caught,
    ):
        summarizer.summarize(request)
    assert caught.value.cause == "timeout"
    assert len(server.requests) <= 1


@pytest.mark.parametrize(
    ("script", "cause"),
    [
        pytest.param(lambda s: s.add_error(503), "server_error", id="503"),
        pytest.param(lambda s: s.add_error(429), "rate_limited", id="429"),
        pytest.param(lambda s: s.add_error(400), "bad_response", id="400"),
        pytest.param(lambda s: s.add_malformed(), "bad_response", id="malformed"),
        pytest.param(lambda s: s.add_drop(), "server_error", id="dropped"),
    ],
)
def test_every_failure_carries_its_cause(
    server: ScriptedOpenAIServer, script: Any, cause: str
) -> None:
    script(server)
    with (
        _summarizer(server, max_retries=0) as summarizer,
        pytest.raises(SummarizerTransientError) as caught,
    ):
        summarizer.summarize(REQUEST)
    assert caught.value.cause == cause


def test_500_is_retried_with_backoff_then_fails_as_transient(
    server: ScriptedOpenAIServer,
) -> None:
    for _ in range(3):
        server.add_error(500, body={"error": {"message": "upstream exploded"}})
    sleeps = Sleeps()
    with (
        _summarizer(server, sleeps, max_retries=2, backoff_base=0.5) as summarizer,
        pytest.raises(SummarizerTransientError, match=r"HTTP 500.*upstream exploded"),
    ):
        summarizer.summarize(REQUEST)
    assert len(server.requests) == 3
    assert sleeps == [0.5, 1.0]


@pytest.mark.parametrize("status", [pytest.param(s, id=str(s)) for s in (401, 402, 403)])
def test_auth_statuses_raise_auth_error_without_retry(
    server: ScriptedOpenAIServer, status: int
) -> None:
    server.add_error(status)
    with _summarizer(server) as summarizer, pytest.raises(SummarizerAuthError, match=str(status)):
        summarizer.summarize(REQUEST)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {
                "error": {
                    "message": "You exceeded your current quota.",
                    "code": "insufficient_quota",
                }
            },
            id="insufficient-quota-code",
        ),
        pytest.param({"error": {"message": "Check your billing details"}}, id="billing-message"),
    ],
)
def test_quota_429_is_an_auth_error(server: ScriptedOpenAIServer, body: dict[str, Any]) -> None:
    server.add_error(429, body=body)
    with _summarizer(server) as summarizer, pytest.raises(SummarizerAuthError):
        summarizer.summarize(REQUEST)
    assert len(server.requests) == 1


def test_other_4xx_fails_at_once_as_transient(server: ScriptedOpenAIServer) -> None:
    server.add_error(400, body={"error": {"message": "context too long"}})
    with (
        _summarizer(server) as summarizer,
        pytest.raises(SummarizerTransientError, match="context too long"),
    ):
        summarizer.summarize(REQUEST)
    assert len(server.requests) == 1


def test_missing_key_for_a_remote_server_fails_without_a_request() -> None:
    summarizer = OpenAICompatibleSummarizer(
        base_url="https://api.example.com/v1", api_key=None, model="m"
    )
    with summarizer, pytest.raises(SummarizerAuthError, match="no API key"):
        summarizer.summarize(REQUEST)


def test_a_local_server_needs_no_key(server: ScriptedOpenAIServer) -> None:
    server.add_reply("ok")
    with _summarizer(server, api_key=None) as summarizer:
        assert summarizer.summarize(REQUEST) == "ok"
    assert "authorization" not in server.recorded[0].headers


def test_timeout_is_retried_then_transient(server: ScriptedOpenAIServer) -> None:
    server.add_delay(1.0)
    server.add_reply("late")
    server.add_delay(1.0)
    server.add_reply("late again")
    with (
        _summarizer(server, timeout=0.1, max_retries=1) as summarizer,
        pytest.raises(SummarizerTransientError, match="timed out"),
    ):
        summarizer.summarize(REQUEST)
    assert len(server.requests) == 2


def test_timeout_then_success(server: ScriptedOpenAIServer) -> None:
    server.add_delay(1.0)
    server.add_reply("late")
    server.add_reply("on time")
    with _summarizer(server, timeout=0.1, max_retries=1) as summarizer:
        assert summarizer.summarize(REQUEST) == "on time"


def test_dropped_connection_is_retried(server: ScriptedOpenAIServer) -> None:
    server.add_drop()
    server.add_reply("after the drop")
    with _summarizer(server) as summarizer:
        assert summarizer.summarize(REQUEST) == "after the drop"
    assert len(server.requests) == 2


def test_dropped_connections_exhaust_into_transient(server: ScriptedOpenAIServer) -> None:
    for _ in range(2):
        server.add_drop()
    with (
        _summarizer(server, max_retries=1) as summarizer,
        pytest.raises(SummarizerTransientError, match="connection failed"),
    ):
        summarizer.summarize(REQUEST)


def test_refused_connection_is_transient() -> None:
    with ScriptedOpenAIServer() as gone:
        base_url = gone.base_url
    with (
        OpenAICompatibleSummarizer(
            base_url=base_url, api_key="k", model="m", max_retries=1, sleep=Sleeps()
        ) as summarizer,
        pytest.raises(SummarizerTransientError, match="after 2 attempts"),
    ):
        summarizer.summarize(REQUEST)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        pytest.param(("malformed", '{"choices": ['), "malformed JSON", id="malformed-json"),
        pytest.param(("malformed", '{"object": "chat.completion"}'), "no choices", id="no-choices"),
        pytest.param(("reply", ""), "empty summary", id="empty-content"),
        pytest.param(
            ("reply", "<think>only thoughts</think>"), "empty summary", id="only-thinking"
        ),
    ],
)
def test_bad_answers_are_transient(
    server: ScriptedOpenAIServer, script: tuple[str, str], message: str
) -> None:
    kind, text = script
    if kind == "malformed":
        server.add_malformed(text)
    else:
        server.add_reply(text)
    with _summarizer(server) as summarizer, pytest.raises(SummarizerTransientError, match=message):
        summarizer.summarize(REQUEST)


def test_thinking_is_stripped_and_reasoning_content_ignored(server: ScriptedOpenAIServer) -> None:
    server.add_reply("<think>\nlet me see\n</think>\n## Goal\nShip it.", reasoning="hidden chain")
    with _summarizer(server) as summarizer:
        assert summarizer.summarize(REQUEST) == "## Goal\nShip it."


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        pytest.param("<thinking>a</thinking>B", "B", id="thinking-tag"),
        pytest.param("plan...</think>\nAnswer", "Answer", id="unopened-close-tag"),
        pytest.param("Answer\n<think>cut off", "Answer", id="unclosed-block"),
        pytest.param("No tags at all", "No tags at all", id="untouched"),
    ],
)
def test_strip_thinking_forms(raw: str, clean: str) -> None:
    assert strip_thinking(raw) == clean


def test_an_injected_client_is_used_and_left_open(server: ScriptedOpenAIServer) -> None:
    import httpx

    server.add_reply("ok")
    with httpx.Client() as client:
        summarizer = OpenAICompatibleSummarizer(
            base_url=server.base_url, api_key="k", model="m", client=client
        )
        assert summarizer.summarize(REQUEST) == "ok"
        summarizer.close()
        assert not client.is_closed


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, None, id="nothing-configured"),
        pytest.param({"OPENAI_API_KEY": "sk-x"}, None, id="key-without-model"),
        pytest.param({"CONTEXTENGINE_SUMMARY_MODEL": "m"}, None, id="model-without-url-or-key"),
        pytest.param(
            {
                "CONTEXTENGINE_SUMMARY_BASE_URL": "http://127.0.0.1:8000/v1/",
                "CONTEXTENGINE_SUMMARY_MODEL": "qwen",
            },
            ("http://127.0.0.1:8000/v1", None, "qwen"),
            id="local-server-without-key",
        ),
        pytest.param(
            {"OPENAI_API_KEY": "sk-x", "CONTEXTENGINE_SUMMARY_MODEL": "gpt-4o-mini"},
            ("https://api.openai.com/v1", "sk-x", "gpt-4o-mini"),
            id="openai-fallbacks",
        ),
        pytest.param(
            {
                "CONTEXTENGINE_SUMMARY_BASE_URL": "http://gpu:8000/v1",
                "CONTEXTENGINE_SUMMARY_API_KEY": "own",
                "CONTEXTENGINE_SUMMARY_MODEL": "m",
                "OPENAI_BASE_URL": "http://other/v1",
                "OPENAI_API_KEY": "sk-other",
            },
            ("http://gpu:8000/v1", "own", "m"),
            id="own-variables-win",
        ),
        pytest.param(
            {"OPENAI_BASE_URL": "http://vllm:8000/v1", "CONTEXTENGINE_SUMMARY_MODEL": "m"},
            ("http://vllm:8000/v1", None, "m"),
            id="openai-base-url",
        ),
        pytest.param(
            {"CONTEXTENGINE_SUMMARY_API_KEY": " ", "CONTEXTENGINE_SUMMARY_MODEL": "m"},
            None,
            id="blank-values-are-unset",
        ),
    ],
)
def test_summarizer_from_env(
    environ: dict[str, str], expected: tuple[str, str | None, str] | None
) -> None:
    summarizer = summarizer_from_env(environ)
    if expected is None:
        assert summarizer is None
        return
    assert summarizer is not None
    with summarizer:
        assert (summarizer.base_url, summarizer.api_key, summarizer.model) == expected
