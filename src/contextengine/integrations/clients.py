"""``contextengine.wrap(client, ...)``: an OpenAI or Anthropic SDK client with the host inside.

For code that calls the SDK directly::

    from openai import OpenAI
    import contextengine

    client = contextengine.wrap(OpenAI(), engine="lcm", session="ticket-4411")
    answer = client.chat.completions.create(model="gpt-4o", messages=history)  # the full history

The wrapped client has the same ``chat.completions.create(...)`` (OpenAI,
``OpenAI`` and ``AsyncOpenAI``) or ``messages.create(...)`` (Anthropic,
``Anthropic`` and ``AsyncAnthropic``), streaming included. Each call runs the
relay's turn (:mod:`contextengine.relay.turn`), exactly as ``contextengine
serve`` does: the caller keeps sending its whole history, the wrapper sends
the engine's view, answers the engine's tool calls itself (bounded rounds),
and returns the SDK's own response object, unchanged in shape (a response
mixing engine and caller tool calls comes back with the caller's only; see
the relay's mixed-call rule). Everything else (``client.models``...) is the
wrapped client's. What the engine did on the last call is
:attr:`WrappedClient.last_actions`.

No SDK is imported here: the client is recognised by its class name and
called through its own methods, so its configuration (keys, base URL,
retries, timeouts) is the caller's.

Sync clients: the relay is asynchronous, so a sync wrapper runs it on a
private event loop in a daemon thread, and calls the sync SDK from that
loop's worker threads. One wrapped client is one session; calls on it are
served one at a time.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from contextengine.async_host import AsyncContextHost
from contextengine.config import resolve_config
from contextengine.events import Observer
from contextengine.registry import load_engine
from contextengine.relay.actions import EngineActions
from contextengine.relay.anthropic_wire import AnthropicWire
from contextengine.relay.conversation import Conversation
from contextengine.relay.openai_wire import OpenAIWire
from contextengine.relay.turn import DEFAULT_MAX_ROUNDS, complete_turn, stream_turn
from contextengine.relay.wire import Reply, StreamEvent, WireFormat

__all__ = ["WrappedClient", "wrap"]

T = TypeVar("T")

# create() arguments that configure the SDK call rather than the request body.
_CALL_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def _dump(obj: Any) -> dict[str, Any]:
    dumped = obj.model_dump(mode="json", exclude_none=True)
    return dumped if isinstance(dumped, dict) else {}


def _rebuilt(raw: Any, data: dict[str, Any]) -> Any:
    """An SDK object of ``raw``'s type holding ``data`` (a response the relay changed)."""
    return type(raw).model_validate(data)


class _SDKUpstream:
    """The relay's upstream: the wrapped SDK's own ``create``, sync or async."""

    def __init__(
        self, create: Callable[..., Any], *, is_async: bool, options: dict[str, Any], named: bool
    ) -> None:
        self._create = create
        self._async = is_async
        self._options = options
        self._named = named  # Anthropic events carry their name as ``type``

    async def _call(self, body: dict[str, Any]) -> Any:
        if self._async:
            return await self._create(**body, **self._options)
        return await asyncio.to_thread(self._create, **body, **self._options)

    async def complete(self, body: dict[str, Any]) -> Reply:
        result = await self._call(body)
        return Reply(result, _dump(result))

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[StreamEvent]:
        stream = await self._call(body)
        try:
            if self._async:
                async for event in stream:
                    yield self._event(event)
            else:
                done = object()
                iterator = iter(stream)
                while (event := await asyncio.to_thread(next, iterator, done)) is not done:
                    yield self._event(event)
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                result = close()
                if asyncio.iscoroutine(result):
                    await result

    def _event(self, event: Any) -> StreamEvent:
        data = _dump(event)
        return StreamEvent(event, str(data.get("type")) if self._named else None, data)


def _shown(event: StreamEvent) -> Any:
    return _rebuilt(event.raw, event.data or {}) if event.modified else event.raw


class _LoopThread:
    """A private event loop in a daemon thread: where a sync wrapper runs the relay."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="contextengine-wrap", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


async def _next_event(events: AsyncIterator[StreamEvent]) -> StreamEvent:
    return await anext(events)


class _SyncStream:
    """The events of a streamed answer, for a sync caller (iterate it, or close it early)."""

    def __init__(self, loop: _LoopThread, events: AsyncIterator[StreamEvent], first: Any) -> None:
        self._loop = loop
        self._events = events
        self._pending: list[Any] = [] if first is None else [first]
        self._done = first is None

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._pending:
            return self._pending.pop()
        if self._done:
            raise StopIteration
        try:
            event: StreamEvent = self._loop.run(_next_event(self._events))
        except StopAsyncIteration:
            self._done = True
            raise StopIteration from None
        return _shown(event)

    def close(self) -> None:
        """Stop reading: the upstream stream is closed and the session freed."""
        if not self._done:
            self._done = True
            self._loop.run(self._events.aclose())  # type: ignore[attr-defined]

    def __enter__(self) -> _SyncStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncStream:
    """The events of a streamed answer, for an async caller."""

    def __init__(self, events: AsyncIterator[StreamEvent], first: Any) -> None:
        self._events = events
        self._pending: list[Any] = [] if first is None else [first]
        self._done = first is None

    def __aiter__(self) -> _AsyncStream:
        return self

    async def __anext__(self) -> Any:
        if self._pending:
            return self._pending.pop()
        if self._done:
            raise StopAsyncIteration
        try:
            event = await anext(self._events)
        except StopAsyncIteration:
            self._done = True
            raise
        return _shown(event)

    async def close(self) -> None:
        """Stop reading: the upstream stream is closed and the session freed."""
        if not self._done:
            self._done = True
            await self._events.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> _AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Namespace:
    """``client.chat`` / ``client.chat.completions`` / ``client.messages``: ``create`` is ours."""

    def __init__(self, inner: Any, create: Callable[..., Any] | None = None, **children: Any):
        self._inner = inner
        self._create = create
        self._children = children

    def __getattr__(self, name: str) -> Any:
        if name == "create" and self._create is not None:
            return self._create
        if name in self._children:
            return self._children[name]
        return getattr(self._inner, name)


class WrappedClient:
    """An SDK client whose ``create`` runs the engine around each call (see the module docstring).

    Built by :func:`wrap`. Attributes other than the wrapped ``create`` are
    the client's own.
    """

    def __init__(
        self,
        client: Any,
        host: AsyncContextHost,
        session: str,
        *,
        wire: WireFormat,
        is_async: bool,
        max_engine_rounds: int = DEFAULT_MAX_ROUNDS,
    ) -> None:
        self._client = client
        #: The host driving the engine for this session.
        self.host = host
        self.session = session
        self._wire = wire
        self._async = is_async
        self._rounds = max_engine_rounds
        self._conv = Conversation(host, session)
        self._started = False
        self._loop: _LoopThread | None = None if is_async else _LoopThread()
        #: What the engine did on the last call (compactions, engine tool calls...).
        self.last_actions = EngineActions()
        if isinstance(wire, AnthropicWire):
            self.messages = _Namespace(client.messages, self._entry(client.messages.create))
        else:
            completions = _Namespace(
                client.chat.completions, self._entry(client.chat.completions.create)
            )
            self.chat = _Namespace(client.chat, completions=completions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _entry(self, create: Callable[..., Any]) -> Callable[..., Any]:
        if self._async:

            async def acreate(**kwargs: Any) -> Any:
                return await self._call(create, kwargs)

            return acreate

        def create_sync(**kwargs: Any) -> Any:
            assert self._loop is not None
            return self._loop.run(self._call(create, kwargs))

        return create_sync

    async def _call(self, create: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        options = {k: v for k, v in kwargs.items() if k in _CALL_OPTIONS}
        body = {k: v for k, v in kwargs.items() if k not in _CALL_OPTIONS}
        upstream = _SDKUpstream(
            create,
            is_async=self._async,
            options=options,
            named=isinstance(self._wire, AnthropicWire),
        )
        if not self._started:
            await self.host.start_session(self.session)
            self._started = True
        actions = self.last_actions = EngineActions()
        if not body.get("stream"):
            reply = await complete_turn(
                self._conv, self._wire, body, upstream, actions, max_rounds=self._rounds
            )
            return _rebuilt(reply.raw, reply.data) if reply.modified else reply.raw
        events = stream_turn(
            self._conv, self._wire, body, upstream, actions, max_rounds=self._rounds
        )
        try:
            first = _shown(await anext(events))
        except StopAsyncIteration:
            first = None
        if self._async:
            return _AsyncStream(events, first)
        assert self._loop is not None
        return _SyncStream(self._loop, events, first)

    def close(self) -> None:
        """End the session (an archive engine stores what is left) and stop the private loop.

        The wrapped SDK client is the caller's and stays open. For an async
        wrapper, use :meth:`aclose`.
        """
        if self._loop is not None:
            if self._started:
                self._loop.run(self.host.end_session())
            self._loop.close()
            self._loop = None
        _close_engine(self.host)

    async def aclose(self) -> None:
        """End the session (async wrappers)."""
        if self._started:
            await self.host.end_session()
        _close_engine(self.host)

    def __enter__(self) -> WrappedClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _close_engine(host: AsyncContextHost) -> None:
    close = getattr(host.engine, "close", None)
    if callable(close):
        close()


def _kind(client: Any) -> tuple[WireFormat, bool]:
    """The client's format and whether it is async, from its class and module names."""
    for cls in type(client).__mro__:
        module = cls.__module__.split(".")[0]
        if module in ("openai", "anthropic"):
            wire: WireFormat = OpenAIWire() if module == "openai" else AnthropicWire()
            return wire, cls.__name__.startswith("Async")
    raise TypeError(
        f"wrap() takes an OpenAI or Anthropic SDK client (OpenAI, AsyncOpenAI, Anthropic,"
        f" AsyncAnthropic), got {type(client).__qualname__}"
    )


def wrap(
    client: Any,
    engine: str = "lcm",
    session: str | None = None,
    *,
    max_engine_rounds: int = DEFAULT_MAX_ROUNDS,
    observers: tuple[Observer, ...] = (),
    **engine_options: Any,
) -> WrappedClient:
    """``client`` with the engine ``engine`` managing the context of the conversation ``session``.

    ``engine_options`` go to the engine (``context_length=``, ``store=``...;
    the window defaults to the configured one). ``session`` names the
    conversation in the archive (resumed when it exists; default: a new
    one). ``observers`` receive the host's compaction and warning events.
    Raises ``TypeError`` for a client that is not an OpenAI or Anthropic SDK
    client.
    """
    wire, is_async = _kind(client)
    context_length = engine_options.pop("context_length", None)
    if context_length is None:
        context_length = resolve_config().context_length
    built = load_engine(engine, context_length=int(context_length), **engine_options)
    host = AsyncContextHost(
        built, model="", context_length=int(context_length), observers=list(observers)
    )
    return WrappedClient(
        client,
        host,
        session or f"wrap-{uuid.uuid4().hex}",
        wire=wire,
        is_async=is_async,
        max_engine_rounds=max_engine_rounds,
    )
