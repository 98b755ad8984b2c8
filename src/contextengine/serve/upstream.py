"""The proxy's upstream: any OpenAI-compatible or Anthropic server, over httpx.

Requests are serialised once, compactly and in the relay's key order, so the
bytes of one session's requests share their prefix (the provider's prompt
cache keys on it). The client's credential goes upstream as it came, unless
the proxy has its own upstream key (``--upstream-api-key``). Errors keep
their status, body and content type (:class:`UpstreamHTTPError`); a refused
connection or a timeout is :class:`UpstreamUnreachableError`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from contextengine.relay.turn import MalformedUpstreamError
from contextengine.relay.wire import Reply, StreamEvent

__all__ = ["HttpUpstream", "UpstreamHTTPError", "UpstreamUnreachableError", "encode_event"]

# Headers a client sends that mean something to the upstream, passed on as they came.
_PASSED = ("anthropic-version", "anthropic-beta", "openai-organization", "openai-project")


class UpstreamHTTPError(Exception):
    """The upstream answered with an error status: passed to the client as it is."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


class UpstreamUnreachableError(Exception):
    """No answer from the upstream (refused, reset, timed out)."""


def encode(body: dict[str, Any]) -> bytes:
    """A request body as sent: compact, UTF-8, keys in the order the relay built them."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def encode_event(event: StreamEvent) -> bytes:
    """One event as server-sent-event bytes (its own text when the relay left it unchanged)."""
    if event.data is None:
        return b"data: [DONE]\n\n"
    text = event.raw if isinstance(event.raw, str) and not event.modified else None
    if text is None:
        text = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event.name}\n" if event.name else ""
    return f"{head}data: {text}\n\n".encode()


class HttpUpstream:
    """One request's view of the upstream: the path and the headers to send with it."""

    def __init__(self, client: httpx.AsyncClient, url: str, headers: Mapping[str, str]) -> None:
        self._client = client
        self._url = url
        self._headers = dict(headers)

    async def complete(self, body: dict[str, Any]) -> Reply:
        try:
            response = await self._client.post(
                self._url, content=encode(body), headers=self._headers
            )
        except httpx.TransportError as exc:
            raise UpstreamUnreachableError(type(exc).__name__) from exc
        if response.status_code >= 400:
            raise UpstreamHTTPError(
                response.status_code,
                response.content,
                response.headers.get("content-type", "application/json"),
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise MalformedUpstreamError("the upstream's answer is not JSON") from exc
        if not isinstance(data, dict):
            raise MalformedUpstreamError("the upstream's answer is not a JSON object")
        return Reply(response.content, data)

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        request = self._client.build_request(
            "POST", self._url, content=encode(body), headers=self._headers
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise UpstreamUnreachableError(type(exc).__name__) from exc
        try:
            if response.status_code >= 400:
                content = await response.aread()
                raise UpstreamHTTPError(
                    response.status_code,
                    content,
                    response.headers.get("content-type", "application/json"),
                )
            if "text/event-stream" not in response.headers.get("content-type", ""):
                raise MalformedUpstreamError(
                    "a streamed request got an answer that is not a stream"
                )
            name: str | None = None
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    text = line[5:].strip()
                    if text == "[DONE]":
                        yield StreamEvent(text, name, None)
                    elif text:
                        try:
                            data = json.loads(text)
                        except ValueError as exc:
                            raise MalformedUpstreamError("a streamed event is not JSON") from exc
                        yield StreamEvent(text, name, data if isinstance(data, dict) else {})
                elif not line:
                    name = None
        except httpx.TransportError as exc:
            raise UpstreamUnreachableError(type(exc).__name__) from exc
        finally:
            await response.aclose()
