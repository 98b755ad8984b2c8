"""``AsyncContextHost``: the host's lifecycle as coroutines, for asyncio agent loops.

The logic is :class:`~contextengine.ContextHost`'s own (both run the same
operation generators); only the way a hook is called differs:

* a hook written as a coroutine function (an async engine) is awaited;
* a sync hook that may do real work (compress, select_context, prune, turn and
  session observation, tools) runs in a worker thread via
  :func:`asyncio.to_thread`, so a summariser call never blocks the event loop;
* cheap decision hooks (``should_compress``, ``update_from_response``...) and
  hooks the engine did not override run inline: a thread hop would cost more
  than the call.

Operations on one host are serialised by a lock: a host drives one
conversation, and two interleaved requests would race on its history.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any, TypeVar, cast

from contextengine._host_core import HookCall, Message, Op, _HostCore
from contextengine.compaction_plan import CompressionPlan
from contextengine.engine import ContextEngine, call_with_supported_kwargs

__all__ = ["AsyncContextHost"]

T = TypeVar("T")


def _is_default(fn: Any) -> bool:
    """Whether ``fn`` is a bound ContextEngine method the engine did not override."""
    func = getattr(fn, "__func__", None)
    name = getattr(fn, "__name__", "")
    return func is not None and func is getattr(ContextEngine, name, None)


async def _run_hook(call: HookCall) -> Any:
    fn = call.fn
    if inspect.iscoroutinefunction(fn):
        return await call_with_supported_kwargs(fn, *call.args, **call.kwargs)
    if call.blocking and not _is_default(fn):
        result = await asyncio.to_thread(call_with_supported_kwargs, fn, *call.args, **call.kwargs)
    else:
        result = call_with_supported_kwargs(fn, *call.args, **call.kwargs)
    if inspect.isawaitable(result):  # a sync wrapper returning a coroutine
        result = await result
    return result


async def _adrive(op: Op[T]) -> T:
    """Run an operation, awaiting each hook."""
    try:
        call = next(op)
        while True:
            try:
                result = await _run_hook(call)
            except Exception as exc:
                call = op.throw(exc)
            else:
                call = op.send(result)
    except StopIteration as stop:
        return cast(T, stop.value)


class AsyncContextHost(_HostCore):
    """:class:`~contextengine.ContextHost` for asyncio: the same methods, as coroutines.

    Construction is synchronous (``update_model`` is a cheap setter). Engines
    may be sync or async; see the module docstring for where hooks run.
    """

    def __init__(self, engine: ContextEngine, **kwargs: Any) -> None:
        super().__init__(engine, **kwargs)
        self._lock = asyncio.Lock()

    async def _run(self, op: Op[T]) -> T:
        async with self._lock:
            return await _adrive(op)

    async def start_session(self, session_id: str, **kwargs: Any) -> None:
        """Begin (or resume) a session: ``on_session_start``."""
        await self._run(self._op_start_session(session_id, kwargs))

    async def switch_model(self, model: str, context_length: int, **kwargs: Any) -> None:
        """Adopt another model: ``update_model``."""
        self.model, self.context_length = model, int(context_length)
        self.provider = str(kwargs.get("provider", self.provider) or "")
        self._update_model(model, self.context_length, **kwargs)

    async def prepare_request(
        self,
        messages: list[Message],
        *,
        incoming: Message | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> list[Message]:
        """The message list to send for this request (see ``ContextHost.prepare_request``)."""
        self._reserve_output(max_tokens)
        return await self._run(self._op_prepare(messages, incoming, tools))

    async def record_response(self, usage: Any) -> dict[str, int]:
        """After every provider response: ``update_from_response`` with normalised usage."""
        return await self._run(self._op_record_response(usage))

    async def after_tool_calls(self, messages: list[Message]) -> list[Message]:
        """After tool results were appended: compress if needed, else prune tool results."""
        return await self._run(self._op_after_tool_calls(messages))

    async def end_turn(self, messages: list[Message], usage: Any = None, **meta: Any) -> None:
        """Close a turn: ``on_turn_complete`` with a copy."""
        await self._run(self._op_end_turn(messages, usage, meta))

    async def end_session(self, messages: list[Message] | None = None) -> None:
        """A real session end: ``on_session_end``."""
        await self._run(self._op_end_session(messages))

    async def reset_session(
        self,
        new_session_id: str,
        messages: list[Message] | None = None,
        *,
        carry_over: bool = True,
        **kwargs: Any,
    ) -> None:
        """End the session, ``on_session_reset``, start ``new_session_id``, carry over
        (see ``ContextHost.reset_session``)."""
        await self._run(self._op_reset_session(new_session_id, messages, kwargs, carry_over))

    async def rotate_session(self, new_session_id: str, **kwargs: Any) -> None:
        """The same conversation under a new session id (see ``ContextHost.rotate_session``)."""
        await self._run(self._op_rotate_session(new_session_id, kwargs))

    async def compress_now(
        self,
        messages: list[Message],
        focus_topic: str | None = None,
        *,
        keep_last: int | None = None,
    ) -> list[Message]:
        """The manual ``/compress``; ``keep_last`` as in :meth:`ContextHost.compress_now`."""
        return await self._run(self._op_compress_now(messages, focus_topic, keep_last))

    async def plan_compression(
        self,
        messages: list[Message],
        *,
        keep_last: int | None = None,
        focus_topic: str | None = None,
    ) -> CompressionPlan | None:
        """What :meth:`compress_now` would summarise; see :meth:`ContextHost.plan_compression`."""
        return await self._run(self._op_plan_compression(messages, focus_topic, keep_last))

    async def handle_overflow(self, messages: list[Message]) -> list[Message]:
        """Compress (forced) after a provider "context too long" error, before one retry."""
        return await self._run(self._op_handle_overflow(messages))

    async def tool_schemas(self) -> list[dict[str, Any]]:
        """The engine's tools, as OpenAI function schemas."""
        return await self._run(self._op_tool_schemas())

    async def handle_tool_call(
        self, name: str, args: Any, messages: list[Message] | None = None
    ) -> str:
        """Run one of the engine's tools; always a JSON string."""
        return await self._run(self._op_tool_call(name, args, messages))
