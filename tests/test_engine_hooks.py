"""The ContextEngine contract: every optional hook's default and the contract helpers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextengine import (
    ContextEngine,
    automatic_compaction_status_message,
    call_with_supported_kwargs,
    sanitize_memory_context,
)

Message = dict[str, Any]


class MinimalEngine(ContextEngine):
    """Implements only the four abstract members, as a third-party engine might."""

    @property
    def name(self) -> str:
        return "minimal"

    def update_from_response(self, usage: dict[str, Any]) -> None:
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return tokens >= self.threshold_tokens > 0

    def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[Message]:
        return messages[-1:]


MESSAGES: list[Message] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
]


def test_abstract_members_are_required() -> None:
    class Incomplete(ContextEngine):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()  # type: ignore[abstract]


def test_token_state_and_class_defaults() -> None:
    engine = MinimalEngine()
    assert (
        engine.last_prompt_tokens,
        engine.last_completion_tokens,
        engine.last_total_tokens,
        engine.threshold_tokens,
        engine.context_length,
        engine.compression_count,
    ) == (0, 0, 0, 0, 0, 0)
    assert engine.threshold_percent == 0.75
    assert engine.protect_first_n == 3
    assert engine.protect_last_n == 6
    assert engine.emit_automatic_compaction_status is True


def test_should_compress_info_defaults_to_should_compress_without_reason() -> None:
    engine = MinimalEngine()
    engine.update_model("m", 1000)
    assert engine.should_compress_info(800) == (True, None)
    assert engine.should_compress_info(10) == (False, None)


def test_decision_hook_defaults() -> None:
    engine = MinimalEngine()
    assert engine.should_compress_preflight(MESSAGES) is False
    assert engine.should_defer_preflight_to_real_usage(10**6) is False
    assert engine.has_content_to_compress(MESSAGES) is True


def test_prune_default_returns_the_very_same_list_and_zero() -> None:
    engine = MinimalEngine()
    result, reclaimed = engine.prune_tool_results_only(MESSAGES, current_tokens=5)
    assert result is MESSAGES
    assert reclaimed == 0


def test_select_context_default_leaves_the_request_alone() -> None:
    engine = MinimalEngine()
    selected = engine.select_context(
        MESSAGES, conversation_messages=MESSAGES, incoming_message=MESSAGES[-1], budget_tokens=9
    )
    assert selected is None


def test_observation_hooks_default_to_nothing() -> None:
    engine = MinimalEngine()
    engine.on_session_start("s1", platform="cli")
    engine.on_turn_complete(MESSAGES, None, turn_id=1, interrupted=True)
    engine.on_session_end("s1", MESSAGES)
    assert engine.get_automatic_compaction_status_message(phase="auto", default_message="x") is None


def test_session_reset_zeroes_last_tokens_and_compression_count() -> None:
    engine = MinimalEngine()
    engine.update_model("m", 1000)
    engine.last_prompt_tokens = 900
    engine.last_completion_tokens = 50
    engine.last_total_tokens = 950
    engine.compression_count = 4
    engine.on_session_reset()
    assert engine.last_prompt_tokens == 0
    assert engine.last_completion_tokens == 0
    assert engine.last_total_tokens == 0
    assert engine.compression_count == 0
    # The model configuration survives a reset: only conversation state goes.
    assert engine.threshold_tokens == 750


def test_tool_defaults() -> None:
    engine = MinimalEngine()
    assert engine.get_tool_schemas() == []
    result = engine.handle_tool_call("lcm_grep", {"query": "x"})
    assert json.loads(result) == {"error": "Unknown context engine tool: lcm_grep"}


@pytest.mark.parametrize(
    ("last_prompt", "expected_tokens", "expected_percent"),
    [
        pytest.param(500, 500, 50.0, id="half"),
        pytest.param(-1, 0, 0.0, id="negative-after-compaction-reported-as-zero"),
        pytest.param(5000, 5000, 100.0, id="over-the-window-capped-at-100"),
    ],
)
def test_get_status(last_prompt: int, expected_tokens: int, expected_percent: float) -> None:
    engine = MinimalEngine()
    engine.update_model("m", 1000)
    engine.last_prompt_tokens = last_prompt
    engine.compression_count = 2
    assert engine.get_status() == {
        "last_prompt_tokens": expected_tokens,
        "threshold_tokens": 750,
        "context_length": 1000,
        "usage_percent": expected_percent,
        "compression_count": 2,
    }


def test_get_status_without_a_model_does_not_divide_by_zero() -> None:
    assert MinimalEngine().get_status()["usage_percent"] == 0.0


def test_update_model_recomputes_threshold() -> None:
    engine = MinimalEngine()
    engine.update_model("gpt-4o", 128_000)
    assert engine.threshold_tokens == 96_000
    assert engine.context_length == 128_000
    assert engine.model == "gpt-4o"


def test_model_thresholds_longest_match_wins_and_switching_back_restores() -> None:
    engine = MinimalEngine()
    engine.threshold_percent = 0.8
    engine.model_thresholds = {"claude": 0.5, "claude-opus": 0.6, "": 0.1}
    engine.update_model("claude-opus-4", 200_000)
    assert engine.threshold_tokens == 120_000
    engine.update_model("claude-haiku", 200_000)
    assert engine.threshold_tokens == 100_000
    # Back to an unmatched model: the configured 0.8, not the last override.
    engine.update_model("gpt-4o", 100_000)
    assert engine.threshold_tokens == 80_000
    assert engine.threshold_percent == 0.8


def test_instances_do_not_share_model_thresholds() -> None:
    first, second = MinimalEngine(), MinimalEngine()
    first.model_thresholds = {"gpt": 0.5}
    second.update_model("gpt-4o", 1000)
    assert second.threshold_tokens == 750


class QuietEngine(MinimalEngine):
    emit_automatic_compaction_status = False


class CustomLineEngine(MinimalEngine):
    def __init__(self, line: str | None) -> None:
        self.line = line

    def get_automatic_compaction_status_message(
        self, *, phase: str, default_message: str, **context: Any
    ) -> str | None:
        return self.line


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        pytest.param(MinimalEngine(), "Compacted 9k -> 3k tokens", id="default-line"),
        pytest.param(QuietEngine(), None, id="quiet-engine-silent"),
        pytest.param(
            CustomLineEngine("lcm: archived 40 msgs"), "lcm: archived 40 msgs", id="custom"
        ),
        pytest.param(CustomLineEngine(None), "Compacted 9k -> 3k tokens", id="none-means-default"),
        pytest.param(CustomLineEngine(""), None, id="empty-means-silent"),
        pytest.param(CustomLineEngine("   \n"), None, id="blank-means-silent"),
    ],
)
def test_automatic_compaction_status_message(engine: ContextEngine, expected: str | None) -> None:
    line = automatic_compaction_status_message(
        engine, phase="auto", default_message="Compacted 9k -> 3k tokens", tokens_before=9000
    )
    assert line == expected


class OldSignatureEngine(MinimalEngine):
    """Written against the first contract: compress(messages, current_tokens=None)."""

    def __init__(self) -> None:
        self.received: list[tuple[int, int | None]] = []

    def compress(  # type: ignore[override]  # the old contract, on purpose
        self, messages: list[Message], current_tokens: int | None = None
    ) -> list[Message]:
        self.received.append((len(messages), current_tokens))
        return messages


def test_call_with_supported_kwargs_drops_what_an_old_engine_does_not_accept() -> None:
    engine = OldSignatureEngine()
    result = call_with_supported_kwargs(
        engine.compress,
        MESSAGES,
        current_tokens=123,
        focus_topic="auth",
        force=True,
        memory_context="user prefers tabs",
    )
    assert result == MESSAGES
    assert engine.received == [(2, 123)]


def test_call_with_supported_kwargs_passes_everything_to_var_keyword() -> None:
    seen: dict[str, Any] = {}

    def hook(messages: list[Message], **kwargs: Any) -> None:
        seen.update(kwargs)

    call_with_supported_kwargs(hook, MESSAGES, turn_id=3, interrupted=False)
    assert seen == {"turn_id": 3, "interrupted": False}


def test_call_with_supported_kwargs_keeps_keyword_only_parameters() -> None:
    def hook(messages: list[Message], *, budget_tokens: int = 0) -> int:
        return budget_tokens

    assert call_with_supported_kwargs(hook, MESSAGES, budget_tokens=7, unknown=1) == 7


def test_call_with_supported_kwargs_propagates_after_exactly_one_call() -> None:
    calls = []

    def failing(messages: list[Message], current_tokens: int | None = None) -> None:
        calls.append(current_tokens)
        raise TypeError("inside the engine")

    with pytest.raises(TypeError, match="inside the engine"):
        call_with_supported_kwargs(failing, MESSAGES, current_tokens=1, force=True)
    assert calls == [1]


def test_call_with_supported_kwargs_on_uninspectable_callable_passes_all() -> None:
    # dict.get cannot take keywords; an uninspectable builtin gets them all and fails loudly.
    assert call_with_supported_kwargs(max, [1, 5, 3]) == 5


def test_sanitize_memory_context_strips_and_redacts() -> None:
    text = "  The user's key is api_key=sk-proj-abcdefghijklmnopqrstuvwxyz123456  \n"
    cleaned = sanitize_memory_context(text)
    assert cleaned.startswith("The user's key is")
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz123456" not in cleaned
    assert not cleaned.endswith("\n")


def test_sanitize_memory_context_bounds_long_text_keeping_head_and_tail() -> None:
    text = "H" * 5000 + "M" * 5000 + "T" * 2000
    cleaned = sanitize_memory_context(text)
    assert len(cleaned) <= 6000
    assert cleaned.startswith("H" * 4000)
    assert cleaned.endswith("T" * 1500)
    assert "truncated" in cleaned


def test_sanitize_memory_context_keeps_short_text_whole() -> None:
    assert sanitize_memory_context("prefers pytest over unittest") == "prefers pytest over unittest"
    assert sanitize_memory_context("") == ""
