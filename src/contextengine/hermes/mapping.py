"""The values that cross between Hermes and our contract: usage reports and tool schemas.

Pure functions, no Hermes import: both adapters (ours inside Hermes, Hermes's
on our host) use them, and the tests check them without Hermes installed.

* **Usage.** Hermes hands an engine a flat dict: the legacy
  ``prompt_tokens`` / ``completion_tokens`` / ``total_tokens`` and, from newer
  hosts, the buckets ``input_tokens``, ``output_tokens``,
  ``cache_read_tokens``, ``cache_write_tokens``, ``reasoning_tokens``
  (``agent/conversation_loop.py``, the ``usage_dict`` given to
  ``update_from_response``). Our :func:`~contextengine.normalize_usage` reads
  provider shapes, where cached tokens sit in ``prompt_tokens_details``;
  :func:`usage_from_hermes` moves them there. The other way needs nothing:
  ``normalize_usage`` already returns Hermes's flat keys.
* **Tool schemas.** Hermes engines return bare function schemas
  (``{"name", "description", "parameters"}``) and Hermes wraps them
  (``agent/agent_init.py``); ours return OpenAI tool entries
  (``{"type": "function", "function": {...}}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TOKEN_FIELDS", "bare_tool_schema", "usage_from_hermes", "wrapped_tool_schema"]

#: The integer state Hermes reads (and partly writes) on an engine object: each
#: adapter forwards these attributes to the engine it wraps.
TOKEN_FIELDS = (
    "last_prompt_tokens",
    "last_completion_tokens",
    "last_total_tokens",
    "threshold_tokens",
    "context_length",
    "compression_count",
    "threshold_percent",
    "protect_first_n",
    "protect_last_n",
)


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def usage_from_hermes(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Hermes's flat usage dict as an OpenAI chat-completions usage report.

    Cache reads and writes move into ``prompt_tokens_details`` and reasoning
    into ``completion_tokens_details``, where
    :func:`~contextengine.normalize_usage` finds them. A dict that already has
    the provider shape passes through unchanged; None or ``{}`` gives ``{}``.
    """
    if not usage:
        return {}
    if "prompt_tokens_details" in usage or "cache_read_input_tokens" in usage:
        return dict(usage)
    prompt = _int(usage.get("prompt_tokens"))
    if not prompt and "input_tokens" in usage:
        # A host that sends only the buckets: the prompt is all of its input.
        prompt = sum(
            _int(usage.get(k)) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
        )
    completion = _int(usage.get("completion_tokens", usage.get("output_tokens")))
    report: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": _int(usage.get("total_tokens")) or prompt + completion,
    }
    cache_read = min(prompt, _int(usage.get("cache_read_tokens")))
    cache_write = min(prompt - cache_read, _int(usage.get("cache_write_tokens")))
    if cache_read or cache_write:
        report["prompt_tokens_details"] = {
            "cached_tokens": cache_read,
            "cache_write_tokens": cache_write,
        }
    reasoning = _int(usage.get("reasoning_tokens"))
    if reasoning:
        report["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return report


def bare_tool_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The function schema inside an OpenAI tool entry (a bare one is returned as is)."""
    function = schema.get("function")
    if schema.get("type") == "function" and isinstance(function, Mapping):
        return dict(function)
    return dict(schema)


def wrapped_tool_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A bare function schema as an OpenAI tool entry (a wrapped one is returned as is).

    Raises ValueError naming the schema when it has no ``name``: a nameless
    tool makes strict providers reject the whole request.
    """
    bare = bare_tool_schema(schema)
    name = bare.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"tool schema has no name: {dict(schema)!r}")
    return {"type": "function", "function": bare}
