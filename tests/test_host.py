"""ContextHost: hook order, fail-open requests, events, overflow, history never mutated."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

import contextengine._host_requests as requests_module
import contextengine._host_state as state_module
from contextengine.engine import ContextEngine
from contextengine.events import CompactionEvent, Event, HostEvent
from contextengine.host import ContextHost
from contextengine.messages import validate_messages
from contextengine.overflow import is_context_overflow_error, send_with_overflow_retry
from contextengine.testing.recording_engine import RecordingEngine
from contextengine.tokens import count_message_tokens

Message = dict[str, Any]


def conversation(turns: int = 6, *, tools: bool = True) -> list[Message]:
    """A system prompt and ``turns`` user turns, every other one with a tool call."""
    messages: list[Message] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i} " + "word " * 40})
        if tools and i % 2:
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "look", "arguments": json.dumps({"i": i})},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "result " * 30})
        messages.append({"role": "assistant", "content": f"answer {i} " + "text " * 40})
    return messages


def make_host(engine: ContextEngine, **kwargs: Any) -> tuple[ContextHost, list[Event]]:
    events: list[Event] = []
    options = {"model": "test-model", "context_length": 100_000, **kwargs}
    host = ContextHost(engine, observers=[events.append], **options)
    return host, events


def compactions(events: list[Event]) -> list[CompactionEvent]:
    return [e for e in events if isinstance(e, CompactionEvent)]


def warnings_of(events: list[Event], kind: str) -> list[HostEvent]:
    return [e for e in events if isinstance(e, HostEvent) and e.kind == kind]


USAGE = {"prompt_tokens": 900, "completion_tokens": 50, "total_tokens": 950}


# ---------------------------------------------------------------------- lifecycle


def test_full_session_calls_hooks_in_contract_order() -> None:
    engine = RecordingEngine()
    host, _ = make_host(engine)
    host.start_session("s1", source="cli")
    history = conversation(1, tools=False)[:2]
    host.prepare_request(history)
    host.record_response(USAGE)
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        *host.history,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "t1", "content": "ok"},
    ]
    history = host.after_tool_calls(history)
    host.prepare_request(history)
    host.record_response(USAGE)
    history = [*host.history, {"role": "assistant", "content": "done"}]
    host.end_turn(history, USAGE, turn_id=1)
    host.reset_session("s2")
    host.end_session(history)
    assert engine.hook_names() == [
        "update_model",
        "on_session_start",
        # request 1: no real usage yet, so the engine's own preflight check is asked
        "should_defer_preflight_to_real_usage",
        "should_compress",
        "should_compress_preflight",
        "select_context",
        "update_from_response",
        "should_compress",
        "prune_tool_results_only",
        # request 2: real usage is known and the growth is small
        "should_defer_preflight_to_real_usage",
        "should_compress",
        "select_context",
        "update_from_response",
        "on_turn_complete",
        "on_session_end",
        "on_session_reset",
        "on_session_start",
        "on_session_end",
    ]
    assert engine.calls_to("on_session_start")[0] == {"session_id": "s1", "source": "cli"}
    turn = engine.calls_to("on_turn_complete")[0]
    assert turn["turn_id"] == 1 and turn["usage"]["prompt_tokens"] == 900
    assert [c["session_id"] for c in engine.calls_to("on_session_end")] == ["s1", "s2"]


def test_switch_model_updates_the_engine_threshold() -> None:
    engine = RecordingEngine()
    host, _ = make_host(engine)
    host.switch_model("other", 10_000, provider="anthropic")
    assert (engine.model, engine.context_length, engine.threshold_tokens) == (
        "other",
        10_000,
        7_500,
    )
    assert host.provider == "anthropic"


def test_record_response_normalises_usage() -> None:
    engine = RecordingEngine()
    host, _ = make_host(engine)
    host.record_response({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5})
    (call,) = engine.calls_to("update_from_response")
    assert call["usage"]["prompt_tokens"] == 100  # Anthropic's input excludes the cache


def test_end_turn_passes_a_copy_and_usage_none_for_an_interrupted_turn() -> None:
    engine = RecordingEngine()
    host, _ = make_host(engine)
    history = conversation(2)
    seen: list[Any] = []
    engine.on_turn_complete = lambda messages, usage=None, **kw: seen.append((messages, usage, kw))  # type: ignore[method-assign]
    host.end_turn(history, None, interrupted=True)
    messages, usage, meta = seen[0]
    assert messages == history and messages is not history
    assert usage is None and meta == {"interrupted": True}


@pytest.mark.parametrize(
    "hook",
    [
        pytest.param("on_turn_complete", id="turn"),
        pytest.param("on_session_start", id="session-start"),
        pytest.param("update_from_response", id="usage"),
    ],
)
def test_observation_hooks_that_raise_are_swallowed_with_a_warning(hook: str) -> None:
    engine = RecordingEngine()

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("observer broke")

    setattr(engine, hook, boom)
    host, events = make_host(engine)
    host.start_session("s")
    host.record_response(USAGE)
    host.end_turn(conversation(1), USAGE)
    (warning,) = warnings_of(events, "hook_failed")
    assert hook in (warning.message or "") and "observer broke" in (warning.error or "")


# ---------------------------------------------------------------------- preflight and passes


def shrinking_engine(**kwargs: Any) -> RecordingEngine:
    """Compress drops the oldest non-system message on every pass."""
    return RecordingEngine(compress_result=lambda m: [m[0], *m[2:]], **kwargs)


def test_preflight_compacts_returns_a_new_history_and_never_mutates_the_input() -> None:
    engine = RecordingEngine(should_compress=lambda tokens: bool(tokens and tokens > 300))
    host, events = make_host(engine)
    history = conversation(8, tools=False)
    before = copy.deepcopy(history)
    request = host.prepare_request(history)
    assert history == before
    assert host.history is not history and len(host.history) < len(history)
    assert request == host.history
    (event,) = compactions(events)
    assert event.phase == "preflight" and not event.aborted
    assert event.messages_before == len(history) and event.messages_after == len(host.history)
    assert event.tokens_after < event.tokens_before
    assert event.message and "compacted" in event.message


def test_passes_stop_early_when_a_pass_makes_no_progress() -> None:
    engine = RecordingEngine(should_compress=True, compress_result=lambda m: list(m))
    host, events = make_host(engine)
    history = conversation(3)
    assert host.prepare_request(history) == history
    assert len(engine.calls_to("compress")) == 1
    (event,) = compactions(events)
    assert event.aborted and event.level == "warning"


def test_passes_are_bounded_per_turn_and_reset_by_end_turn() -> None:
    engine = shrinking_engine(should_compress=True)
    host, events = make_host(engine, max_compactions_per_turn=3)
    history = conversation(6, tools=False)
    host.prepare_request(history)
    assert len(engine.calls_to("compress")) == 3
    host.prepare_request(host.history)
    assert len(engine.calls_to("compress")) == 3
    assert len(warnings_of(events, "compaction_limit")) == 1
    host.end_turn(host.history, USAGE)
    host.prepare_request(host.history)
    assert len(engine.calls_to("compress")) == 6


def test_a_block_reason_is_reported_once_per_turn() -> None:
    engine = RecordingEngine()
    engine.should_compress_info = lambda prompt_tokens=None: (False, "cooling down")  # type: ignore[method-assign]
    host, events = make_host(engine, context_length=200)  # the conversation is over the threshold
    host.prepare_request(conversation(2))
    host.prepare_request(conversation(2))
    (skipped,) = compactions(events)
    assert skipped.aborted and skipped.passes == 0 and skipped.level == "warning"
    assert skipped.reason == "cooling down" and "cooling down" in (skipped.message or "")
    assert not engine.calls_to("compress")
    assert not engine.calls_to("should_compress_preflight")  # a block holds for preflight too


def test_a_reason_below_the_threshold_is_not_a_warning() -> None:
    engine = RecordingEngine()
    engine.should_compress_info = lambda prompt_tokens=None: (False, "below_threshold")  # type: ignore[method-assign]
    host, events = make_host(engine)
    host.prepare_request(conversation(2))
    assert not events


def test_an_engine_below_its_threshold_is_not_skipped_when_the_host_estimate_is_over() -> None:
    # lcm judges its own view, smaller than the host's history: its "below_threshold"
    # came out as a "Context compaction skipped: below threshold." warning.
    engine = RecordingEngine()
    engine.should_compress_info = lambda prompt_tokens=None: (False, "below_threshold")  # type: ignore[method-assign]
    host, events = make_host(engine, context_length=200)  # the history is over the threshold
    host.prepare_request(conversation(2))
    assert not compactions(events)


def test_deferring_to_real_usage_skips_the_preflight_check() -> None:
    engine = RecordingEngine(should_compress=True)
    engine.should_defer_preflight_to_real_usage = lambda rough_tokens: True  # type: ignore[method-assign]
    host, _ = make_host(engine)
    host.prepare_request(conversation(3))
    assert not engine.calls_to("compress")


# ---------------------------------------------------------------------- engine failures


@pytest.mark.parametrize(
    ("result", "needle"),
    [
        pytest.param(RuntimeError("summariser down"), "summariser down", id="raises"),
        pytest.param("not a list", "not a list", id="non-list"),
        pytest.param([{"role": "wizard", "content": "x"}], "role", id="invalid-message"),
    ],
)
def test_invalid_engine_output_keeps_the_previous_messages_with_an_error(
    result: Any, needle: str
) -> None:
    def compress(messages: list[Message]) -> Any:
        if isinstance(result, Exception):
            raise result
        return result

    engine = RecordingEngine(should_compress=True, compress_result=compress)
    host, events = make_host(engine)
    history = conversation(3)
    assert host.prepare_request(history) == history
    assert host.history is history
    (event,) = compactions(events)
    assert event.aborted and event.level == "error" and needle in (event.error or "")
    assert event.message and "unchanged" in event.message


def test_compress_output_with_broken_tool_pairs_is_repaired() -> None:
    def orphan(messages: list[Message]) -> list[Message]:
        return [messages[0], {"role": "tool", "tool_call_id": "gone", "content": "x"}, messages[-1]]

    engine = RecordingEngine(should_compress=True, compress_result=orphan)
    host, _ = make_host(engine)
    host.prepare_request(conversation(4))
    assert all(m.get("role") != "tool" for m in host.history)


# ---------------------------------------------------------------------- select_context


@pytest.mark.parametrize(
    "selected",
    [
        pytest.param(ValueError("index offline"), id="exception"),
        pytest.param("summary text", id="non-list"),
        pytest.param([], id="empty-list"),
        pytest.param([{"role": "user", "content": "x"}, "not a dict"], id="non-dicts"),
        pytest.param([{"role": "wizard"}], id="invalid-messages"),
    ],
)
def test_select_context_fails_open_with_a_warning(selected: Any) -> None:
    engine = RecordingEngine(select_result=selected)
    host, events = make_host(engine)
    history = conversation(3)
    assert host.prepare_request(history) == history
    assert len(warnings_of(events, "select_context_failed")) == 1


def test_select_context_none_keeps_the_request_byte_identical() -> None:
    host, events = make_host(RecordingEngine())
    history = conversation(3)
    request = host.prepare_request(history)
    assert request is history
    assert json.dumps(request) == json.dumps(conversation(3))
    assert not events


def test_a_selected_context_is_sent_but_never_persisted() -> None:
    selection = [{"role": "system", "content": "s"}, {"role": "user", "content": "only this"}]
    engine = RecordingEngine(select_result=selection)
    host, _ = make_host(engine)
    history = conversation(3)
    incoming = history[-2]
    assert host.prepare_request(history, incoming=incoming) == selection
    assert host.history is history
    (call,) = engine.calls_to("select_context")
    assert call["incoming_message"] == incoming and call["budget_tokens"] == 75_000


class EditingEngine(RecordingEngine):
    """Edits whatever select_context is given, in place, and sends nothing of its own."""

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        for given in (request_messages, conversation_messages or []):
            given[0]["content"] = "HACK"
            given[1]["content"] = [{"type": "text", "text": "HACK"}]
            given.append({"role": "user", "content": "injected"})
        if incoming_message is not None:
            incoming_message["content"] = "HACK"
        return None


def test_select_context_edits_a_copy_never_the_saved_history() -> None:
    host, _ = make_host(EditingEngine())
    history = conversation(3)
    pristine = copy.deepcopy(history)
    for _ in range(2):  # the second request reuses the copies made by the first
        request = host.prepare_request(history, incoming=history[-1])
        assert history == pristine and host.history == pristine
        assert request == pristine
    history = [*history, {"role": "user", "content": "one more"}]
    host.prepare_request(history)
    assert history[:-1] == pristine and history[-1] == {"role": "user", "content": "one more"}


# ---------------------------------------------------------------------- old engines and kwargs


class OldSignatureEngine(ContextEngine):
    """Written against the two-argument compress of an older contract."""

    received: list[tuple[Any, ...]]

    def __init__(self) -> None:
        self.received = []

    @property
    def name(self) -> str:
        return "old"

    def update_from_response(self, usage: dict[str, Any]) -> None:
        pass

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return False

    def compress(self, messages, current_tokens=None):  # type: ignore[no-untyped-def, override]
        self.received.append((len(messages), current_tokens))
        return [messages[0], *messages[-2:]]

    def on_turn_complete(self, messages, usage=None):  # type: ignore[no-untyped-def, override]
        self.received.append(("turn", usage))


def test_an_old_signature_engine_receives_only_current_tokens() -> None:
    engine = OldSignatureEngine()
    host, events = make_host(engine)
    host.memory_context = "user prefers tabs"
    history = conversation(4, tools=False)
    result = host.compress_now(history, focus_topic="the database")
    assert len(result) == 3
    ((count, tokens),) = engine.received
    assert count == len(history) and tokens == count_message_tokens(history)
    host.end_turn(result, USAGE, turn_id=3, interrupted=False)
    assert engine.received[-1][0] == "turn"
    assert compactions(events)[0].phase == "manual"


class KeywordEngine(RecordingEngine):
    def compress(self, messages: list[Message], **kwargs: Any) -> list[Message]:  # type: ignore[override]
        self.calls.append(("compress", dict(kwargs)))
        return [messages[0], *messages[-2:]]


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        pytest.param("", None, id="empty-memory-not-passed"),
        pytest.param("  ", None, id="blank-memory-not-passed"),
        pytest.param("likes tea; api_key=hunter2secretvalue", "likes tea", id="passed"),
    ],
)
def test_memory_context_is_passed_only_when_non_empty(memory: str, expected: str | None) -> None:
    engine = KeywordEngine()
    host, _ = make_host(engine)
    host.memory_context = memory
    host.compress_now(conversation(4, tools=False), focus_topic="x")
    (kwargs,) = engine.calls_to("compress")
    assert kwargs["force"] is True and kwargs["focus_topic"] == "x"
    if expected is None:
        assert "memory_context" not in kwargs
    else:
        assert expected in kwargs["memory_context"]
        assert "hunter2" not in kwargs["memory_context"]  # redacted before it leaves


def test_manual_compress_with_nothing_to_compress_does_not_call_compress() -> None:
    engine = RecordingEngine(has_content=False)
    host, events = make_host(engine)
    history = conversation(2)
    assert host.compress_now(history) is history
    assert not engine.calls_to("compress")
    (event,) = compactions(events)
    assert event.phase == "manual" and event.message == "Nothing to compress."


# ---------------------------------------------------------------------- events and observers


def test_observers_are_isolated_from_each_other() -> None:
    received: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("bad observer")

    host = ContextHost(
        RecordingEngine(), model="m", context_length=10_000, observers=[broken, received.append]
    )
    host.compress_now(conversation(4, tools=False))
    assert len(received) == 1 and isinstance(received[0], CompactionEvent)


@pytest.mark.parametrize(
    ("quiet", "automatic_line"),
    [pytest.param(False, True, id="default"), pytest.param(True, False, id="quiet-engine")],
)
def test_quiet_engines_silence_only_automatic_successes(quiet: bool, automatic_line: bool) -> None:
    engine = RecordingEngine(should_compress=[True, False], quiet=quiet)
    host, events = make_host(engine)
    host.prepare_request(conversation(6, tools=False))  # automatic success
    host.compress_now(conversation(6, tools=False))  # manual
    engine._compress_result = lambda m: (_ for _ in ()).throw(RuntimeError("down"))
    host.compress_now(host.history)  # manual failure
    automatic, manual, failed = compactions(events)
    assert (automatic.message is not None) is automatic_line
    assert manual.message and manual.level == "info"
    assert failed.message and failed.level == "error"


def test_custom_status_message_from_the_engine() -> None:
    engine = RecordingEngine(should_compress=[True, False])
    engine.get_automatic_compaction_status_message = (  # type: ignore[method-assign]
        lambda *, phase, default_message, **ctx: f"{phase}: tidied up"
    )
    host, events = make_host(engine)
    host.prepare_request(conversation(6, tools=False))
    assert compactions(events)[0].message == "preflight: tidied up"


# ---------------------------------------------------------------------- tools


def test_tools_are_routed_and_errors_become_json() -> None:
    def fail(args: dict[str, Any]) -> Any:
        raise KeyError("no such page")

    engine = RecordingEngine(tools={"echo": lambda args: {"echo": args}, "fail": fail})
    host, _ = make_host(engine)
    assert [t["function"]["name"] for t in host.tool_schemas()] == ["echo", "fail"]
    assert json.loads(host.handle_tool_call("echo", '{"a": 1}')) == {"echo": {"a": 1}}
    assert "no such page" in json.loads(host.handle_tool_call("fail", {}))["error"]
    assert "Unknown" in json.loads(host.handle_tool_call("missing", {}))["error"]
    assert "not valid JSON" in json.loads(host.handle_tool_call("echo", "{oops"))["error"]
    # Arguments that are JSON but not an object are refused in the host's words,
    # not in Python's ("'int' object is not iterable").
    for raw in ("1", "[1, 2]", '[["a", 1]]', '"text"', [["a", 1]], 7):
        error = json.loads(host.handle_tool_call("echo", raw))["error"]
        assert error.startswith("arguments must be a JSON object, got "), error
    assert json.loads(host.handle_tool_call("echo", "null")) == {"echo": {}}


# ---------------------------------------------------------------------- overflow


class ProviderError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


def _http_error(status: int, body: Any) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, json=body, request=request)
    return httpx.HTTPStatusError("error", request=request, response=response)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(ProviderError(413, "Request Entity Too Large"), True, id="413"),
        pytest.param(
            _http_error(400, {"error": {"code": "context_length_exceeded", "message": "x"}}),
            True,
            id="openai-httpx",
        ),
        pytest.param(
            {"type": "error", "error": {"message": "prompt is too long: 210000 tokens"}},
            True,
            id="anthropic-body",
        ),
        pytest.param("This model's maximum context length is 8192 tokens", True, id="string"),
        pytest.param(
            ProviderError(400, "Please reduce the length of the messages"), True, id="reduce-length"
        ),
        pytest.param(_http_error(429, {"error": {"message": "slow down"}}), False, id="429"),
        pytest.param(ProviderError(400, "invalid tool schema"), False, id="other-400"),
        pytest.param(None, False, id="none"),
    ],
)
def test_is_context_overflow_error(error: Any, expected: bool) -> None:
    assert is_context_overflow_error(error) is expected


def test_overflow_compacts_and_retries_once() -> None:
    engine = RecordingEngine(keep_last=2)
    host, events = make_host(engine)
    history = conversation(6, tools=False)
    sent: list[int] = []

    def send(request: list[Message]) -> str:
        sent.append(len(request))
        if len(sent) == 1:
            raise _http_error(400, {"error": {"message": "maximum context length exceeded"}})
        return "ok"

    assert send_with_overflow_retry(host, history, send) == "ok"
    assert sent[1] < sent[0] == len(history)
    (call,) = engine.calls_to("compress")
    assert call["force"] is True
    assert compactions(events)[0].phase == "overflow"


@pytest.mark.parametrize(
    ("error", "compress_calls"),
    [
        pytest.param(ProviderError(500, "server exploded"), 0, id="not-an-overflow"),
        pytest.param(ProviderError(413, "too large"), 1, id="nothing-freed"),
    ],
)
def test_overflow_retry_reraises_when_retrying_cannot_help(
    error: Exception, compress_calls: int
) -> None:
    engine = RecordingEngine(compress_result=lambda m: list(m))
    host, _ = make_host(engine)
    attempts: list[int] = []

    def send(request: list[Message]) -> str:
        attempts.append(1)
        raise error

    with pytest.raises(ProviderError):
        send_with_overflow_retry(host, conversation(3), send)
    assert len(attempts) == 1 and len(engine.calls_to("compress")) == compress_calls


# ---------------------------------------------------------------------- cache control and speed


def test_cache_breakpoints_mark_copies_of_system_and_last_message() -> None:
    host, _ = make_host(RecordingEngine(), cache_control=True)
    history = conversation(3)
    before = copy.deepcopy(history)
    request = host.prepare_request(history)
    assert history == before
    assert request[0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert request[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all(a is b for a, b in zip(request[1:-1], history[1:-1], strict=True))


def test_cache_breakpoints_follow_the_selected_context() -> None:
    selection = [{"role": "user", "content": "only this"}]
    host, _ = make_host(RecordingEngine(select_result=selection), cache_control=True)
    (message,) = host.prepare_request(conversation(2))
    assert message["content"] == [
        {"type": "text", "text": "only this", "cache_control": {"type": "ephemeral"}}
    ]
    assert selection[0]["content"] == "only this"


def test_per_request_work_is_proportional_to_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    estimated: list[int] = []
    sanitized: list[int] = []
    real_rough, real_sanitize = state_module._rough_one, requests_module.sanitize_tool_pairs

    def counting_rough(msg: Message, model: str | None = None) -> int:
        estimated.append(1)
        return real_rough(msg, model)

    def counting_sanitize(messages: list[Message], repairs: Any = None) -> list[Message]:
        sanitized.append(len(messages))
        return real_sanitize(messages, repairs)

    monkeypatch.setattr(state_module, "_rough_one", counting_rough)
    monkeypatch.setattr(requests_module, "sanitize_tool_pairs", counting_sanitize)
    host, _ = make_host(RecordingEngine())
    history = conversation(300)
    host.prepare_request(history)
    host.record_response(USAGE)
    estimated.clear()
    sanitized.clear()
    history = [
        *host.history,
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    host.prepare_request(history)
    assert len(estimated) == 2 and sanitized == [2]
    assert host.status()["rough_tokens"] == count_message_tokens(history)


def test_a_long_agentic_turn_keeps_compacting_between_responses() -> None:
    engine = shrinking_engine(should_compress=True)
    host, events = make_host(engine, max_compactions_per_turn=2)
    history = conversation(6, tools=False)
    for _ in range(3):  # three model calls in one turn, no end_turn in between
        host.prepare_request(history)
        history = host.history
        host.record_response(USAGE)
    assert len(engine.calls_to("compress")) == 6
    assert not warnings_of(events, "compaction_limit")


def test_a_tool_call_whose_result_was_lost_is_reported_by_name_once() -> None:
    host, events = make_host(RecordingEngine())
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_lost",
                    "type": "function",
                    "function": {"name": "ls", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "and?"},
    ]
    request = host.prepare_request(history)
    assert all("tool_calls" not in m for m in request)  # the call left out: no invalid request
    host.prepare_request([*history, {"role": "assistant", "content": "ok"}])
    (warning,) = warnings_of(events, "tool_result_missing")
    assert "call_lost" in (warning.message or "") and "(ls)" in (warning.message or "")
    assert warning.details["call_id"] == "call_lost"


@pytest.mark.parametrize("engine_name", ["compressor", "lcm"])
def test_a_thinking_only_turn_is_repaired_and_the_conversation_still_compacts(
    engine_name: str,
) -> None:
    from contextengine import load_engine

    options: dict[str, Any] = {"store": ":memory:"} if engine_name == "lcm" else {}
    engine = load_engine(engine_name, context_length=2_000, **options)
    history: list[Message] = [{"role": "system", "content": "s"}]
    for i in range(12):
        history += [
            {"role": "user", "content": f"question {i} " + "detail " * 60},
            {"role": "assistant", "content": None, "reasoning_content": "thinking " * 20},
            {"role": "assistant", "content": f"answer {i} " + "words " * 40},
        ]
    compacted = engine.compress(history, force=True)
    validate_messages(compacted)
    report = engine.last_compression
    assert report is not None and not getattr(report, "aborted", False)
    assert count_message_tokens(compacted) < count_message_tokens(
        [{**m, "content": m["content"] or ""} for m in history]
    )


# ---------------------------------------------------------------------- tool schemas


class SchemaEngine(RecordingEngine):
    """Returns its tool schemas in whatever shape it was given."""

    def __init__(self, schemas: Any) -> None:
        super().__init__()
        self.schemas = schemas

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return self.schemas  # type: ignore[no-any-return]  # deliberately any shape


PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}}


def test_tool_schemas_are_wrapped_named_and_unique_whatever_the_engine_returned() -> None:
    schemas = [
        {"name": "bare", "description": "a bare function", "parameters": PARAMS},
        {"type": "function", "function": {"name": "wrapped", "parameters": PARAMS}},
        {"name": "anthropic", "description": "d", "input_schema": PARAMS},
        {"description": "no name at all", "parameters": PARAMS},
        {"type": "function", "function": {"name": "  ", "parameters": PARAMS}},
        {"type": "function", "function": {"name": "bare", "description": "duplicate"}},
        "not a schema",
    ]
    host, _ = make_host(SchemaEngine(schemas))
    offered = host.tool_schemas()
    assert [s["function"]["name"] for s in offered] == ["bare", "wrapped", "anthropic"]
    assert all(s["type"] == "function" and set(s) == {"type", "function"} for s in offered)
    assert offered[0]["function"]["description"] == "a bare function"
    assert offered[2]["function"]["parameters"] == PARAMS
    assert "input_schema" not in offered[2]["function"]


@pytest.mark.parametrize("schemas", [None, "lcm_grep", {"name": "x"}], ids=["none", "str", "dict"])
def test_tool_schemas_that_are_not_a_list_offer_nothing(schemas: Any) -> None:
    host, _ = make_host(SchemaEngine(schemas))
    assert host.tool_schemas() == []


def test_a_view_changed_inside_its_tracked_part_is_counted_again_for_the_window() -> None:
    # Regression: a view rebuilt around a larger summary at index 1, its first,
    # middle and last messages the same objects as before, was sized from the
    # stale running count, and the request went out over the window (found by
    # benchmarks/reliability/sessions.py on lcm).
    system = {"role": "system", "content": "s"}
    middle = [{"role": "assistant", "content": f"step {i}"} for i in range(5)]
    last = {"role": "user", "content": "and now?"}
    small = {"role": "user", "content": "summary " * 10}
    engine = RecordingEngine(select_result=[system, small, *middle, last])
    host, _ = make_host(engine, context_length=400)
    history = [system, {"role": "user", "content": "hello"}, *middle, last]
    host.prepare_request(history)
    engine.select_result = [system, {"role": "user", "content": "summary " * 500}, *middle, last]
    engine.last_view_reused = 0
    request = host.prepare_request(history)
    assert count_message_tokens(request, "test-model") <= 400


def test_the_view_after_a_compaction_is_counted_again_for_the_window() -> None:
    # Regression: after a compaction the engine extends the view it built then
    # (last_view_reused counts from it), not the one the host tracked; with
    # the same first, middle and last messages, the host sized the new view
    # from the old one's count and sent it over the window (found on lcm by
    # benchmarks/reliability/sessions.py).
    system = {"role": "system", "content": "s"}
    middle = [{"role": "assistant", "content": f"step {i}"} for i in range(5)]
    last = {"role": "user", "content": "and now?"}
    small = {"role": "user", "content": "summary " * 10}
    engine = RecordingEngine(select_result=[system, small, *middle, last])
    host, _ = make_host(engine, context_length=400)
    # The compaction shrinks the history, so the host adopts what it returns.
    history = [system, {"role": "user", "content": "hello " * 900}, *middle, last]
    host.prepare_request(history)
    big = [system, {"role": "user", "content": "summary " * 500}, *middle, last]
    engine._compress_result = big
    history = host.compress_now(history)
    engine.select_result = big
    engine.last_view_reused = len(big)
    request = host.prepare_request(history)
    assert count_message_tokens(request, "test-model") <= 400
