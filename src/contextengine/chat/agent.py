"""The reference agent loop: a streaming OpenAI-compatible client driving a ``ContextHost``.

:class:`ChatClient` speaks the chat-completions API over httpx with
server-sent events, assembling streamed text and tool calls.
:class:`ChatAgent` runs one user turn the way any agent should use the host::

    append the user message
    repeat (at most max_tool_rounds):
        send_with_overflow_retry(host, history, send)   prepare, send, retry once on overflow
        host.record_response(usage)
        append the assistant message
        no tool calls → stop
        run each tool (engine tools through host.handle_tool_call), append results
        history = host.after_tool_calls(history)
    host.end_turn(history, usage)

It uses only the public API, so it doubles as an integration example.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

from contextengine.host import ContextHost
from contextengine.overflow import send_with_overflow_retry

__all__ = ["ChatAgent", "ChatClient", "Completion"]

Message = dict[str, Any]
TextSink = Callable[[str], None]


@dataclass
class Completion:
    """One assistant answer: the message to append, the usage and why it stopped."""

    message: Message
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(self.message.get("tool_calls") or [])


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _sse_data(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of an SSE stream, until ``[DONE]``."""
    for line in lines:
        if not line.startswith("data:"):
            continue  # comments, event names and keep-alives
        data = line[5:].strip()
        if data == "[DONE]":
            return
        if data:
            payload = json.loads(data)
            if isinstance(payload, dict):
                yield payload


class ChatClient:
    """Chat completions against any OpenAI-compatible endpoint, streamed.

    ``client`` may be injected (a configured ``httpx.Client``, with its own
    transport); otherwise one is created and closed by :meth:`close`.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 120.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns_client = client is None
        self._client = client or httpx.Client(timeout=timeout)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def complete(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        """Send one request and stream the answer; ``on_text`` receives text as it arrives.

        Raises ``httpx.HTTPStatusError`` (with the body read, so
        :func:`~contextengine.is_context_overflow_error` can inspect it) for an
        error status, and ``httpx`` transport errors as they come.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = tools
        with self._client.stream("POST", self.url, json=body, headers=self._headers) as response:
            if response.status_code >= 400:
                response.read()
                response.raise_for_status()
            if "text/event-stream" not in response.headers.get("content-type", ""):
                # Servers that ignore "stream" answer with one JSON completion.
                response.read()
                return self._from_json(response.json(), on_text)
            return self._from_stream(response.iter_lines(), on_text)

    @staticmethod
    def _from_json(payload: dict[str, Any], on_text: TextSink | None) -> Completion:
        choice = (payload.get("choices") or [{}])[0]
        message = dict(choice.get("message") or {"role": "assistant", "content": ""})
        message.setdefault("role", "assistant")
        if on_text and isinstance(message.get("content"), str):
            on_text(message["content"])
        return Completion(message, payload.get("usage"), choice.get("finish_reason"))

    @staticmethod
    def _from_stream(lines: Iterator[str], on_text: TextSink | None) -> Completion:
        text: list[str] = []
        calls: dict[int, _CallParts] = {}
        usage: dict[str, Any] | None = None
        finish: str | None = None
        for chunk in _sse_data(lines):
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                if isinstance(piece, str) and piece:
                    text.append(piece)
                    if on_text:
                        on_text(piece)
                for call in delta.get("tool_calls") or []:
                    parts = calls.setdefault(int(call.get("index", 0)), _CallParts())
                    parts.id = call.get("id") or parts.id
                    function = call.get("function") or {}
                    parts.name = function.get("name") or parts.name
                    if function.get("arguments"):
                        parts.arguments.append(function["arguments"])
                finish = choice.get("finish_reason") or finish
        message: Message = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": parts.id or f"call_{index}",
                    "type": "function",
                    "function": {"name": parts.name, "arguments": "".join(parts.arguments)},
                }
                for index, parts in sorted(calls.items())
            ]
        elif message["content"] is None:
            message["content"] = ""
        return Completion(message, usage, finish)


class ChatAgent:
    """One conversation: the history, the host, the client, and the turn loop.

    ``on_text`` receives streamed assistant text; ``on_tool`` a short line per
    tool call. The host's events (compaction notices, warnings) go to the
    host's observers, which the caller attaches.
    """

    def __init__(
        self,
        host: ContextHost,
        client: ChatClient,
        *,
        history: list[Message] | None = None,
        on_text: TextSink | None = None,
        on_tool: TextSink | None = None,
        max_tool_rounds: int = 8,
    ) -> None:
        self.host = host
        self.client = client
        self.history: list[Message] = list(history or [])
        self.on_text = on_text
        self.on_tool = on_tool
        self.max_tool_rounds = max_tool_rounds
        self.turns = 0

    def _run_tool(self, call: dict[str, Any], engine_tools: set[str]) -> str:
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        if self.on_tool:
            self.on_tool(f"{name}({function.get('arguments') or ''})")
        if name not in engine_tools:
            return json.dumps({"error": f"unknown tool: {name}"})
        return self.host.handle_tool_call(name, function.get("arguments") or "{}", self.history)

    def run_turn(self, text: str) -> Completion | None:
        """Run one user turn to its final answer (the last completion).

        A provider error ends the turn as failed, anything else
        (KeyboardInterrupt included) as interrupted; both propagate after
        ``end_turn``, and the history keeps what the turn got to.
        """
        self.turns += 1
        self.history = [*self.history, {"role": "user", "content": text}]
        tools = self.host.tool_schemas()
        engine_tools = {str((t.get("function") or {}).get("name")) for t in tools}
        completion: Completion | None = None
        try:
            for _round in range(self.max_tool_rounds):
                completion = send_with_overflow_retry(
                    self.host,
                    self.history,
                    lambda request: self.client.complete(
                        request, tools=tools or None, on_text=self.on_text
                    ),
                )
                self.history = self.host.history
                self.host.record_response(completion.usage)
                self.history.append(completion.message)
                if not completion.tool_calls:
                    break
                for call in completion.tool_calls:
                    result = self._run_tool(call, engine_tools)
                    self.history.append(
                        {"role": "tool", "tool_call_id": call.get("id"), "content": result}
                    )
                self.history = self.host.after_tool_calls(self.history)
        except httpx.HTTPError:
            self.host.end_turn(self.history, None, turn_id=self.turns, failed=True)
            raise
        except BaseException:
            self.host.end_turn(self.history, None, turn_id=self.turns, interrupted=True)
            raise
        usage = completion.usage if completion else None
        self.host.end_turn(self.history, usage, turn_id=self.turns)
        return completion
