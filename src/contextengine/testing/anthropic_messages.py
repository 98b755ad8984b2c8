"""The scripted server's Anthropic Messages side: a scripted reply as a message or its events.

:class:`~contextengine.testing.ScriptedOpenAIServer` answers ``POST /v1/messages``
from the same script as chat completions; these functions render a reply the
way the Anthropic API does: a ``message`` object (text, ``thinking`` and
``tool_use`` blocks, ``stop_reason``, ``usage`` with ``input_tokens`` counted
on the request), or the event sequence of a stream: ``message_start``, then per
block ``content_block_start`` / ``content_block_delta``... /
``content_block_stop``, then ``message_delta`` and ``message_stop``.
"""

from __future__ import annotations

import json
from typing import Any

from contextengine.anthropic_format import from_anthropic
from contextengine.tokens import count_message_tokens, count_tokens

__all__ = ["MESSAGES_PATHS", "anthropic_error", "anthropic_events", "anthropic_message"]

MESSAGES_PATHS = ("/v1/messages", "/messages")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error(message: str, status: int) -> dict[str, Any]:
    """An Anthropic error body."""
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _blocks(
    content: str | None, tool_calls: list[dict[str, Any]] | None, reasoning: str | None
) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": "scripted"})
    if content:
        blocks.append({"type": "text", "text": content})
    for call in tool_calls or []:
        function = call["function"]
        try:
            arguments = json.loads(function["arguments"] or "{}")
        except ValueError:
            arguments = {"_raw": function["arguments"]}
        blocks.append(
            {"type": "tool_use", "id": call["id"], "name": function["name"], "input": arguments}
        )
    return blocks


def _usage(body: dict[str, Any], blocks: list[dict[str, Any]], given: Any) -> dict[str, Any]:
    if isinstance(given, dict):
        return dict(given)
    model = body.get("model") if isinstance(body.get("model"), str) else None
    try:
        prompt = count_message_tokens(
            from_anthropic(body.get("messages") or [], body.get("system")), model
        )
    except Exception:  # a test double must answer even odd requests
        prompt = 0
    output = sum(
        count_tokens(str(b.get("text") or b.get("thinking") or json.dumps(b.get("input"))), model)
        for b in blocks
    )
    return {
        "input_tokens": prompt,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def anthropic_message(
    body: dict[str, Any],
    message_id: str,
    model: str,
    *,
    content: str | None,
    tool_calls: list[dict[str, Any]] | None,
    reasoning: str | None,
    usage: Any = None,
) -> dict[str, Any]:
    """The whole ``message`` answering ``body``."""
    blocks = _blocks(content, tool_calls, reasoning)
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or model,
        "content": blocks,
        "stop_reason": "tool_use" if tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": _usage(body, blocks, usage),
    }


def _text_pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [word + (" " if i < len(words) - 1 else "") for i, word in enumerate(words) if word]


def anthropic_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (event name, data) sequence streaming ``message`` (from :func:`anthropic_message`)."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        if kind == "text":
            head: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _text_pieces(block["text"])]
        elif kind == "thinking":
            head = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]}]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[i : i + 16]}
                for i in range(0, len(raw), 16)
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": head},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events
