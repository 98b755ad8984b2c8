"""Anthropic Messages as the relay sees it (``POST /v1/messages``).

Requests are converted with :func:`~contextengine.from_anthropic` /
:func:`~contextengine.to_anthropic`. The upstream body carries prompt-cache
breakpoints (``cache_control``) on the view: the last system block, and the
last block of the last message, the whole conversation so far, which the
next request of the session repeats and extends.

A stream is ``message_start``, then for each content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop``,
then ``message_delta`` (stop reason, output usage) and ``message_stop``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from contextengine.anthropic_format import from_anthropic, to_anthropic
from contextengine.prompt_cache import CACHE_CONTROL
from contextengine.relay.wire import Message, StreamEvent, StreamState, WireFormat

__all__ = ["AnthropicWire"]


def _anthropic_tool(schema: dict[str, Any]) -> dict[str, Any]:
    function = schema.get("function") or schema
    return {
        "name": function.get("name", ""),
        "description": function.get("description", ""),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }


def _marked_last(blocks: list[Any]) -> list[Any]:
    """``blocks`` (copied) with a cache breakpoint on the last one that can hold it."""
    out = list(blocks)
    for i in range(len(out) - 1, -1, -1):
        block = out[i]
        # Thinking blocks cannot carry cache_control; the breakpoint goes before them.
        if isinstance(block, dict) and block.get("type") not in ("thinking", "redacted_thinking"):
            out[i] = {**block, "cache_control": dict(CACHE_CONTROL)}
            break
    return out


@dataclass
class AnthropicStream(StreamState):
    """A streamed message: its content blocks by index, stop reason and usage."""

    _start: dict[str, Any] = field(default_factory=dict, init=False)
    _blocks: dict[int, dict[str, Any]] = field(default_factory=dict, init=False)
    _json: dict[int, list[str]] = field(default_factory=dict, init=False)
    _stop_reason: str | None = field(default=None, init=False)
    # Upstream block index -> the client's (None: an engine call, hidden).
    _index: dict[int, int | None] = field(default_factory=dict, init=False)
    _hidden: int = field(default=0, init=False)

    def feed(self, event: StreamEvent) -> None:
        data = event.data or {}
        kind = data.get("type")
        if kind == "message_start":
            self._start = dict(data.get("message") or {})
            self.usage = dict(self._start.get("usage") or {})
        elif kind == "content_block_start":
            index = int(data.get("index", 0))
            self._blocks[index] = copy.deepcopy(data.get("content_block") or {})
            if self._blocks[index].get("type") == "tool_use":
                self._json[index] = []
        elif kind == "content_block_delta":
            block = self._blocks.setdefault(int(data.get("index", 0)), {"type": "text"})
            delta = data.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text", ""))
            elif dtype == "input_json_delta":
                self._json.setdefault(int(data.get("index", 0)), []).append(
                    str(delta.get("partial_json", ""))
                )
            elif dtype == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
            elif dtype == "signature_delta":
                block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self._stop_reason = delta.get("stop_reason") or self._stop_reason
            if isinstance(data.get("usage"), dict):
                self.usage = {**(self.usage or {}), **data["usage"]}

    def intent(self, event: StreamEvent) -> str | None:
        data = event.data or {}
        kind = data.get("type")
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                return f"call:{block.get('name', '')}"
            if block.get("type") == "text" and block.get("text"):
                return "text"
        if kind == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return "text"
        return None

    def filter(self, event: StreamEvent) -> StreamEvent | None:
        data = event.data or {}
        kind = data.get("type")
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            index = int(data.get("index", 0))
            if kind == "content_block_start":
                block = data.get("content_block") or {}
                hidden = block.get("type") == "tool_use" and block.get("name") in self.engine_tools
                if hidden:
                    self._index[index] = None
                    self._hidden += 1
                else:
                    self._index[index] = index - self._hidden
                    if block.get("type") == "tool_use":
                        self._client_calls += 1
            mapped = self._index.get(index, index)
            if mapped is None:
                return None
            if mapped != index:
                return event.changed({**data, "index": mapped})
            return event
        if kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason") == "tool_use" and self._hidden and not self._client_calls:
                return event.changed({**data, "delta": {**delta, "stop_reason": "end_turn"}})
        return event

    def message(self) -> Message:
        content: list[dict[str, Any]] = []
        for index, block in sorted(self._blocks.items()):
            block = dict(block)
            if block.get("type") == "tool_use":
                raw = "".join(self._json.get(index, []))
                try:
                    block["input"] = json.loads(raw) if raw.strip() else block.get("input") or {}
                except ValueError:
                    block["input"] = {"_raw": raw}
            content.append(block)
        return from_anthropic([{"role": "assistant", "content": content}])[0]


class AnthropicWire(WireFormat):
    """Anthropic Messages."""

    provider = "anthropic"

    def messages(self, body: dict[str, Any]) -> list[Message]:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ValueError("the request has no 'messages' list")
        return from_anthropic(messages, body.get("system"))

    def session_hint(self, body: dict[str, Any]) -> str | None:
        metadata = body.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        return user if isinstance(user, str) and user else None

    def client_tool_names(self, body: dict[str, Any]) -> set[str]:
        return {
            str(t.get("name") or "") for t in body.get("tools") or [] if isinstance(t, dict)
        } - {""}

    def _tools(self, body: dict[str, Any], engine_tools: list[dict[str, Any]]) -> list[Any]:
        taken = self.client_tool_names(body)
        mine = [_anthropic_tool(t) for t in engine_tools]
        return list(body.get("tools") or []) + [t for t in mine if t["name"] not in taken]

    def counted_tools(self, body: dict[str, Any], engine_tools: list[dict[str, Any]]) -> list[Any]:
        return self._tools(body, engine_tools)

    def upstream_body(
        self,
        body: dict[str, Any],
        view: list[Message],
        engine_tools: list[dict[str, Any]],
        *,
        last_round: bool,
    ) -> dict[str, Any]:
        system, messages = to_anthropic(view)
        out = {k: v for k, v in body.items() if k not in ("messages", "system", "tools")}
        tools = self._tools(body, engine_tools)
        if tools:
            out["tools"] = tools
            if last_round:
                out["tool_choice"] = {"type": "none"}
        if system:
            out["system"] = [{"type": "text", "text": system, "cache_control": dict(CACHE_CONTROL)}]
        if messages:
            last = messages[-1]
            messages[-1] = {**last, "content": _marked_last(last["content"])}
        out["messages"] = messages
        return out

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in body.items() if k != "messages"}
        out["stream"] = True
        out["messages"] = body.get("messages")
        return out

    def reply_message(self, data: dict[str, Any]) -> Message:
        content = data.get("content")
        if not isinstance(content, list):
            raise ValueError("the upstream answer has no content list")
        return from_anthropic([{"role": "assistant", "content": content}])[0]

    def reply_usage(self, data: dict[str, Any]) -> dict[str, Any] | None:
        usage = data.get("usage")
        return usage if isinstance(usage, dict) else None

    def without_calls(self, data: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = copy.deepcopy(data)
        content = [
            block
            for block in out.get("content") or []
            if not (block.get("type") == "tool_use" and block.get("name") in names)
        ]
        out["content"] = content
        if out.get("stop_reason") == "tool_use" and not any(
            block.get("type") == "tool_use" for block in content
        ):
            out["stop_reason"] = "end_turn"
        return out

    def stream_state(self, body: dict[str, Any], engine_tools: frozenset[str]) -> StreamState:
        return AnthropicStream(engine_tools=engine_tools)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
