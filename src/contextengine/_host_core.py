"""The host's logic, written once for both drivers: operations that yield engine hooks.

:class:`_HostCore` holds the state of one host (engine, history, prefix
tracking, observers) and implements every operation as a generator that
yields the :class:`HookCall` it wants made and receives its result.
:class:`~contextengine.ContextHost` runs those hooks directly and
:class:`~contextengine.AsyncContextHost` awaits them; see ``host.py`` for the
guarantees both give.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contextengine.engine import (
    ContextEngine,
    automatic_compaction_status_message,
    call_with_supported_kwargs,
    sanitize_memory_context,
)
from contextengine.events import CompactionEvent, Event, HostEvent, Level, Observer, Phase, notify
from contextengine.messages import sanitize_tool_pairs, validate_messages
from contextengine.prompt_cache import add_cache_breakpoints
from contextengine.tokens import REPLY_PRIMING_TOKENS, estimate_tokens_rough, message_tokens
from contextengine.usage import normalize_usage

__all__ = ["HookCall", "Message", "Op", "_HostCore"]

logger = logging.getLogger("contextengine.host")

Message = dict[str, Any]
T = TypeVar("T")

_PRIMING = REPLY_PRIMING_TOKENS
#: should_compress_preflight is asked when the messages added since the last
#: real usage are estimated above this share of the context window (a big paste).
_PREFLIGHT_GROWTH_SHARE = 0.10


@dataclass(slots=True)
class HookCall:
    """One engine hook an operation wants called; drivers execute it and send back the result.

    ``blocking`` marks hooks that may do real work (a summariser call, a
    database write); the async driver runs those of a sync engine in a thread.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    blocking: bool = False


Op = Generator[HookCall, Any, T]


def _hook(fn: Callable[..., Any], *args: Any, blocking: bool = False, **kwargs: Any) -> HookCall:
    return HookCall(fn, args, kwargs, blocking)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _rough_one(msg: Message) -> int:
    # Exact, not chars/4: the tokens cache makes this one encoding per new
    # message, and chars/4 underestimates code and logs by a third, which let
    # requests pass preflight that were over the window.
    return message_tokens(msg)


class _Prefix:
    """What the host knows about the longest prefix of the history it has seen.

    ``rough`` is the rough estimate of ``count`` messages (priming excluded);
    ``clean`` is how many leading messages are known to pass sanitising and
    validation unchanged and to hold no unanswered tool call.
    """

    __slots__ = ("clean", "count", "first", "last", "mid", "mid_index", "rough")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.rough = 0
        self.clean = 0
        self.first: Message | None = None
        self.last: Message | None = None
        self.mid: Message | None = None
        self.mid_index = 0

    def sync(self, messages: Sequence[Message]) -> None:
        """Forget everything unless ``messages`` still starts with the known prefix."""
        count = self.count
        if count and (
            len(messages) < count
            or messages[count - 1] is not self.last
            or messages[0] is not self.first
            or messages[self.mid_index] is not self.mid
        ):
            self.reset()

    def extend(self, messages: Sequence[Message], *, estimate: bool = True) -> int:
        """Account for the messages appended since; returns the rough estimate of all.

        With ``estimate=False`` only the identity of the prefix is tracked (the
        rough estimate is not kept up to date): for lists that are validated
        incrementally but never estimated, such as an engine's views.
        """
        self.sync(messages)
        total = len(messages)
        if total > self.count:
            if estimate:
                rough = self.rough
                for msg in messages[self.count :]:
                    rough += _rough_one(msg)
                self.rough = rough
            self.count = total
            self.first = messages[0]
            self.last = messages[-1]
            self.mid_index = total // 2
            self.mid = messages[self.mid_index]
        return self.rough + _PRIMING


def _same_messages(a: Sequence[Message], b: Sequence[Message]) -> bool:
    if len(a) != len(b):
        return False
    return all(x is y for x, y in zip(a, b, strict=True)) or list(a) == list(b)


def _checked(messages: list[Message]) -> list[Message]:
    """``sanitize_tool_pairs`` then ``validate_messages``; raises InvalidMessagesError."""
    try:
        cleaned = sanitize_tool_pairs(messages)
    except Exception:
        validate_messages(messages)  # names the offending message when the input is the cause
        raise
    validate_messages(cleaned)
    return cleaned


class _HostCore:
    """State and logic shared by the sync and async hosts; operations are generators."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        model: str,
        context_length: int,
        observers: Iterable[Observer] = (),
        max_compactions_per_turn: int = 3,
        cache_control: bool = False,
    ) -> None:
        if not isinstance(engine, ContextEngine):
            raise TypeError(f"engine must be a ContextEngine, got {type(engine).__qualname__}")
        self.engine = engine
        self.model = model
        self.context_length = int(context_length)
        self.observers: list[Observer] = list(observers)
        self.max_compactions_per_turn = max(1, int(max_compactions_per_turn))
        self.cache_control = cache_control
        #: Text from a memory provider, passed to compress when non-empty.
        self.memory_context = ""
        #: Provider hint for normalize_usage ("openai", "anthropic"...).
        self.provider = ""
        self.session_id: str | None = None
        #: Successful compactions since construction (all phases).
        self.compactions = 0
        self._history: list[Message] = []
        self._prefix = _Prefix()
        # The last view select_context returned, validated: an engine that extends
        # its view between requests (lcm) gets only the appended messages checked.
        self._view_prefix = _Prefix()
        self._turn_passes = 0
        self._turn_notes: set[str] = set()
        self._rough_at_response = 0
        self._last_rough = 0
        self._update_model(model, self.context_length)

    # ------------------------------------------------------------------ plumbing

    @property
    def history(self) -> list[Message]:
        """The conversation to persist: the last history seen, compacted if the host did so."""
        return self._history

    @property
    def engine_name(self) -> str:
        try:
            return str(self.engine.name)
        except Exception:
            return type(self.engine).__name__

    def status(self) -> dict[str, Any]:
        """The engine's ``get_status()`` plus the host's compaction count and rough estimate."""
        try:
            status = dict(self.engine.get_status())
        except Exception as exc:
            status = {"error": _describe(exc)}
        status.setdefault("compression_count", self.compactions)
        status["host_compactions"] = self.compactions
        status["rough_tokens"] = self._last_rough
        return status

    def add_observer(self, observer: Observer) -> None:
        """Attach one more observer; observers are stackable and isolated."""
        self.observers.append(observer)

    def forget_cache(self) -> None:
        """Drop the per-prefix estimates: call after editing old history messages in place."""
        self._prefix.reset()
        self._view_prefix.reset()

    def _emit(self, event: Event) -> None:
        notify(self.observers, event)

    def _warn(self, kind: str, message: str, *, error: str | None = None, **details: Any) -> None:
        logger.warning("%s", message)
        self._emit(
            HostEvent(
                kind=kind,
                message=message,
                level="warning",
                engine=self.engine_name,
                session_id=self.session_id,
                error=error,
                details=details,
            )
        )

    def _update_model(self, model: str, context_length: int, **kwargs: Any) -> None:
        try:
            call_with_supported_kwargs(self.engine.update_model, model, context_length, **kwargs)
        except Exception as exc:
            self._warn(
                "hook_failed", f"update_model failed: {_describe(exc)}", error=_describe(exc)
            )

    def _rough(self, messages: list[Message]) -> int:
        """Rough estimate, incremental for the tracked history, full for other lists."""
        if messages is self._history:
            return self._prefix.extend(messages)
        return estimate_tokens_rough(messages)

    def _adopt(self, messages: list[Message], *, clean: bool = False) -> None:
        """Make ``messages`` the tracked history (a compacted one is already clean)."""
        if messages is not self._history:
            self._history = messages
            self._prefix.sync(messages)
        if clean:
            self._prefix.reset()
            self._prefix.extend(messages)
            self._prefix.clean = len(messages)

    def _observe(self, name: str, call: HookCall) -> Op[Any]:
        """Run an observation hook; an exception is logged, reported and swallowed."""
        try:
            return (yield call)
        except Exception as exc:
            logger.exception("context engine hook %s raised", name)
            self._warn("hook_failed", f"{name} failed: {_describe(exc)}", error=_describe(exc))
            return None

    # ------------------------------------------------------------------ session

    def _op_start_session(self, session_id: str, kwargs: dict[str, Any]) -> Op[None]:
        self.session_id = session_id
        self._turn_passes = 0
        self._turn_notes.clear()
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

    def _op_reset_session(self, new_session_id: str, messages: list[Message] | None) -> Op[None]:
        yield from self._op_end_session(messages)
        yield from self._observe(
            "on_session_reset", _hook(self.engine.on_session_reset, blocking=True)
        )
        self._history = []
        self._prefix.reset()
        self._rough_at_response = 0
        yield from self._op_start_session(new_session_id, {})

    # ------------------------------------------------------------------ compaction

    def _stats(self) -> dict[str, Any]:
        """Engine-reported details of its last compress call, when it offers them.

        Read from ``engine.last_compression`` (an object or mapping; see
        :attr:`ContextEngine.last_compression`): ``summarizer_calls`` and
        ``fallback_used`` go into the event.
        """
        report = getattr(self.engine, "last_compression", None)
        if report is None:
            return {}
        if isinstance(report, Mapping):
            return dict(report)
        keys = ("summarizer_calls", "fallback_used")
        return {key: getattr(report, key) for key in keys if hasattr(report, key)}

    def _compact(
        self,
        messages: list[Message],
        *,
        phase: Phase,
        reason: str,
        max_passes: int,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> Op[list[Message]]:
        """Compress up to ``max_passes`` times, stopping when a pass frees nothing.

        Returns the new history, or ``messages`` itself when nothing changed.
        Emits exactly one CompactionEvent.
        """
        started = time.perf_counter()
        before = self._rough(messages)
        current, tokens = messages, before
        passes = summarizer_calls = 0
        fallback_used = False
        error: str | None = None
        extra: dict[str, Any] = {}
        if self.memory_context.strip():
            extra["memory_context"] = sanitize_memory_context(self.memory_context)
        real = self.engine.last_prompt_tokens
        while passes < max_passes:
            passes += 1
            hint = max(tokens, real) if passes == 1 and real > 0 else tokens
            try:
                result = yield _hook(
                    self.engine.compress,
                    current,
                    blocking=True,
                    current_tokens=hint,
                    focus_topic=focus_topic,
                    force=force,
                    **extra,
                )
                if not isinstance(result, list):
                    raise TypeError(f"compress returned {type(result).__name__}, not a list")
                result = _checked(result)
            except Exception as exc:
                error = _describe(exc)
                logger.warning("compress failed in phase %s: %s", phase, error, exc_info=True)
                break
            stats = self._stats()
            summarizer_calls += int(stats.get("summarizer_calls", 0) or 0)
            fallback_used = fallback_used or bool(stats.get("fallback_used", False))
            after = estimate_tokens_rough(result)
            if after >= tokens and len(result) >= len(current):
                break  # no progress: another pass would only repeat the work
            current, tokens = result, after
            if phase == "manual" or not (yield _hook(self.engine.should_compress, after)):
                break
        if phase != "manual":
            self._turn_passes += passes
        changed = current is not messages
        if changed:
            self.compactions += 1
            self._adopt(current, clean=True)
        extra_keys = {k: v for k, v in self._stats().items() if k in ("engine_message",)}
        event_message, level = self._describe_compaction(
            phase, changed, error, before, tokens, len(messages), len(current), extra_keys
        )
        self._emit(
            CompactionEvent(
                phase=phase,
                reason=reason,
                tokens_before=before,
                tokens_after=tokens,
                messages_before=len(messages),
                messages_after=len(current),
                summarizer_calls=summarizer_calls,
                duration_s=time.perf_counter() - started,
                fallback_used=fallback_used,
                aborted=not changed,
                message=event_message,
                level=level,
                passes=passes,
                engine=self.engine_name,
                session_id=self.session_id,
                error=error,
            )
        )
        return current

    def _describe_compaction(
        self,
        phase: Phase,
        changed: bool,
        error: str | None,
        before: int,
        after: int,
        count_before: int,
        count_after: int,
        extra: dict[str, Any],
    ) -> tuple[str | None, Level]:
        """The user-visible line and level of a compaction attempt."""
        detail = f"{before:,} → {after:,} tokens, {count_before} → {count_after} messages"
        if error is not None:
            return (
                f"Context compaction failed ({error}); the conversation is unchanged.",
                "error",
            )
        if not changed:
            return "Context compaction freed nothing; the conversation is unchanged.", "warning"
        if phase == "manual":
            return f"Compacted the conversation ({detail}).", "info"
        default = f"Context compacted automatically ({detail})."
        try:
            line = automatic_compaction_status_message(
                self.engine,
                phase=phase,
                default_message=default,
                tokens_before=before,
                tokens_after=after,
                **extra,
            )
        except Exception as exc:
            logger.warning("get_automatic_compaction_status_message raised: %s", _describe(exc))
            line = default
        return line, "info"

    def _note_once(self, kind: str, message: str, **details: Any) -> None:
        """A warning that would otherwise repeat on every request of the turn."""
        if message not in self._turn_notes:
            self._turn_notes.add(message)
            self._warn(kind, message, **details)

    def _passes_left(self) -> int:
        left = self.max_compactions_per_turn - self._turn_passes
        if left <= 0:
            self._note_once(
                "compaction_limit",
                f"Context compaction skipped: {self.max_compactions_per_turn} passes already "
                "ran this turn.",
            )
        return left

    def _op_decide(self, call: HookCall, default: Any) -> Op[Any]:
        """Run a decision hook; an exception means "no" (the default), with a warning."""
        try:
            return (yield call)
        except Exception as exc:
            name = getattr(call.fn, "__name__", "hook")
            self._note_once("hook_failed", f"{name} failed: {_describe(exc)}", error=_describe(exc))
            return default

    def _op_need(self, tokens: int | None) -> Op[tuple[bool, bool]]:
        """``should_compress_info`` as (needed, blocked); a block is reported once per turn.

        Engines may give a reason with every "no" (the compressor says
        ``below_threshold``); it is a warning only when the tokens are at or
        over the engine's threshold, that is when compaction was wanted but blocked.
        """
        engine = self.engine
        info = yield from self._op_decide(_hook(engine.should_compress_info, tokens), (False, None))
        needed, reason = (bool(info[0]), info[1]) if isinstance(info, tuple) else (bool(info), None)
        size = engine.last_prompt_tokens if tokens is None else tokens
        blocked = bool(not needed and reason and 0 < engine.threshold_tokens <= size)
        if blocked:
            self._note_once("compaction_blocked", f"Context compaction skipped: {reason}")
        return needed, blocked

    def _op_preflight(self, messages: list[Message]) -> Op[list[Message]]:
        rough = self._rough(messages)
        self._last_rough = rough
        engine = self.engine
        if (
            yield from self._op_decide(
                _hook(engine.should_defer_preflight_to_real_usage, rough), False
            )
        ):
            return messages
        needed, blocked = yield from self._op_need(rough)
        why = "estimated tokens over the threshold"
        if blocked:
            return messages  # the engine's own block (a cooldown) also holds for its preflight
        if not needed:
            no_real_usage = engine.last_prompt_tokens <= 0
            growth = rough - self._rough_at_response
            big_input = growth > _PREFLIGHT_GROWTH_SHARE * max(1, self.context_length)
            if no_real_usage or big_input:
                needed = bool(
                    (
                        yield from self._op_decide(
                            _hook(engine.should_compress_preflight, messages, blocking=True), False
                        )
                    )
                )
                why = "the engine's preflight check"
        if not needed:
            return messages
        left = self._passes_left()
        if left <= 0:
            return messages
        return (yield from self._compact(messages, phase="preflight", reason=why, max_passes=left))

    # ------------------------------------------------------------------ request

    def _op_select(self, history: list[Message], incoming: Message | None) -> Op[list[Message]]:
        """select_context, fail-open: anything unusable means the original request."""
        budget = self.engine.threshold_tokens or self.context_length
        try:
            selected = yield _hook(
                self.engine.select_context,
                history,
                blocking=True,
                conversation_messages=history,
                incoming_message=incoming,
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
        tail = view[start:]
        cleaned = _checked(tail)
        if _same_messages(cleaned, tail):
            prefix.extend(view, estimate=False)
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
        cleaned = _checked(tail)
        if _same_messages(cleaned, tail):
            if history is self._history:
                prefix.extend(history)
                prefix.clean = len(history)
            return history
        return history[:start] + cleaned

    def _op_prepare(self, messages: list[Message], incoming: Message | None) -> Op[list[Message]]:
        if not isinstance(messages, list):
            validate_messages(messages)  # raises InvalidMessagesError naming the problem
        self._adopt(messages)
        history = yield from self._op_preflight(messages)
        request = yield from self._op_select(history, incoming)
        if self.cache_control:
            request = add_cache_breakpoints(request)
        return request

    def _op_after_tool_calls(self, messages: list[Message]) -> Op[list[Message]]:
        self._adopt(messages)
        # The last real usage predates the tool results just appended, which
        # are often the biggest messages of all: judge on the history as it is.
        needed, _blocked = yield from self._op_need(self._rough(messages))
        if needed:
            left = self._passes_left()
            if left > 0:
                return (
                    yield from self._compact(
                        messages, phase="auto", reason="usage over the threshold", max_passes=left
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
            pruned = _checked(pruned)
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

    def _op_compress_now(
        self, messages: list[Message], focus_topic: str | None
    ) -> Op[list[Message]]:
        self._adopt(messages)
        has_content = yield from self._op_decide(
            _hook(self.engine.has_content_to_compress, messages, blocking=True), True
        )
        if not has_content:
            size = self._rough(messages)
            self._emit(
                CompactionEvent(
                    phase="manual",
                    reason="manual request",
                    tokens_before=size,
                    tokens_after=size,
                    messages_before=len(messages),
                    messages_after=len(messages),
                    aborted=True,
                    message="Nothing to compress.",
                    level="info",
                    engine=self.engine_name,
                    session_id=self.session_id,
                )
            )
            return messages
        reason = "manual request" + (f" (focus: {focus_topic})" if focus_topic else "")
        return (
            yield from self._compact(
                messages,
                phase="manual",
                reason=reason,
                max_passes=1,
                focus_topic=focus_topic,
                force=True,
            )
        )

    def _op_handle_overflow(self, messages: list[Message]) -> Op[list[Message]]:
        self._adopt(messages)
        # A rejected request must be recovered even past the per-turn limit: one pass.
        passes = max(1, self.max_compactions_per_turn - self._turn_passes)
        return (
            yield from self._compact(
                messages,
                phase="overflow",
                reason="the provider rejected the request as too long",
                max_passes=passes,
                force=True,
            )
        )

    def _op_tool_schemas(self) -> Op[list[dict[str, Any]]]:
        try:
            schemas = yield _hook(self.engine.get_tool_schemas, blocking=True)
        except Exception as exc:
            self._warn("hook_failed", f"get_tool_schemas failed: {_describe(exc)}")
            return []
        return list(schemas or [])

    def _op_tool_call(self, name: str, args: Any, messages: list[Message] | None) -> Op[str]:
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                return json.dumps({"error": f"arguments are not valid JSON: {exc}"})
        kwargs: dict[str, Any] = {}
        if messages is not None:
            kwargs["messages"] = messages
        try:
            result = yield _hook(
                self.engine.handle_tool_call, name, dict(args or {}), blocking=True, **kwargs
            )
        except Exception as exc:
            return json.dumps({"error": f"{name} failed: {_describe(exc)}"})
        if isinstance(result, str):
            return result
        try:
            return json.dumps(result, default=str)
        except (TypeError, ValueError):
            return json.dumps({"result": str(result)})
