"""One request through the relay: the view upstream, engine-tool rounds, the answer back.

:func:`complete_turn` (a whole answer) and :func:`stream_turn` (server-sent
events) share every rule:

* **Engine tools.** The engine's tools (``lcm_grep``...) are offered beside
  the client's (a client tool of the same name wins and the engine's is not
  offered). When the model calls only engine tools, the relay answers them,
  adds the call and the results to the session's history and asks again, at
  most ``max_rounds`` times; the last time it asks with tool calls turned off
  (``tool_choice`` none), so the model answers.
* **Mixed calls.** An answer that calls engine tools *and* the client's own
  tools (or text followed by an engine call in a stream already under way)
  goes to the client with the engine calls removed: the client sees its own
  calls and the text, in the upstream's shape. The engine calls are answered
  at once and kept, with the model's whole message, in the session's history;
  when the client comes back with the results of its calls, the upstream sees
  the whole message, the engine's results and then the client's. Nothing is
  lost and every call keeps its result.
* **Fail-open.** When the host or the engine raises before anything went
  upstream, the client's request goes upstream as it came, its answer comes
  back as it is, and the reason is logged and counted (:class:`EngineActions`).
  Upstream errors are not the engine's: they propagate to the caller, which
  passes them on (the proxy with their status and body).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from contextengine.relay.actions import EngineActions
from contextengine.relay.conversation import Conversation
from contextengine.relay.wire import Call, Message, Reply, StreamEvent, WireFormat

__all__ = [
    "DEFAULT_MAX_ROUNDS",
    "MalformedUpstreamError",
    "Upstream",
    "complete_turn",
    "stream_turn",
]

logger = logging.getLogger("contextengine.relay")

#: Engine-tool rounds one request may take before the model is asked to answer.
DEFAULT_MAX_ROUNDS = 4

T = TypeVar("T")


class MalformedUpstreamError(Exception):
    """The upstream answered 200 with something that is not an answer in its format."""


class Upstream(Protocol):
    """Where the relay sends requests: the proxy's HTTP client, or a wrapped SDK client.

    Errors the upstream reports (a status, a refused connection) are raised
    as the transport's own exceptions and pass through the relay unchanged.
    """

    async def complete(self, body: dict[str, Any]) -> Reply:
        """Send ``body`` and return the whole answer."""
        ...

    def stream(self, body: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        """Send ``body`` (``stream: true``) and yield its events as they arrive."""
        ...


@dataclass
class _Turn:
    conv: Conversation
    wire: WireFormat
    body: dict[str, Any]
    actions: EngineActions
    max_rounds: int
    history: list[Message] = field(default_factory=list)
    engine_tools: list[dict[str, Any]] = field(default_factory=list)
    names: frozenset[str] = frozenset()
    compactions_before: int = 0

    async def timed(self, call: Callable[[], Awaitable[T]]) -> T:
        start = time.perf_counter()
        try:
            return await call()
        finally:
            self.actions.engine_seconds += time.perf_counter() - start

    async def begin(self) -> None:
        """Ingest what is new and learn the engine's tools (raises: fail open)."""
        host = self.conv.host
        self.actions.engine = host.engine_name
        self.compactions_before = host.compactions
        host.provider = self.wire.provider
        model = str(self.body.get("model") or "")
        start = time.perf_counter()
        messages = self.wire.messages(self.body)
        if model and model != host.model:
            await host.switch_model(model, host.context_length, provider=self.wire.provider)
        self.history = self.conv.ingest(messages, model or None)
        self.actions.tokens_received = self.conv.client_tokens
        self.actions.engine_seconds += time.perf_counter() - start
        schemas = await self.timed(host.tool_schemas)
        taken = self.wire.client_tool_names(self.body)
        self.engine_tools = [t for t in schemas if t["function"]["name"] not in taken]
        self.names = frozenset(t["function"]["name"] for t in self.engine_tools)

    async def request(self, round_: int) -> dict[str, Any]:
        """The upstream body for this round (raises: fail open when round_ == 0)."""
        max_tokens = self.body.get("max_tokens") or self.body.get("max_completion_tokens")
        tools = self.wire.counted_tools(self.body, self.engine_tools)
        view = await self.timed(
            lambda: self.conv.host.prepare_request(
                self.history,
                tools=tools,
                max_tokens=max_tokens if isinstance(max_tokens, int) else None,
            )
        )
        self.history = self.conv.host.history
        self._count_compactions()
        return self.wire.upstream_body(
            self.body, view, self.engine_tools, last_round=round_ >= self.max_rounds
        )

    def _count_compactions(self) -> None:
        self.actions.compactions = self.conv.host.compactions - self.compactions_before

    async def record(self, usage: Any) -> None:
        try:
            normalized = await self.timed(lambda: self.conv.host.record_response(usage))
            self.actions.tokens_sent += int(normalized.get("prompt_tokens", 0))
        except Exception:  # observation only: never fails an answer already received
            logger.warning("recording the upstream usage failed", exc_info=True)

    def split(self, message: Message) -> tuple[list[Call], list[Call]]:
        calls = self.wire.calls(message)
        engine = [c for c in calls if c.name in self.names]
        return engine, [c for c in calls if c.name not in self.names]

    async def answer(self, calls: list[Call]) -> list[Message]:
        """Run the engine's tools; their results as tool messages (errors come back as JSON)."""
        results: list[Message] = []
        for call in calls:
            text = await self.timed(
                lambda call=call: self.conv.host.handle_tool_call(  # type: ignore[misc]
                    call.name, call.arguments, self.history
                )
            )
            results.append({"role": "tool", "tool_call_id": call.id, "content": text})
        self.actions.engine_tool_calls += len(calls)
        return results

    async def next_round(self, message: Message, results: list[Message]) -> None:
        """Add an engine round to the history; compact after it when needed."""
        self.actions.engine_rounds += 1
        history = [*self.history, message, *results]
        self.history = await self.timed(lambda: self.conv.host.after_tool_calls(history))
        self._count_compactions()

    async def finish(self, message: Message, results: list[Message], usage: Any) -> None:
        """Keep the answer in the session's history and close the turn."""
        history = [*self.history, message, *results]
        try:
            await self.timed(lambda: self.conv.host.end_turn(history, usage))
        except Exception:
            logger.warning("closing the turn failed", exc_info=True)
        self.conv.answered([message, *results])
        self._count_compactions()

    def fail_open(self, exc: BaseException) -> None:
        self.actions.fail_open = True
        self.actions.fail_open_reason = type(exc).__name__
        # The type and message only: no message text is ever logged at this level.
        logger.warning(
            "context engine failed (%s); the request goes upstream unmodified",
            type(exc).__name__,
        )
        logger.debug("engine failure", exc_info=exc)
        self.conv.forget_client()


async def _prepared(turn: _Turn, refused: BaseException | None) -> dict[str, Any] | None:
    """The first upstream body; None when the request fails open (host failed, lock refused)."""
    if refused is not None:
        turn.fail_open(refused)
        return None
    try:
        await turn.begin()
        return await turn.request(0)
    except Exception as exc:
        turn.fail_open(exc)
        return None


async def complete_turn(
    conv: Conversation,
    wire: WireFormat,
    body: dict[str, Any],
    upstream: Upstream,
    actions: EngineActions,
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> Reply:
    """One non-streamed request: returns the upstream's answer as the client may see it."""
    turn = _Turn(conv, wire, body, actions, max_rounds)
    async with conv.turn() as refused:
        out = await _prepared(turn, refused)
        if out is None:
            return await upstream.complete(body)
        round_ = 0
        while True:
            reply = await upstream.complete(out)
            try:
                message = wire.reply_message(reply.data)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise MalformedUpstreamError(str(exc)) from exc
            usage = wire.reply_usage(reply.data)
            await turn.record(usage)
            engine, client = turn.split(message)
            if not engine:
                await turn.finish(message, [], usage)
                return reply
            results = await turn.answer(engine)
            if client or round_ >= max_rounds:
                await turn.finish(message, results, usage)
                return Reply(reply.raw, wire.without_calls(reply.data, turn.names), modified=True)
            await turn.next_round(message, results)
            round_ += 1
            out = await _next_request(turn, round_)
            if out is None:
                return await upstream.complete(body)


async def _next_request(turn: _Turn, round_: int) -> dict[str, Any] | None:
    """The next round's body; None when the host failed (the client's request goes as sent)."""
    try:
        return await turn.request(round_)
    except Exception as exc:
        turn.fail_open(exc)
        return None


async def stream_turn(
    conv: Conversation,
    wire: WireFormat,
    body: dict[str, Any],
    upstream: Upstream,
    actions: EngineActions,
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> AsyncIterator[StreamEvent]:
    """One streamed request: yields the events the client may see, as they arrive.

    Every upstream answer is streamed. Its events are held back until it
    shows what it is (:meth:`~contextengine.relay.wire.StreamState.intent`):
    the first text, or the name of the first tool it calls. When that is an
    engine tool, the answer is read to its end and never shown: the relay
    answers the calls and asks again, before the client's stream starts.
    Otherwise the held events and every one after go to the client as they
    arrive, engine calls removed (the mixed-call rule). The session stays
    locked until the stream ends or the client goes away.
    """
    turn = _Turn(conv, wire, body, actions, max_rounds)
    async with conv.turn() as refused:
        out = await _prepared(turn, refused)
        if out is None:
            async for event in upstream.stream(body):
                yield event
            return
        round_ = 0
        while True:
            state = wire.stream_state(body, turn.names)
            held: list[StreamEvent] = []
            decided: str | None = None  # "engine", "client", or None while held
            async for event in upstream.stream(wire.stream_body(out)):
                state.feed(event)
                if decided is None:
                    held.append(event)
                    intent = state.intent(event)
                    if intent is None:
                        continue
                    is_engine = intent.startswith("call:") and intent[5:] in turn.names
                    decided = "engine" if is_engine else "client"
                    if decided == "client":
                        for item in held:
                            shown = state.filter(item)
                            if shown is not None:
                                yield shown
                        held = []
                elif decided == "engine":
                    held.append(event)
                else:
                    shown = state.filter(event)
                    if shown is not None:
                        yield shown
            message = state.message()
            await turn.record(state.usage)
            engine, client = turn.split(message)
            results = await turn.answer(engine) if engine else []
            if decided != "engine" or client or round_ >= max_rounds:
                await turn.finish(message, results, state.usage)
                for item in held:  # an answer read whole: now the client's stream starts
                    shown = state.filter(item)
                    if shown is not None:
                        yield shown
                return
            await turn.next_round(message, results)
            round_ += 1
            next_out = await _next_request(turn, round_)
            if next_out is None:
                async for event in upstream.stream(body):
                    yield event
                return
            out = next_out
