"""The host's logic, written once for both drivers: operations that yield engine hooks.

:class:`_HostCore` is the whole host: the shared state
(:mod:`contextengine._host_state`), the compaction policy
(:mod:`contextengine._host_compaction`), the request pipeline
(:mod:`contextengine._host_requests`), the engine's tools
(:mod:`contextengine._host_tools`), and here the session lifecycle.
:class:`~contextengine.ContextHost` runs its operations' hooks directly and
:class:`~contextengine.AsyncContextHost` awaits them; see ``host.py`` for the
guarantees both give.
"""

from __future__ import annotations

from typing import Any

from contextengine._host_compaction import _checked
from contextengine._host_requests import _RequestPipeline
from contextengine._host_state import HookCall, Message, Op, _hook
from contextengine._host_tools import _ToolRouting

__all__ = ["HookCall", "Message", "Op", "_HostCore", "_checked"]


class _HostCore(_RequestPipeline, _ToolRouting):
    """State and logic shared by the sync and async hosts; operations are generators."""

    def _op_start_session(self, session_id: str, kwargs: dict[str, Any]) -> Op[None]:
        self.session_id = session_id
        self._turn_passes = 0
        self._turn_notes.clear()
        self._repairs_reported.clear()
        yield from self._observe(
            "on_session_start",
            _hook(self.engine.on_session_start, session_id, blocking=True, **kwargs),
        )

    def _op_end_session(self, messages: list[Message] | None) -> Op[None]:
        history = self._history if messages is None else messages
        if self.session_id is None:
            return
        yield from self._observe(
            "on_session_end",
            _hook(self.engine.on_session_end, self.session_id, list(history), blocking=True),
        )

    def _op_reset_session(
        self,
        new_session_id: str,
        messages: list[Message] | None,
        kwargs: dict[str, Any] | None = None,
        carry_over: bool = True,
    ) -> Op[None]:
        old_session_id = self.session_id
        previous = list(self._history if messages is None else messages)
        yield from self._op_end_session(messages)
        yield from self._observe(
            "on_session_reset", _hook(self.engine.on_session_reset, blocking=True)
        )
        self._history = []
        self._prefix.reset()
        self._view_prefix.reset()
        self._history_copy.reset()
        self._rough_at_response = 0
        start: dict[str, Any] = {}
        if old_session_id is not None:
            start = {"old_session_id": old_session_id, "boundary_reason": "reset"}
        yield from self._op_start_session(new_session_id, {**start, **(kwargs or {})})
        carry = getattr(self.engine, "carry_over_new_session_context", None)
        if carry_over and old_session_id is not None and callable(carry):
            yield from self._observe(
                "carry_over_new_session_context",
                _hook(carry, old_session_id, new_session_id, blocking=True, messages=previous),
            )
