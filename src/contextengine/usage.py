"""Normalising provider usage reports into one shape.

Providers report token usage in three incompatible shapes, and they disagree on
what "input" means:

* OpenAI chat completions: ``prompt_tokens`` *includes* cached tokens, which
  ``prompt_tokens_details.cached_tokens`` breaks out.
* OpenAI Responses: ``input_tokens`` / ``output_tokens``, with
  ``input_tokens_details.cached_tokens`` (also included in ``input_tokens``).
* Anthropic: ``input_tokens`` *excludes* cached tokens, which come in
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.

:func:`normalize_usage` returns one dict in which the buckets add up the same
way for every provider, so an engine can compare a prompt size against its
threshold without knowing who served the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["USAGE_KEYS", "normalize_usage"]

#: The keys every normalised usage dict holds.
USAGE_KEYS = (
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def _as_mapping(raw: Any) -> Mapping[str, Any]:
    """Turn a usage dict or SDK object (pydantic model, dataclass, plain object) into a mapping."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return raw
    for method in ("model_dump", "dict", "to_dict"):
        dump = getattr(raw, method, None)
        if callable(dump):
            try:
                result = dump()
            except TypeError:
                continue
            if isinstance(result, Mapping):
                return result
    if hasattr(raw, "__dict__"):
        return {k: v for k, v in vars(raw).items() if not k.startswith("_")}
    return {}


def _int(value: Any) -> int:
    """A token count from a field that may be missing, None, a float or a numeric string."""
    if value is None or isinstance(value, bool):
        return 0
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _detail(usage: Mapping[str, Any], container: str, key: str) -> int:
    return _int(_as_mapping(usage.get(container)).get(key))


def _detect_shape(usage: Mapping[str, Any], provider: str) -> str:
    hint = provider.lower()
    if "anthropic" in hint or "claude" in hint:
        return "anthropic"
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        return "anthropic"
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return "chat"
    if "input_tokens_details" in usage or "output_tokens_details" in usage:
        return "responses"
    if "input_tokens" in usage or "output_tokens" in usage:
        # Bare input/output with no cache keys: both Responses and Anthropic use
        # these names; Responses is the OpenAI default, Anthropic needs the hint.
        return "responses" if hint in ("", "openai", "responses") else "anthropic"
    return "chat"


def normalize_usage(raw: Any, *, provider: str = "") -> dict[str, int]:
    """Normalise a provider usage report (dict or SDK object) into one shape.

    Returns the legacy keys ``prompt_tokens``, ``completion_tokens``,
    ``total_tokens`` and the canonical buckets ``input_tokens`` (uncached input
    only), ``output_tokens``, ``cache_read_tokens``, ``cache_write_tokens`` and
    ``reasoning_tokens``. For every shape::

        prompt_tokens == input_tokens + cache_read_tokens + cache_write_tokens
        total_tokens == prompt_tokens + completion_tokens

    The shape is recognised from the keys; ``provider`` ("openai",
    "anthropic", ...) settles the one ambiguous case, a bare
    ``input_tokens``/``output_tokens`` pair. Empty or None usage gives zeros.
    """
    usage = _as_mapping(raw)
    shape = _detect_shape(usage, provider)
    if shape == "anthropic":
        uncached = _int(usage.get("input_tokens"))
        cache_read = _int(usage.get("cache_read_input_tokens"))
        cache_write = _int(usage.get("cache_creation_input_tokens"))
        output = _int(usage.get("output_tokens"))
        reasoning = 0
    elif shape == "responses":
        prompt = _int(usage.get("input_tokens"))
        cache_read = min(prompt, _detail(usage, "input_tokens_details", "cached_tokens"))
        cache_write = 0
        uncached = prompt - cache_read
        output = _int(usage.get("output_tokens"))
        reasoning = _detail(usage, "output_tokens_details", "reasoning_tokens")
    else:
        prompt = _int(usage.get("prompt_tokens"))
        cache_read = min(prompt, _detail(usage, "prompt_tokens_details", "cached_tokens"))
        # Some OpenAI-compatible gateways report Anthropic-style cache writes
        # inside the chat shape; they are part of prompt_tokens there too.
        cache_write = min(
            prompt - cache_read, _detail(usage, "prompt_tokens_details", "cache_write_tokens")
        )
        uncached = prompt - cache_read - cache_write
        output = _int(usage.get("completion_tokens"))
        reasoning = _detail(usage, "completion_tokens_details", "reasoning_tokens")
    prompt_tokens = uncached + cache_read + cache_write
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": output,
        "total_tokens": prompt_tokens + output,
        "input_tokens": uncached,
        "output_tokens": output,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": reasoning,
    }
