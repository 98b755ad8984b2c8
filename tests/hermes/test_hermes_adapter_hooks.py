"""The adapter that makes our engines Hermes engines, hook by hook, against the installed ABC.

The whole loop is in test_hermes_loop.py; these pin the mapping of each hook
(what Hermes passes, what our engine receives) and what ``contextengine
engines`` reports as unavailable for the installed release.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from contextengine import ContextEngine, load_engine
from contextengine.hermes import hermes_version, make_hermes_engine, unavailable_hooks
from contextengine.testing import RecordingEngine

HERMES_USAGE = {
    "prompt_tokens": 1_000,
    "completion_tokens": 40,
    "total_tokens": 1_040,
    "input_tokens": 300,
    "output_tokens": 40,
    "cache_read_tokens": 700,
    "cache_write_tokens": 0,
    "reasoning_tokens": 0,
}


def _adapter(engine: ContextEngine) -> Any:
    return make_hermes_engine(lambda: engine, name="contextengine-test")


def _calls(engine: RecordingEngine, hook: str) -> list[dict[str, Any]]:
    return [args for name, args in engine.calls if name == hook]


def test_the_adapter_is_an_instance_of_hermes_abc() -> None:
    from agent.context_engine import ContextEngine as HermesContextEngine

    adapter = _adapter(RecordingEngine())
    assert isinstance(adapter, HermesContextEngine)
    assert adapter.name == "contextengine-test"


def test_usage_reaches_our_engine_in_the_provider_shape_and_empty_usage_does_not() -> None:
    engine = RecordingEngine()
    adapter = _adapter(engine)
    adapter.update_from_response(HERMES_USAGE)
    adapter.update_from_response({})
    (call,) = _calls(engine, "update_from_response")
    assert call["usage"]["prompt_tokens_details"]["cached_tokens"] == 700


def test_token_fields_are_one_value_seen_from_both_sides() -> None:
    engine = load_engine("lcm", context_length=100_000, store=":memory:")
    adapter = _adapter(engine)
    adapter.update_model("m", 100_000)
    assert adapter.threshold_tokens == engine.threshold_tokens == 75_000
    adapter.last_prompt_tokens = -1  # what Hermes writes after a compaction
    assert engine.last_prompt_tokens == -1


def test_a_failing_compress_returns_the_input_and_tells_hermes_why() -> None:
    def boom(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise RuntimeError("summariser down")

    adapter = _adapter(RecordingEngine(compress_result=boom))
    history = [{"role": "user", "content": "hello"}]
    assert adapter.compress(history, force=True) is history
    assert adapter._last_compress_aborted is True
    assert "summariser down" in adapter._last_summary_error


def test_compress_passes_hermes_keywords_and_reports_progress() -> None:
    engine = RecordingEngine()
    adapter = _adapter(engine)
    history = [{"role": "system", "content": "s"}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(12)
    ]
    out = adapter.compress(history, 900, "the bug", True, "memory note")
    assert len(out) < len(history)
    (call,) = _calls(engine, "compress")
    assert (call["focus_topic"], call["force"], call["memory_context"]) == (
        "the bug",
        True,
        "memory note",
    )


def test_a_deep_copy_is_a_fresh_engine_from_the_same_factory() -> None:
    built: list[ContextEngine] = []

    def factory() -> ContextEngine:
        built.append(load_engine("lcm", context_length=100_000, store=":memory:"))
        return built[-1]

    adapter = make_hermes_engine(factory, name="contextengine-lcm")
    twin = copy.deepcopy(adapter)
    assert twin.name == adapter.name
    assert twin.engine is not adapter.engine and len(built) == 2


def test_lcm_tools_are_bare_schemas_and_answer_json() -> None:
    adapter = _adapter(load_engine("lcm", context_length=100_000, store=":memory:"))
    adapter.on_session_start("s1", platform="cli")
    names = [schema["name"] for schema in adapter.get_tool_schemas()]
    assert names == ["lcm_grep", "lcm_describe", "lcm_expand"]
    history = [{"role": "user", "content": "the port is 8443"}]
    answer = json.loads(adapter.handle_tool_call("lcm_grep", {"query": "8443"}, messages=history))
    assert answer["results"][0]["role"] == "user"


def test_the_cooldown_reaches_hermes_in_its_own_shape() -> None:
    engine = load_engine("lcm", context_length=100_000, store=":memory:")
    adapter = _adapter(engine)
    assert adapter.get_active_compression_failure_cooldown() is None
    engine.failure_policy.summarizer_failed("timeout", "the summariser timed out")
    engine.on_session_start("s1")
    engine.select_context([{"role": "user", "content": "x " * 80_000}])
    cooldown = adapter.get_active_compression_failure_cooldown()
    assert cooldown is not None and cooldown["remaining_seconds"] > 0


@pytest.mark.skipif(hermes_version() != "0.19.0", reason="the list is per Hermes release")
def test_what_hermes_0_19_never_calls_is_reported() -> None:
    assert unavailable_hooks() == [
        "should_compress_preflight",
        "select_context",
        "prune_tool_results_only",
        "plan_compression",
        "get_status",
        "is_own_message",
        "recovery_hint",
        "chat_commands",
        "get_automatic_compaction_status_message",
    ]


def test_engines_command_lists_hermes_and_what_is_unavailable() -> None:
    from click.testing import CliRunner

    from contextengine.cli.engines_cmd import engines

    result = CliRunner().invoke(engines, [])
    assert result.exit_code == 0, result.output
    assert "hermes " in result.output
    assert f"hermes-agent {hermes_version()} is installed" in result.output
    inside = next(line for line in result.output.splitlines() if "Hermes never calls" in line)
    assert "select_context" in inside and "compress," not in inside
    rows = json.loads(CliRunner().invoke(engines, ["--json"]).output)
    (row,) = [r for r in rows if r["name"] == "hermes"]
    assert "select_context" in row["unavailable_in_hermes"]
    assert "keep_last" not in row["unavailable_on_host"]  # an argument, not a hook
    assert "on_turn_complete" in row["unavailable_on_host"]
