"""The host's request pipeline: what happens to the history on its way to the provider, and after.

Follow a request through :meth:`_RequestPipeline._op_prepare`:

1. the history is adopted (:meth:`~contextengine._host_state._HostState._adopt`)
   and its rough size extended by the messages appended since last time;
2. preflight may compact it (:mod:`contextengine._host_compaction`);
3. ``select_context`` may give a view to send instead (fail-open: anything
   unusable means the history itself);
4. what is sent is sanitised and validated, past the part already checked
   (:meth:`_clean_request` for the history, :meth:`_checked_view` for a
   view), and a repair the provider would otherwise have rejected (a tool
   call whose result was lost, a result with no call) is reported once, by
   name, as a warning;
5. the window guarantee (:mod:`contextengine.window`): a request over the
   context window is cut to fit, from counts kept incrementally, or
   :class:`~contextengine.errors.ContextOverflowError` says it cannot be;
6. cache breakpoints are added when asked for.

After the response: :meth:`_op_record_response` hands the usage to the
engine; :meth:`_op_after_tool_calls` may compact or prune once tool results
are in; :meth:`_op_end_turn` lets the engine observe the finished turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contextengine._host_compaction import _CompactionPolicy
from contextengine._host_state import Message, Op, _copy_value, _describe, _hook, logger
from contextengine.messages import Repair, sanitize_tool_pairs, validate_messages
from contextengine.prompt_cache import add_cache_breakpoints
from contextengine.tokens import REPLY_PRIMING_TOKENS
from contextengine.usage import normalize_usage
from contextengine.window import count_schemas, fit_to_window

__all__ = ["_RequestPipeline"]


def _same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    if len(a) != len(b):
        return False
    return all(x is y for x, y in zip(a, b, strict=True)) or list(a) == list(b)


class _RequestPipeline(_CompactionPolicy):
    """Preflight, selection, checks and the hooks around the provider response."""

    def _checked_reported(self, messages: list[Message]) -> list[Message]:
        """``sanitize_tool_pairs`` then ``validate_messages``, reporting what was repaired."""
        repairs: list[Repair] = []
        try:
            cleaned = sanitize_tool_pairs(messages, repairs)
        except Exception:
            validate_messages(messages)  # names the offending message when the input is the cause
            raise
        validate_messages(cleaned)
        for repair in repairs:
            self._report_repair(repair)
        return cleaned

    def _report_repair(self, repair: Repair) -> None:
        """Warn, once per session and call, about a repair that changed what the model sees."""
        if repair.kind == "unanswered_call":
            name = f" ({repair.name})" if repair.name else ""
            message = (
                f"Tool call {repair.call_id}{name} has no result in the history (it was lost);"
                " the call was left out of the request."
            )
            kind = "tool_result_missing"
        elif repair.kind in ("orphan_result", "duplicate_result"):
            what = (
                "answers no tool call" if repair.kind == "orphan_result" else "answers a call twice"
            )
            message = (
                f"A tool result (tool_call_id {repair.call_id or '?'}) {what}; it was left out of"
                " the request."
            )
            kind = "tool_result_orphaned"
        else:
            return  # format repairs (empty text for a thinking-only turn) change nothing seen
        key = f"{kind}:{repair.call_id}:{repair.index}"
        if key in self._repairs_reported:
            return
        self._repairs_reported.add(key)
        self._warn(kind, message, call_id=repair.call_id, tool=repair.name, index=repair.index)

    def _op_select(self, history: list[Message], incoming: Message | None) -> Op[list[Message]]:
        """select_context, fail-open: anything unusable means the original request."""
        budget = self.engine.threshold_tokens or self.context_length
        # Copies: what the engine does to them never reaches the saved history.
        copies = self._history_copy.of(history)
        try:
            selected = yield _hook(
                self.engine.select_context,
                copies,
                blocking=True,
                conversation_messages=copies,
                incoming_message=None if incoming is None else _copy_value(incoming),
                budget_tokens=budget,
            )
        except Exception as exc:
            self._warn(
                "select_context_failed",
                f"select_context failed ({_describe(exc)}); sending the full context.",
                error=_describe(exc),
            )
            return self._clean_request(history)
        if selected is None:
            return self._clean_request(history)
        problem = None
        if not isinstance(selected, list):
            problem = f"returned {type(selected).__name__}, not a list"
        elif not selected:
            problem = "returned an empty list"
        else:
            try:
                return self._checked_view(selected)
            except Exception as exc:
                problem = f"returned invalid messages ({_describe(exc)})"
        self._warn("select_context_failed", f"select_context {problem}; sending the full context.")
        return self._clean_request(history)

    def _checked_view(self, view: list[Message]) -> list[Message]:
        """Sanitise and validate an engine's view, only past the part already checked.

        Only the part the engine says it reused from its previous view
        (:attr:`ContextEngine.last_view_reused`), and which the host itself
        checked then (recognised as the history is: the same objects at the
        first, middle and last place of that prefix), is skipped: an engine
        that grows its view by appending costs what was appended. Any other
        view is checked whole.
        """
        prefix = self._view_prefix
        prefix.sync(view)
        reused = getattr(self.engine, "last_view_reused", 0)
        reused = reused if isinstance(reused, int) and reused > 0 else 0
        start = min(reused, prefix.clean, len(view)) if prefix.count else 0
        if reused < prefix.count:
            # The engine changed its view inside the part the host tracks (lcm
            # rebuilds it around a rewritten summary, keeping the system prompt
            # and the raw messages as the same objects), which the identity
            # check of the first, middle and last message cannot see: its size,
            # which the window guarantee trusts, must be counted again.
            prefix.reset()
        tail = view[start:]
        cleaned = self._checked_reported(tail)
        if _same_messages(cleaned, tail):
            prefix.extend(view)  # its exact size too, kept for the window guarantee
            prefix.clean = len(view)
            return view
        prefix.reset()
        return view[:start] + cleaned

    def _clean_request(self, history: list[Message]) -> list[Message]:
        """Sanitise and validate the history for sending, only past the known-clean prefix."""
        prefix = self._prefix
        prefix.sync(history)
        start = min(prefix.clean, len(history)) if prefix.count else 0
        tail = history[start:]
        if not tail:
            return history
        cleaned = self._checked_reported(tail)
        if _same_messages(cleaned, tail):
            if history is self._history:
                prefix.extend(history)
                prefix.clean = len(history)
            return history
        return history[:start] + cleaned

    def _op_prepare(
        self,
        messages: list[Message],
        incoming: Message | None,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> Op[list[Message]]:
        if not isinstance(messages, list):
            validate_messages(messages)  # raises InvalidMessagesError naming the problem
        self._adopt(messages)
        history = yield from self._op_preflight(messages)
        request = yield from self._op_select(history, incoming)
        request = self._fit(request, tools)
        if self.cache_control:
            request = add_cache_breakpoints(request)
        return request

    def _known_tokens(self, request: list[Message]) -> int | None:
        """The exact size of ``request`` when the host tracks it (the history, the view)."""
        if request is self._history:
            return self._rough(request)
        view = self._view_prefix
        tracked = bool(request) and view.count == view.clean == len(request)
        if tracked and request[-1] is view.last and request[0] is view.first:
            return view.rough + REPLY_PRIMING_TOKENS
        return None

    def _fit(self, request: list[Message], tools: Sequence[dict[str, Any]] | None) -> list[Message]:
        """The window guarantee: ``request`` cut to fit the context window, when it must be."""
        if tools is not self._tools_seen:
            self._tools_seen = tools
            self._tools_tokens = count_schemas(tools, self.model or None)
        fit = fit_to_window(
            request,
            budget=self.context_length,
            tokens=self._known_tokens(request),
            reserved=self._tools_tokens,
            model=self.model or None,
            hint=self._recovery_hint,
            is_own=self._is_own,
        )
        if not fit.cuts:
            return request
        largest = max(fit.cuts, key=lambda cut: cut.tokens_before)
        shortened = sum(1 for cut in fit.cuts if cut.action == "excerpt")
        omitted = len(fit.cuts) - shortened
        message = (
            f"The request did not fit the {self.context_length:,}-token window even after"
            f" compaction: {shortened} message(s) cut to an excerpt and {omitted} left out"
            f" (the largest, a {largest.role} message of {largest.tokens_before:,} tokens);"
            " the history is unchanged."
        )
        self._note_once("window_cut", message, cuts=len(fit.cuts))
        logger.debug("window guarantee cut %d message(s)", len(fit.cuts))
        return fit.messages

    def _is_own(self, message: Message) -> bool:
        try:
            return bool(self.engine.is_own_message(message))
        except Exception:
            return False

    def _recovery_hint(self, message: Message) -> str | None:
        try:
            hint = self.engine.recovery_hint(message)
        except Exception:
            return None
        return hint if isinstance(hint, str) and hint else None

    def _op_after_tool_calls(self, messages: list[Message]) -> Op[list[Message]]:
        self._adopt(messages)
        # The last real usage predates the tool results just appended, which
        # are often the biggest messages of all: judge on the history as it is.
        trigger = "usage over the threshold"
        needed, _blocked = yield from self._op_need(self._rough(messages), "auto", trigger)
        if needed:
            left = self._passes_left()
            if left > 0:
                return (
                    yield from self._compact(
                        messages, phase="auto", trigger=trigger, max_passes=left
                    )
                )
            return messages
        try:
            result = yield _hook(
                self.engine.prune_tool_results_only,
                messages,
                blocking=True,
                current_tokens=self.engine.last_prompt_tokens,
            )
            pruned, _reclaimed = result
            unchanged = pruned is messages  # the engine's way of saying "nothing to prune"
            if unchanged:
                return messages
            if not isinstance(pruned, list):
                raise TypeError(f"returned {type(pruned).__name__}, not a list")
            pruned = self._checked_reported(pruned)
        except Exception as exc:
            self._warn(
                "hook_failed",
                f"prune_tool_results_only failed ({_describe(exc)}); the conversation is "
                "unchanged.",
                error=_describe(exc),
            )
            return messages
        self._adopt(pruned, clean=True)
        return pruned

    def _op_record_response(self, usage: Any) -> Op[dict[str, int]]:
        normalized = normalize_usage(usage, provider=self.provider)
        yield from self._observe(
            "update_from_response", _hook(self.engine.update_from_response, normalized)
        )
        self._rough_at_response = self._last_rough
        # The pass budget bounds compaction between two provider responses: a
        # long agentic turn (hundreds of tool calls before end_turn) must keep
        # compacting as it grows, while one request can still never loop.
        self._turn_passes = 0
        self._turn_notes.discard("compaction_limit")
        return normalized

    def _op_end_turn(self, messages: list[Message], usage: Any, meta: dict[str, Any]) -> Op[None]:
        normalized = None if usage is None else normalize_usage(usage, provider=self.provider)
        self._adopt(messages)
        self._turn_passes = 0
        self._turn_notes.clear()
        yield from self._observe(
            "on_turn_complete",
            _hook(self.engine.on_turn_complete, list(messages), normalized, blocking=True, **meta),
        )
