"""Recognising a provider's "context too long" error, and retrying once after compacting.

Providers reject an over-long request in different ways: HTTP 413, or a 400
whose body says ``context_length_exceeded`` (OpenAI), ``maximum context
length`` (OpenAI-compatible servers, vLLM), ``prompt is too long``
(Anthropic) or ``reduce the length`` (older OpenAI wording).
:func:`is_context_overflow_error` recognises all of them in whatever shape the
caller holds: an exception from httpx or an SDK, a response object, a parsed
JSON body, or a plain string.

When it says yes, the agent loop compacts with ``host.handle_overflow`` and
retries exactly once; :func:`send_with_overflow_retry` is that loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

__all__ = ["OVERFLOW_MARKERS", "is_context_overflow_error", "send_with_overflow_retry"]

#: Lower-case fragments that providers put in their context-length errors.
OVERFLOW_MARKERS = (
    "maximum context length",
    "context_length_exceeded",
    "context length exceeded",
    "prompt is too long",
    "reduce the length",
    "too many tokens",
    "request too large",
)

_MAX_DEPTH = 4
R = TypeVar("R")
Message = dict[str, Any]


def _status_of(obj: Any) -> int | None:
    for attr in ("status_code", "status", "http_status"):
        value = getattr(obj, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _texts(obj: Any, depth: int = 0) -> list[str]:
    """Every piece of text an error object carries: message, body, response text."""
    if obj is None or depth > _MAX_DEPTH:
        return []
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, bytes):
        return [obj.decode("utf-8", "replace")]
    if isinstance(obj, Mapping):
        # A JSON body: {"error": {"message": ..., "code": ...}} and friends.
        return [json.dumps(obj, default=str)]
    found: list[str] = []
    if isinstance(obj, BaseException):
        found.append(str(obj))
    for attr in ("message", "body", "code", "type"):
        value = getattr(obj, attr, None)
        if isinstance(value, str | bytes | Mapping):
            found.extend(_texts(value, depth + 1))
    response = getattr(obj, "response", None)
    if response is not None and response is not obj:
        found.extend(_response_texts(response, depth + 1))
    if not isinstance(obj, BaseException):
        found.extend(_response_texts(obj, depth + 1))
    return found


def _response_texts(response: Any, depth: int) -> list[str]:
    """The body of an httpx/requests-like response, without triggering a read."""
    text: Any = None
    try:
        text = response.text
    except Exception:  # a streaming response that was never read: nothing to see
        text = None
    return _texts(text, depth) if isinstance(text, str | bytes) else []


def is_context_overflow_error(exc_or_response: Any) -> bool:
    """Whether an error or response means "the request does not fit the context window".

    Accepts an exception (httpx ``HTTPStatusError``, an SDK's ``BadRequestError``,
    anything with ``status_code`` or ``response``), a response object, a parsed
    JSON body (dict) or a string. True for HTTP 413 and for any text holding
    one of :data:`OVERFLOW_MARKERS`; False for everything else, including None.
    """
    if exc_or_response is None:
        return False
    status = _status_of(exc_or_response)
    response = getattr(exc_or_response, "response", None)
    if status is None and response is not None:
        status = _status_of(response)
    if status == 413:
        return True
    for text in _texts(exc_or_response):
        lowered = text.lower()
        if any(marker in lowered for marker in OVERFLOW_MARKERS):
            return True
    return False


class _OverflowHost(Protocol):
    """The part of ``ContextHost`` the retry helper needs."""

    def prepare_request(
        self, messages: list[Message], *, incoming: Message | None = None
    ) -> list[Message]: ...

    def handle_overflow(self, messages: list[Message]) -> list[Message]: ...

    @property
    def history(self) -> list[Message]: ...


def send_with_overflow_retry(
    host: _OverflowHost,
    messages: list[Message],
    send: Callable[[list[Message]], R],
    *,
    incoming: Message | None = None,
) -> R:
    """Prepare and send a request; on a context overflow, compact and retry exactly once.

    ``send`` receives the prepared request and returns the provider's answer
    or raises. An overflow error triggers ``host.handle_overflow`` on the
    history; when that frees nothing the original error is re-raised rather
    than sending the same request again. Any other error propagates at once.
    Afterwards ``host.history`` holds the (possibly compacted) history.
    """
    request = host.prepare_request(messages, incoming=incoming)
    try:
        return send(request)
    except Exception as exc:
        if not is_context_overflow_error(exc):
            raise
        history = host.history
        compacted = host.handle_overflow(history)
        if compacted is history:  # nothing was freed: the same request would fail again
            raise
        retry = host.prepare_request(compacted, incoming=incoming)
        return send(retry)
