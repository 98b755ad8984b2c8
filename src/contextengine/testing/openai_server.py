"""A scripted OpenAI-compatible HTTP server, for testing agents and summarisers without a model.

:class:`ScriptedOpenAIServer` is a real HTTP server (the standard library's
``ThreadingHTTPServer`` on 127.0.0.1, a free port) that answers
``POST /v1/chat/completions`` — plain JSON or server-sent events when the
request says ``"stream": true`` — ``GET /v1/models``, and Anthropic Messages
(``POST /v1/messages``, whole or streamed with Anthropic's event sequence,
tool calls as ``tool_use`` blocks; see
:mod:`contextengine.testing.anthropic_messages`) from the same script. Point
any OpenAI-compatible client at ``server.base_url`` (an Anthropic client at
``server.url``) and script what it gets back::

    from contextengine.testing import ScriptedOpenAIServer
    from contextengine import OpenAICompatibleSummarizer, SummaryRequest

    with ScriptedOpenAIServer() as server:
        server.add_error(429, headers={"Retry-After": "0"})   # first call: rate limited
        server.add_reply("## Goal\\nShip the fix.")              # second call: an answer
        with OpenAICompatibleSummarizer(
            base_url=server.base_url, api_key="test", model="any"
        ) as summarizer:
            summary = summarizer.summarize(SummaryRequest(messages=[...]))
        assert len(server.requests) == 2                      # parsed JSON bodies
        assert server.recorded[1].headers["authorization"] == "Bearer test"

Each chat-completions request takes the next item of the script:
:meth:`~ScriptedOpenAIServer.add_reply` (content, tool calls, reasoning,
usage), :meth:`~ScriptedOpenAIServer.add_error` (any status, body and
headers), :meth:`~ScriptedOpenAIServer.add_malformed` (a body that is not
JSON), :meth:`~ScriptedOpenAIServer.add_drop` (close the connection without
answering) and :meth:`~ScriptedOpenAIServer.add_delay` (wait, then serve the
next item). When the script is empty the ``responder`` callable answers, then
``default_reply``; with neither, the server answers 500 "script exhausted" so
that a test asking more than it scripted fails loudly.

A streamed reply can be paced: ``add_reply(..., stream_delay_s=0.01)`` pauses
between events, and ``add_reply(..., hold_last_chunk=event)`` sends every
event but the last and waits for ``event`` (a :class:`threading.Event` the
test sets, or the server closing): a client that sees the first content
before it sets the event proves nothing between it and the server buffered
the stream.

Replies carry a realistic ``usage``: prompt tokens counted on the request's
messages with :func:`contextengine.tokens.count_message_tokens` and completion
tokens on the reply, unless the script gives one. A reply with tool calls has
``finish_reason: "tool_calls"``. Every connection is closed after its response,
which keeps the server simple and the client's pool free of stale sockets.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from contextengine.testing.anthropic_messages import (
    MESSAGES_PATHS,
    anthropic_error,
    anthropic_events,
    anthropic_message,
)
from contextengine.tokens import count_message_tokens, count_tokens

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["RecordedRequest", "ScriptedOpenAIServer"]

Responder = Callable[[dict[str, Any]], dict[str, Any]]

_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODEL_PATHS = ("/v1/models", "/models")
_STREAM_PIECE = re.compile(r"\S*\s*|\s+")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    402: "insufficient_quota",
    403: "permission_denied",
    404: "not_found_error",
    429: "rate_limit_exceeded",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received: method, path, lower-cased headers and parsed body."""

    method: str
    path: str
    headers: dict[str, str]
    #: The parsed JSON body, or None when there was no body or it was not JSON.
    body: Any
    text: str = ""


@dataclass(frozen=True)
class _Reply:
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    usage: dict[str, Any] | None = None
    reasoning: str | None = None
    completion: dict[str, Any] | None = None  # a full body from a responder, sent as is
    stream_delay_s: float = 0.0
    hold_last_chunk: threading.Event | None = None


@dataclass(frozen=True)
class _Error:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Malformed:
    text: str
    status: int = 200


@dataclass(frozen=True)
class _Drop:
    pass


@dataclass(frozen=True)
class _Delay:
    seconds: float


_Item = _Reply | _Error | _Malformed | _Drop


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 resets connections when dozens of
    # clients connect at once (a load test, a proxy in front of it).
    request_queue_size = 128
    # Join handler threads on close so no thread outlives the server.
    block_on_close = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is part of what tests script;
        # a traceback on stderr for it would only be noise.
        return


class ScriptedOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers from a script.

    Starts serving on construction; use it as a context manager or call
    :meth:`close`. All methods are thread-safe. See the module docstring for
    the script semantics.
    """

    def __init__(
        self,
        *,
        default_reply: str | None = None,
        responder: Responder | None = None,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.default_reply = default_reply
        self.responder = responder
        self.model = model
        self._host = host
        self._lock = threading.Lock()
        self._script: deque[_Item | _Delay] = deque()
        self._recorded: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._ids = 0
        # Load the token vocabulary now: loading it inside the first request
        # can take longer than a client's short test timeout.
        count_tokens("warm up", model)
        self._httpd = _QuietServer((host, port), _handler_for(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="ScriptedOpenAIServer",
            daemon=True,
        )
        self._thread.start()
        self._closed = False

    # ------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without the API prefix."""
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI client takes as its base URL."""
        return f"{self.url}/v1"

    def close(self) -> None:
        """Stop serving, end pending delays, close the socket and join every thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> ScriptedOpenAIServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ scripting

    def add_reply(
        self,
        content: str | None = "",
        *,
        usage: Mapping[str, Any] | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        reasoning: str | None = None,
        stream_delay_s: float = 0.0,
        hold_last_chunk: threading.Event | None = None,
    ) -> None:
        """Queue an assistant answer.

        ``tool_calls`` items are OpenAI tool calls or the short form
        ``{"name": ..., "arguments": dict | str, "id": optional}``; missing ids
        become ``call_scripted_N``. ``reasoning`` is returned as
        ``reasoning_content``. ``usage`` replaces the computed usage.

        When the reply is streamed (either format), ``stream_delay_s`` pauses
        before every event after the first, and ``hold_last_chunk`` holds the
        last event (OpenAI: the last ``data:`` chunk before ``[DONE]``;
        Anthropic: ``message_stop``) until the test sets it or the server
        closes: everything before it is sent and flushed, so a client that
        sees the first content before setting it proves the stream was not
        buffered on the way.
        """
        calls = [self._tool_call(call) for call in tool_calls] if tool_calls else None
        self._push(
            _Reply(
                content,
                tool_calls=calls,
                usage=dict(usage) if usage is not None else None,
                reasoning=reasoning,
                stream_delay_s=float(stream_delay_s),
                hold_last_chunk=hold_last_chunk,
            )
        )

    def add_error(
        self, status: int, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> None:
        """Queue an HTTP error; ``body`` is JSON (dict/list) or text, default an OpenAI error."""
        self._push(_Error(status, body, dict(headers or {})))

    def add_malformed(self, body_text: str = '{"choices": [', *, status: int = 200) -> None:
        """Queue a response whose body is ``body_text`` as is (by default truncated JSON)."""
        self._push(_Malformed(body_text, status))

    def add_drop(self) -> None:
        """Queue a dropped connection: the server closes the socket without answering."""
        self._push(_Drop())

    def add_delay(self, seconds: float) -> None:
        """Wait ``seconds`` before serving the next scripted item (or the fallback)."""
        self._push(_Delay(seconds))

    def _push(self, item: _Item | _Delay) -> None:
        with self._lock:
            self._script.append(item)

    def _tool_call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        function = call.get("function")
        if isinstance(function, Mapping):
            name, arguments = function.get("name"), function.get("arguments", "")
        else:
            name, arguments = call.get("name"), call.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        call_id = call.get("id")
        if not call_id:
            with self._lock:
                self._ids += 1
                call_id = f"call_scripted_{self._ids}"
        return {
            "id": str(call_id),
            "type": "function",
            "function": {"name": str(name), "arguments": arguments},
        }

    # ------------------------------------------------------------ inspection

    @property
    def recorded(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._recorded)

    @property
    def requests(self) -> list[Any]:
        """The parsed JSON bodies of the chat-completions requests received so far."""
        with self._lock:
            return [
                r.body
                for r in self._recorded
                if r.path.split("?")[0] in _CHAT_PATHS or r.path.split("?")[0] in MESSAGES_PATHS
            ]

    @property
    def pending(self) -> int:
        """How many scripted items (delays included) are still queued."""
        with self._lock:
            return len(self._script)

    # ------------------------------------------------------------ serving

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._recorded.append(request)

    def _next(self) -> tuple[float, _Item | None]:
        """The delay to wait and the item to serve (None: use the fallback)."""
        delay = 0.0
        with self._lock:
            while self._script:
                item = self._script.popleft()
                if isinstance(item, _Delay):
                    delay += item.seconds
                    continue
                return delay, item
        return delay, None

    def _fallback(self, body: dict[str, Any]) -> _Item:
        if self.responder is not None:
            spec = self.responder(body)
            if "choices" in spec:
                return _Reply(None, completion=spec)
            calls = spec.get("tool_calls")
            return _Reply(
                spec.get("content"),
                tool_calls=[self._tool_call(c) for c in calls] if calls else None,
                usage=spec.get("usage"),
                reasoning=spec.get("reasoning"),
            )
        if self.default_reply is not None:
            return _Reply(self.default_reply)
        return _Error(500, _error_body("ScriptedOpenAIServer: script exhausted", 500))

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless the server closes first; True when still open."""
        return not self._closing.wait(seconds) if seconds > 0 else True

    def _pace(self, reply: _Reply, index: int, count: int) -> bool:
        """Wait before streamed event ``index`` of ``count`` as ``reply`` asks; True when open."""
        if index and not self._wait(reply.stream_delay_s):
            return False
        gate = reply.hold_last_chunk
        if gate is not None and index == count - 1:
            while not gate.wait(0.05):
                if self._closing.is_set():
                    return False
        return True

    def _completion_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"chatcmpl-scripted-{self._ids}"

    def _usage(self, body: dict[str, Any], reply: _Reply) -> dict[str, Any]:
        if reply.usage is not None:
            return reply.usage
        model = body.get("model") if isinstance(body.get("model"), str) else None
        try:
            prompt = count_message_tokens(body.get("messages") or [], model)
        except Exception:  # a test double must answer even odd requests
            prompt = 0
        completion = count_tokens(reply.content or "", model)
        for call in reply.tool_calls or []:
            completion += count_tokens(call["function"]["name"], model)
            completion += count_tokens(call["function"]["arguments"], model)
        reasoning = count_tokens(reply.reasoning, model) if reply.reasoning else 0
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion + reasoning,
            "total_tokens": prompt + completion + reasoning,
        }
        if reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
        return usage

    def _message(self, body: dict[str, Any], reply: _Reply) -> dict[str, Any]:
        """The Anthropic ``message`` for a reply (``POST /v1/messages``)."""
        with self._lock:
            self._ids += 1
            message_id = f"msg_scripted_{self._ids}"
        return anthropic_message(
            body,
            message_id,
            self.model,
            content=reply.content,
            tool_calls=reply.tool_calls,
            reasoning=reply.reasoning,
            usage=reply.usage,
        )

    def _completion(self, body: dict[str, Any], reply: _Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        return {
            "id": self._completion_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": self._usage(body, reply),
        }

    def _chunks(self, body: dict[str, Any], reply: _Reply) -> list[dict[str, Any]]:
        """The SSE chunks of a streamed reply, usage last when the client asked for it."""
        base = {
            "id": self._completion_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
        }
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if include_usage:
                data["usage"] = None
            return data

        chunks = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:
            chunks += [chunk({"reasoning_content": piece}) for piece in _pieces(reply.reasoning)]
        chunks += [chunk({"content": piece}) for piece in _pieces(reply.content or "")]
        for index, call in enumerate(reply.tool_calls or []):
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            chunks.append(chunk({"tool_calls": [head]}))
            for piece in _pieces(call["function"]["arguments"], size=16):
                chunks.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        chunks.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
        if include_usage:
            chunks.append({**base, "choices": [], "usage": self._usage(body, reply)})
        return chunks


def _pieces(text: str, size: int = 0) -> list[str]:
    """``text`` cut the way a model streams it: word by word, or every ``size`` characters."""
    if not text:
        return []
    if size:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return [piece for piece in _STREAM_PIECE.findall(text) if piece]


def _error_body(message: str, status: int) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _handler_for(server: ScriptedOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ScriptedOpenAIServer/1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output clean

        def _read_body(self) -> str:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length).decode("utf-8", "replace") if length else ""

        def _send(
            self, status: int, payload: Any, headers: Mapping[str, str] | None = None
        ) -> None:
            if isinstance(payload, (dict, list)):
                data = json.dumps(payload).encode()
                content_type = "application/json"
            else:
                data = str(payload).encode()
                content_type = "application/json" if status < 400 else "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            server._record(RecordedRequest("GET", self.path, _lower(self.headers), None))
            if path in _MODEL_PATHS:
                model = {"id": server.model, "object": "model", "created": 0, "owned_by": "test"}
                self._send(200, {"object": "list", "data": [model]})
            else:
                self._send(404, _error_body(f"no route for GET {path}", 404))

        def do_POST(self) -> None:
            text = self._read_body()
            try:
                body = json.loads(text) if text else None
            except ValueError:
                body = None
            path = self.path.split("?")[0]
            server._record(RecordedRequest("POST", self.path, _lower(self.headers), body, text))
            anthropic = path in MESSAGES_PATHS
            error = anthropic_error if anthropic else _error_body
            if path not in _CHAT_PATHS and not anthropic:
                self._send(404, _error_body(f"no route for POST {path}", 404))
                return
            if not isinstance(body, dict):
                self._send(400, error("request body is not a JSON object", 400))
                return
            delay, item = server._next()
            if not server._wait(delay):
                self.close_connection = True
                return
            if item is None:
                item = server._fallback(body)
            if anthropic:
                self._serve_messages(body, item)
            else:
                self._serve(body, item)

        def _serve_messages(self, body: dict[str, Any], item: _Item) -> None:
            """Answer ``POST /v1/messages`` (Anthropic Messages) with a script item."""
            if isinstance(item, _Reply) and item.completion is None:
                message = server._message(body, item)
                if body.get("stream"):
                    self._stream_events(anthropic_events(message), item)
                else:
                    self._send(200, message)
            elif isinstance(item, _Error) and item.body is None:
                self._send(
                    item.status,
                    anthropic_error(f"scripted error {item.status}", item.status),
                    item.headers,
                )
            else:
                self._serve(body, item)

        def _stream_events(self, events: list[tuple[str, dict[str, Any]]], reply: _Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            for index, (name, data) in enumerate(events):
                if not server._pace(reply, index, len(events)):
                    break
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

        def _serve(self, body: dict[str, Any], item: _Item) -> None:
            if isinstance(item, _Drop):
                self.close_connection = True
            elif isinstance(item, _Error):
                payload = item.body
                if payload is None:
                    payload = _error_body(f"scripted error {item.status}", item.status)
                self._send(item.status, payload, item.headers)
            elif isinstance(item, _Malformed):
                self._send(item.status, item.text)
            elif item.completion is not None:
                self._send(200, item.completion)
            elif body.get("stream"):
                self._stream(server._chunks(body, item), item)
            else:
                self._send(200, server._completion(body, item))

        def _stream(self, chunks: list[dict[str, Any]], reply: _Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            for index, data in enumerate(chunks):
                if not server._pace(reply, index, len(chunks)):
                    self.close_connection = True
                    return
                self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    return Handler


def _lower(headers: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}
