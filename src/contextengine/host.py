"""The host: drives one context engine's lifecycle from inside an agent loop.

An agent loop that uses :class:`ContextHost` gets every hook of the
:class:`~contextengine.ContextEngine` contract called at the right moment::

    host = ContextHost(engine, model="gpt-4o", context_length=128_000)
    host.start_session("s1")
    history.append(user_message)
    request = host.prepare_request(history)      # preflight, select_context, sanitise
    history = host.history                        # persist this: possibly compacted
    response = provider(request)
    host.record_response(response.usage)
    ...                                           # tool calls: host.after_tool_calls(history)
    host.end_turn(history, response.usage)
    host.end_session(history)

Guarantees
    * The history passed in is never mutated; a compacted history is a new
      list, returned by the call and available as :attr:`ContextHost.history`.
    * Everything sent has passed ``sanitize_tool_pairs`` and ``validate_messages``.
      An engine that raises or returns invalid messages never breaks the
      conversation: the previous messages are kept and an error event is emitted.
    * Observation hooks (``on_turn_complete``, session hooks,
      ``update_from_response``) that raise are logged and swallowed.
    * Every compaction attempt emits a :class:`~contextengine.events.CompactionEvent`.

Speed
    The host's own work per request does not grow with the history. It keeps
    a running rough estimate and a "validated up to here" mark for the
    longest prefix it has already seen, recognised by the identity of the
    message objects at its first, middle and last positions; only messages
    appended since are estimated, sanitised and validated. Agent loops only
    ever append, and every engine transform returns a new list, so this holds;
    a caller that edits old messages in place should call :meth:`forget_cache`.
    ``on_turn_complete`` receives a shallow copy (a new ``list`` holding the
    same message dicts): copying pointers is cheap, the engine cannot change
    the caller's list, and json-serialising engines keep working, which a
    ``MappingProxyType`` per message would break. ``select_context`` gets
    deep copies instead (it may return them as the request, and an engine that
    edits them must not edit the history): each message is copied once, when
    it first appears, and each request costs one list of pointers.

How it is built
    Each operation is a generator that yields the engine hooks it wants called
    (:class:`HookCall`) and receives their results; :class:`ContextHost` runs
    the hooks directly and :class:`~contextengine.AsyncContextHost` awaits
    them (sync hooks that may be slow in a worker thread). The logic is
    written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

from contextengine._host_core import HookCall, Message, Op, _HostCore
from contextengine.compaction_plan import CompressionPlan
from contextengine.engine import call_with_supported_kwargs

__all__ = ["ContextHost", "HookCall"]

T = TypeVar("T")


def _drive(op: Op[T]) -> T:
    """Run an operation, calling each hook synchronously."""
    try:
        call = next(op)
        while True:
            try:
                result = call_with_supported_kwargs(call.fn, *call.args, **call.kwargs)
            except Exception as exc:
                call = op.throw(exc)
            else:
                call = op.send(result)
    except StopIteration as stop:
        return cast(T, stop.value)


class ContextHost(_HostCore):
    """Holds exactly one engine and calls its hooks in the contract's order.

    ``observers`` are callables that receive every
    :class:`~contextengine.events.CompactionEvent` and
    :class:`~contextengine.events.HostEvent`; a plain function works, and one
    that raises never stops the others. ``max_compactions_per_turn`` bounds the
    automatic compress passes of one step of a turn: between two provider
    responses (:meth:`record_response`) or turn ends (:meth:`end_turn`).
    ``cache_control`` adds Anthropic-style prompt-cache breakpoints to the
    system prompt and the last message of each request (on copies).
    ``rotate_session_on_compaction``, a function from the old session id to
    the next, gives the conversation a new session id after every successful
    compaction (hosts whose session store starts a new record there), and
    tells the engine (:meth:`rotate_session`).
    """

    def start_session(self, session_id: str, **kwargs: Any) -> None:
        """Begin (or resume) a session: ``on_session_start``. A real boundary only."""
        _drive(self._op_start_session(session_id, kwargs))

    def switch_model(self, model: str, context_length: int, **kwargs: Any) -> None:
        """Adopt another model: ``update_model`` (base_url, api_key, provider, api_mode pass on)."""
        self.model, self.context_length = model, int(context_length)
        self.provider = str(kwargs.get("provider", self.provider) or "")
        self._update_model(model, self.context_length, **kwargs)

    def prepare_request(
        self,
        messages: list[Message],
        *,
        incoming: Message | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> list[Message]:
        """The message list to send for this request; see the module docstring.

        ``max_tokens``, the request's output limit, is reserved when the
        engine computes its threshold (passed on to ``update_model`` when it
        changes).

        Runs preflight compaction, ``select_context`` (fail-open), sanitising and
        validation, the window guarantee (:mod:`contextengine.window`: ``tools``,
        the schemas the request will carry, are counted in) and cache
        breakpoints. ``messages`` is never mutated; read :attr:`history`
        afterwards for the history to persist. Raises
        :class:`~contextengine.errors.ContextOverflowError` when the system
        prompt, the tool schemas and the latest user message alone exceed the
        context window.
        """
        self._reserve_output(max_tokens)
        return _drive(self._op_prepare(messages, incoming, tools))

    def record_response(self, usage: Any) -> dict[str, int]:
        """After every provider response: normalise ``usage`` and call ``update_from_response``."""
        return _drive(self._op_record_response(usage))

    def after_tool_calls(self, messages: list[Message]) -> list[Message]:
        """After tool results were appended: compress if needed, else prune tool results.

        Returns the history to continue with (also :attr:`history`).
        """
        return _drive(self._op_after_tool_calls(messages))

    def end_turn(self, messages: list[Message], usage: Any = None, **meta: Any) -> None:
        """Close a turn: ``on_turn_complete`` with a copy; usage None for an interrupted turn."""
        _drive(self._op_end_turn(messages, usage, meta))

    def end_session(self, messages: list[Message] | None = None) -> None:
        """A real session end (the user quits): ``on_session_end``."""
        _drive(self._op_end_session(messages))

    def reset_session(
        self,
        new_session_id: str,
        messages: list[Message] | None = None,
        *,
        carry_over: bool = True,
        **kwargs: Any,
    ) -> None:
        """The user starts over: ``on_session_end``, ``on_session_reset``, then
        ``on_session_start(new_session_id, old_session_id=..., boundary_reason="reset",
        **kwargs)`` and, unless ``carry_over`` is False,
        ``carry_over_new_session_context(old, new, messages=<the old history>)``."""
        _drive(self._op_reset_session(new_session_id, messages, kwargs, carry_over))

    def rotate_session(self, new_session_id: str, **kwargs: Any) -> None:
        """The same conversation goes on under ``new_session_id`` (say, after a compaction):
        ``on_session_start(new_session_id, old_session_id=..., boundary_reason="compression")``.

        Nothing is reset. ``rotate_session_on_compaction`` does this after every
        successful compaction.
        """
        _drive(self._op_rotate_session(new_session_id, kwargs))

    def compress_now(
        self,
        messages: list[Message],
        focus_topic: str | None = None,
        *,
        keep_last: int | None = None,
    ) -> list[Message]:
        """The manual ``/compress``: always reported; returns the history to continue with.

        ``keep_last=N`` keeps the last N messages verbatim and compacts
        everything before them (the system prompt excepted); the cut moves
        back to a tool call when it would separate it from its results, and
        the event says how many were kept. An engine whose ``compress`` has no
        ``keep_last`` argument is not called: the event says it cannot.
        Raises ``ValueError`` for a negative N.
        """
        return _drive(self._op_compress_now(messages, focus_topic, keep_last))

    def plan_compression(
        self,
        messages: list[Message],
        *,
        keep_last: int | None = None,
        focus_topic: str | None = None,
    ) -> CompressionPlan | None:
        """What :meth:`compress_now` would summarise, without a summariser call or any change.

        The engine's :meth:`~contextengine.ContextEngine.plan_compression`;
        None when the engine cannot preview (or cannot honour ``keep_last``).
        No event is emitted and the history is not adopted.
        """
        return _drive(self._op_plan_compression(messages, focus_topic, keep_last))

    def handle_overflow(self, messages: list[Message]) -> list[Message]:
        """Recover from a provider "context too long" error: compress (forced) before one retry.

        Returns the compacted history, or ``messages`` itself when nothing could
        be freed (then retrying is pointless).
        """
        return _drive(self._op_handle_overflow(messages))

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The engine's tools, as OpenAI function schemas, to offer the model."""
        return _drive(self._op_tool_schemas())

    def handle_tool_call(self, name: str, args: Any, messages: list[Message] | None = None) -> str:
        """Run one of the engine's tools; always a JSON string, errors included."""
        return _drive(self._op_tool_call(name, args, messages))
