"""normalize_usage: one shape for OpenAI chat, OpenAI Responses and Anthropic usage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from contextengine import normalize_usage


def _check_invariants(usage: dict[str, int]) -> None:
    assert usage["prompt_tokens"] == (
        usage["input_tokens"] + usage["cache_read_tokens"] + usage["cache_write_tokens"]
    )
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["output_tokens"] == usage["completion_tokens"]


CASES = [
    pytest.param(
        {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 1000},
            "completion_tokens_details": {"reasoning_tokens": 120},
        },
        "",
        {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "total_tokens": 1500,
            "input_tokens": 200,
            "output_tokens": 300,
            "cache_read_tokens": 1000,
            "cache_write_tokens": 0,
            "reasoning_tokens": 120,
        },
        id="openai-chat-with-cache-and-reasoning",
    ),
    pytest.param(
        {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        "",
        {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "total_tokens": 15,
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
        },
        id="openai-chat-plain",
    ),
    pytest.param(
        {
            "input_tokens": 5000,
            "output_tokens": 700,
            "total_tokens": 5700,
            "input_tokens_details": {"cached_tokens": 4096},
            "output_tokens_details": {"reasoning_tokens": 512},
        },
        "",
        {
            "prompt_tokens": 5000,
            "completion_tokens": 700,
            "total_tokens": 5700,
            "input_tokens": 904,
            "output_tokens": 700,
            "cache_read_tokens": 4096,
            "cache_write_tokens": 0,
            "reasoning_tokens": 512,
        },
        id="openai-responses",
    ),
    pytest.param(
        {
            "input_tokens": 50,
            "output_tokens": 400,
            "cache_read_input_tokens": 90_000,
            "cache_creation_input_tokens": 2_000,
        },
        "",
        {
            "prompt_tokens": 92_050,
            "completion_tokens": 400,
            "total_tokens": 92_450,
            "input_tokens": 50,
            "output_tokens": 400,
            "cache_read_tokens": 90_000,
            "cache_write_tokens": 2_000,
            "reasoning_tokens": 0,
        },
        id="anthropic-input-excludes-cache",
    ),
    pytest.param(
        {"input_tokens": 30, "output_tokens": 4},
        "anthropic",
        {
            "prompt_tokens": 30,
            "completion_tokens": 4,
            "total_tokens": 34,
            "input_tokens": 30,
            "output_tokens": 4,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 0,
        },
        id="anthropic-bare-with-provider-hint",
    ),
]


@pytest.mark.parametrize(("raw", "provider", "expected"), CASES)
def test_normalize_usage_shapes(
    raw: dict[str, Any], provider: str, expected: dict[str, int]
) -> None:
    usage = normalize_usage(raw, provider=provider)
    assert usage == expected
    _check_invariants(usage)


@pytest.mark.parametrize("raw", [None, {}, pytest.param(object(), id="opaque-object")])
def test_empty_usage_gives_zeros(raw: Any) -> None:
    usage = normalize_usage(raw)
    assert set(usage.values()) == {0}
    assert "prompt_tokens" in usage and "total_tokens" in usage


@dataclass
class PromptDetails:
    cached_tokens: int


@dataclass
class SdkUsage:
    """Shaped like the openai SDK's CompletionUsage object."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptDetails | None = None


class PydanticLike:
    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def model_dump(self) -> dict[str, Any]:
        return dict(self._fields)


def test_sdk_objects_are_accepted() -> None:
    usage = normalize_usage(SdkUsage(100, 10, 110, PromptDetails(cached_tokens=64)))
    assert usage["cache_read_tokens"] == 64
    assert usage["input_tokens"] == 36
    anthropic = normalize_usage(
        PydanticLike(input_tokens=3, output_tokens=7, cache_read_input_tokens=500)
    )
    assert anthropic["prompt_tokens"] == 503
    _check_invariants(anthropic)


def test_garbage_values_become_zero_not_exceptions() -> None:
    usage = normalize_usage({"prompt_tokens": None, "completion_tokens": "12", "total_tokens": -3})
    assert usage["prompt_tokens"] == 0
    assert usage["completion_tokens"] == 12
    _check_invariants(usage)


def test_cached_tokens_larger_than_prompt_are_clamped() -> None:
    usage = normalize_usage({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 50}})
    assert usage["cache_read_tokens"] == 10
    assert usage["input_tokens"] == 0
    _check_invariants(usage)
