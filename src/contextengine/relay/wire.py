"""What the relay needs from a wire format, and the stream events it passes on.

A :class:`WireFormat` turns a client's request body into our messages (OpenAI
style, what the host and engines speak), builds the upstream body from the
engine's view, and reads the upstream's answer, whole or streamed. The relay
(:mod:`contextengine.relay.turn`) calls nothing format-specific but these
methods, so the proxy and the wrapped SDK clients share every rule.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Call",
    "Message",
    "Reply",
    "StreamEvent",
    "StreamState",
    "WireFormat",
    "fingerprint",
]

Message = dict[str, Any]


def fingerprint(message: Any) -> str:
    """A stable digest of one message (key order and spacing do not matter)."""
    text = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Call:
    """One tool call of an assistant message, in our (OpenAI) terms."""

    id: str
    name: str
    arguments: str


@dataclass
class Reply:
    """One upstream answer: ``raw`` as the transport got it, ``data`` its JSON.

    ``modified`` is True when the relay changed ``data`` (engine calls removed):
    the transport must then send ``data`` rather than ``raw``.
    """

    raw: Any
    data: dict[str, Any]
    modified: bool = False


@dataclass
class StreamEvent:
    """One server-sent event of a streamed answer.

    ``raw`` is what the transport read (SSE text for the proxy, an SDK event
    object for a wrapped client); ``name`` the SSE event name (Anthropic) or
    None; ``data`` the parsed JSON payload, or None for OpenAI's ``[DONE]``.
    ``modified`` means the relay changed ``data`` and ``raw`` no longer says it.
    """

    raw: Any
    name: str | None
    data: dict[str, Any] | None
    modified: bool = False

    def changed(self, data: dict[str, Any]) -> StreamEvent:
        return StreamEvent(self.raw, self.name, data, modified=True)


@dataclass
class StreamState(ABC):
    """One streamed answer as it arrives: what it says so far, and what the client may see.

    The relay calls :meth:`feed` on every event, :meth:`intent` until the
    answer has declared what it is, and :meth:`filter` on what it forwards.
    """

    #: Names of the engine's tools: their calls never reach the client.
    engine_tools: frozenset[str] = frozenset()
    #: Whether the client asked for the usage chunk (OpenAI ``stream_options``).
    client_wants_usage: bool = True
    usage: dict[str, Any] | None = None
    _client_calls: int = field(default=0, init=False)

    @abstractmethod
    def feed(self, event: StreamEvent) -> None:
        """Accumulate ``event`` into the answer."""

    @abstractmethod
    def intent(self, event: StreamEvent) -> str | None:
        """What ``event`` shows the answer to be: ``"text"``, ``"call:NAME"`` or None (not yet).

        Text and the name of the first tool called are the two things that
        decide; reasoning, role and empty deltas decide nothing.
        """

    @abstractmethod
    def filter(self, event: StreamEvent) -> StreamEvent | None:
        """``event`` as the client may see it (engine calls removed), or None to drop it."""

    @abstractmethod
    def message(self) -> Message:
        """The whole answer as one assistant message (our format), after the last event."""


class WireFormat(ABC):
    """One API format (OpenAI Chat Completions, Anthropic Messages), seen by the relay."""

    #: ``"openai"`` or ``"anthropic"``: the provider hint for ``normalize_usage``.
    provider: str = ""

    @abstractmethod
    def messages(self, body: dict[str, Any]) -> list[Message]:
        """The request's history as our messages (system prompt first)."""

    @abstractmethod
    def session_hint(self, body: dict[str, Any]) -> str | None:
        """The request's own conversation key (OpenAI ``user``, Anthropic ``metadata.user_id``)."""

    @abstractmethod
    def client_tool_names(self, body: dict[str, Any]) -> set[str]:
        """Names of the tools the client defined."""

    @abstractmethod
    def counted_tools(self, body: dict[str, Any], engine_tools: list[dict[str, Any]]) -> list[Any]:
        """Every tool schema the upstream request will carry, for the window guarantee."""

    @abstractmethod
    def upstream_body(
        self,
        body: dict[str, Any],
        view: list[Message],
        engine_tools: list[dict[str, Any]],
        *,
        last_round: bool,
    ) -> dict[str, Any]:
        """The body to send upstream: the client's, with the view and the engine's tools.

        ``last_round`` (the engine-round bound is reached) forbids tool calls
        this once, so the model answers. The messages come last, in a stable
        key order, so the bytes of one session's requests share their prefix.
        """

    @abstractmethod
    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """An upstream streaming body with whatever the relay needs added (usage)."""

    @abstractmethod
    def reply_message(self, data: dict[str, Any]) -> Message:
        """The assistant message of a whole answer (our format)."""

    @abstractmethod
    def reply_usage(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The usage of a whole answer, as the upstream reported it."""

    @abstractmethod
    def without_calls(self, data: dict[str, Any], names: frozenset[str]) -> dict[str, Any]:
        """A copy of a whole answer without the calls to ``names``; the stop reason follows."""

    @abstractmethod
    def stream_state(self, body: dict[str, Any], engine_tools: frozenset[str]) -> StreamState:
        """A fresh :class:`StreamState` for one streamed answer to ``body``."""

    @abstractmethod
    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """An error in this format's shape, for errors the relay itself reports."""

    @staticmethod
    def calls(message: Message) -> list[Call]:
        """The tool calls of one of our assistant messages."""
        found: list[Call] = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            found.append(
                Call(
                    str(call.get("id") or ""),
                    str(function.get("name") or ""),
                    str(function.get("arguments") or ""),
                )
            )
        return found
