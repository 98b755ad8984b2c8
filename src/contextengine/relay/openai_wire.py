"""OpenAI Chat Completions as the relay sees it (``POST /v1/chat/completions``).

Our messages are already this format, so a request's ``messages`` are taken
as they are. Streams are ``chat.completion.chunk`` events; tool calls arrive
as ``delta.tool_calls`` entries keyed by ``index``, the first of each carrying
the call's id and function name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from contextengine.relay.wire import Message, StreamEvent, StreamState, WireFormat

__all__ = ["OpenAIWire"]

# The fields of an assistant message the history keeps; the rest (annotations,
# audio, refusal: None...) are response decoration a request does not take back.
_MESSAGE_KEYS = ("role", "content", "tool_calls", "reasoning_content", "name", "refusal")


def _assistant(message: dict[str, Any]) -> Message:
    kept: Message = {k: message[k] for k in _MESSAGE_KEYS if message.get(k) is not None}
    kept["role"] = "assistant"
    if "content" not in kept:
        kept["content"] = None if kept.get("tool_calls") else ""
    return kept


def _function_name(tool: Any) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict):
            return str(function.get("name") or "")
        return str(tool.get("name") or "")
    return ""


@dataclass
class _Parts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class OpenAIStream(StreamState):
    """A streamed chat completion: text, reasoning and tool calls by index."""

    _text: list[str] = field(default_factory=list, init=False)
    _reasoning: list[str] = field(default_factory=list, init=False)
    _calls: dict[int, _Parts] = field(default_factory=dict, init=False)
    # Upstream index -> the index the client sees (None: an engine call, hidden).
    _index: dict[int, int | None] = field(default_factory=dict, init=False)

    @staticmethod
    def _delta(event: StreamEvent) -> dict[str, Any]:
        choices = (event.data or {}).get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        delta = first.get("delta")
        return delta if isinstance(delta, dict) else {}

    def feed(self, event: StreamEvent) -> None:
        data = event.data or {}
        if data.get("usage"):
            self.usage = data["usage"]
        delta = self._delta(event)
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        if isinstance(delta.get("reasoning_content"), str):
            self._reasoning.append(delta["reasoning_content"])
        for call in delta.get("tool_calls") or []:
            parts = self._calls.setdefault(int(call.get("index", 0)), _Parts())
            parts.id = call.get("id") or parts.id
            function = call.get("function") or {}
            parts.name = function.get("name") or parts.name
            if function.get("arguments"):
                parts.arguments.append(function["arguments"])

    def intent(self, event: StreamEvent) -> str | None:
        delta = self._delta(event)
        for call in delta.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name")
            if name:
                return f"call:{name}"
        if isinstance(delta.get("content"), str) and delta["content"]:
            return "text"
        return None

    def filter(self, event: StreamEvent) -> StreamEvent | None:
        data = event.data
        if data is None:
            return event  # [DONE]
        changed = False
        if not self.client_wants_usage and "usage" in data:
            if not data.get("choices"):
                return None  # the usage chunk the relay asked for, not the client
            data = {k: v for k, v in data.items() if k != "usage"}
            changed = True
        choices = data.get("choices") or []
        if choices and isinstance(choices[0], dict):
            choice = dict(choices[0])
            delta = dict(choice.get("delta") or {})
            calls = delta.get("tool_calls")
            if calls:
                kept = []
                for call in calls:
                    index = int(call.get("index", 0))
                    name = (call.get("function") or {}).get("name")
                    if index not in self._index and name:
                        hidden = name in self.engine_tools
                        self._index[index] = None if hidden else self._client_calls
                        self._client_calls += 0 if hidden else 1
                    mapped = self._index.get(index, index)
                    if mapped is None:
                        continue
                    kept.append(call if mapped == index else {**call, "index": mapped})
                if kept != calls:
                    changed = True
                    if kept:
                        delta["tool_calls"] = kept
                    else:
                        del delta["tool_calls"]
                        if not delta and not choice.get("finish_reason"):
                            return None  # nothing left of this chunk
            if (
                choice.get("finish_reason") == "tool_calls"
                and self._index
                and not self._client_calls
            ):
                choice["finish_reason"] = "stop"
                changed = True
            if changed:
                choice["delta"] = delta
                data = {**data, "choices": [choice, *choices[1:]]}
        return event.changed(data) if changed else event

    def message(self) -> Message:
        message: Message = {"role": "assistant", "content": "".join(self._text) or None}
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": parts.id or f"call_{index}",
                    "type": "function",
                    "function": {"name": parts.name, "arguments": "".join(parts.arguments)},
                }
                for index, parts in sorted(self._calls.items())
            ]
        elif message["content"] is None:
            message["content"] = ""
        return message


class OpenAIWire(WireFormat):
    """OpenAI Chat Completions."""

    provider = "openai"

    def messages(self, body: dict[str, Any]) -> list[Message]:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ValueError("the request has no 'messages' list")
        return [dict(m) if isinstance(m, dict) else m for m in messages]

    def session_hint(self, body: dict[str, Any]) -> str | None:
        user = body.get("user")
        return user if isinstance(user, str) and user else None

    def client_tool_names(self, body: dict[str, Any]) -> set[str]:
        return {_function_name(tool) for tool in body.get("tools") or []} - {""}

    def _tools(self, body: dict[str, Any], engine_tools: list[dict[str, Any]]) -> list[Any]:
        client = list(body.get("tools") or [])
        taken = self.client_tool_names(body)
        # A client tool of the same name wins: the client defined it and answers it.
        return client + [t for t in engine_tools if _function_name(t) not in taken]

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
        out = {k: v for k, v in body.items() if k not in ("messages", "tools")}
        tools = self._tools(body, engine_tools)
        if tools:
            out["tools"] = tools
            if last_round:
                out["tool_choice"] = "none"
        out["messages"] = view
        return out

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        options = body.get("stream_options")
        options = dict(options) if isinstance(options, dict) else {}
        options["include_usage"] = True
        out = {k: v for k, v in body.items() if k not in ("stream_options", "messages")}
        out["stream"] = True
        out["stream_options"] = options
        out["messages"] = body.get("messages")
        return out

    def reply_message(self, data: dict[str, Any]) -> Message:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError("the upstream answer has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ValueError("the upstream answer's first choice has no message")
        return _assistant(message)

    def reply_usage(self, data: dict[str, Any]) -> dict[str, Any] | None:
        usage = data.get("usage")
        return usage if isinstance(usage, dict) else None

    def without_calls(self, data: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        out = copy.deepcopy(data)
        choice = out["choices"][0]
        message = choice["message"]
        kept = [
            call
            for call in message.get("tool_calls") or []
            if (call.get("function") or {}).get("name") not in names
        ]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
        return out

    def stream_state(self, body: dict[str, Any], engine_tools: frozenset[str]) -> StreamState:
        options = body.get("stream_options")
        wants = isinstance(options, dict) and bool(options.get("include_usage"))
        return OpenAIStream(engine_tools=engine_tools, client_wants_usage=wants)

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}
