"""The host's compaction policy: when to compact, how many passes, and what to tell the user.

Compaction is asked for at three moments (see ``host.py``): before a request
(*preflight*, on the rough estimate), after tool results (*auto*, on the
history as it is), and on demand (*manual*) or after the provider rejected a
request (*overflow*). Each attempt runs at most a few ``compress`` passes
(``max_compactions_per_turn`` between two provider responses) and stops as
soon as a pass frees nothing.

Every attempt emits one :class:`~contextengine.events.CompactionEvent` that
says what happened, truthfully: ``reason`` is a machine-readable cause
(:data:`~contextengine.failure_policy.FailureCause`, or ``"engine_error"``
when the engine raised) whenever the compaction failed, fell back to the
offline summary, freed nothing or was skipped; ``level`` is ``"error"`` for
an auth failure or a crash, ``"warning"`` for the other causes, ``"info"``
when all went as planned; ``error`` has the provider's own words; ``message``
is the sentence a person reads, with when automatic compaction resumes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from contextengine._host_state import Message, Op, _describe, _hook, _HostState, logger
from contextengine.compaction_plan import CompressionPlan, KeepCut, accepts_keyword, keep_last_cut
from contextengine.engine import automatic_compaction_status_message, sanitize_memory_context
from contextengine.events import CompactionEvent, Level, Phase
from contextengine.failure_policy import FAILURE_CAUSES, describe_cause
from contextengine.messages import sanitize_tool_pairs, validate_messages
from contextengine.tokens import count_message_tokens

__all__ = ["_CompactionPolicy", "_checked"]

#: should_compress_preflight is asked when the messages added since the last
#: real usage are estimated above this share of the context window (a big paste).
_PREFLIGHT_GROWTH_SHARE = 0.10
#: Who wrote the summary and who failed: copied from the engine's report to the event.
_SUMMARY_KEYS = ("summary_model", "summary_error", "summary_failed_model")
#: What the host reads of ``engine.last_compression`` for its event.
_REPORT_KEYS = (
    "summarizer_calls",
    "fallback_used",
    "cause",
    "error",
    "engine_message",
    "warning",
    *_SUMMARY_KEYS,
)


def _checked(messages: list[Message]) -> list[Message]:
    """``sanitize_tool_pairs`` then ``validate_messages``; raises InvalidMessagesError."""
    try:
        cleaned = sanitize_tool_pairs(messages)
    except Exception:
        validate_messages(messages)  # names the offending message when the input is the cause
        raise
    validate_messages(cleaned)
    return cleaned


def _merge_summary_fields(summary: dict[str, str | None], report: Mapping[str, Any]) -> None:
    """Add one pass's ``summary_*`` fields: the writer replaces, the failures accumulate."""
    model = report.get("summary_model")
    if model:
        summary["summary_model"] = str(model)
    for key in ("summary_error", "summary_failed_model"):
        value = report.get(key)
        if value and str(value) not in (summary[key] or ""):
            separator = "; " if key == "summary_error" else ", "
            summary[key] = f"{summary[key]}{separator}{value}" if summary[key] else str(value)


def _cause_of_block(detail: str) -> str:
    """The cause in an engine's "no" (``"cooldown:60"`` → ``"cooldown"``), or the text itself."""
    head = detail.split(":", 1)[0].strip()
    return head if head in FAILURE_CAUSES else detail


class _CompactionPolicy(_HostState):
    """When the host compacts, and the event that says what happened."""

    def _report(self) -> dict[str, Any]:
        """Engine-reported details of its last compress call, when it offers them.

        Read from ``engine.last_compression`` (an object or mapping; see
        :attr:`ContextEngine.last_compression`): ``summarizer_calls``,
        ``fallback_used``, ``cause``, ``error``, ``summary_model``,
        ``summary_error`` and ``summary_failed_model`` go into the event;
        ``warning`` becomes an ``engine_warning`` event of its own.
        """
        report = getattr(self.engine, "last_compression", None)
        if report is None:
            return {}
        if isinstance(report, Mapping):
            return dict(report)
        return {key: getattr(report, key) for key in _REPORT_KEYS if hasattr(report, key)}

    def _resume_note(self) -> str:
        """ " Automatic compaction resumes at …" when the engine is cooling down, else ""."""
        try:
            status = self.engine.get_status()
        except Exception:
            return ""
        when = status.get("automatic_compaction_resumes_at") if isinstance(status, dict) else None
        if not when:
            return ""
        return f" Automatic compaction resumes at {str(when).replace('+00:00', ' UTC')}."

    def _compact(
        self,
        messages: list[Message],
        *,
        phase: Phase,
        trigger: str,
        max_passes: int,
        focus_topic: str | None = None,
        force: bool = False,
        kept: KeepCut | None = None,
    ) -> Op[list[Message]]:
        """Compress up to ``max_passes`` times, stopping when a pass frees nothing.

        Returns the new history, or ``messages`` itself when nothing changed.
        Emits exactly one CompactionEvent. ``kept`` is the cut of a manual
        ``keep_last`` compaction: passed on as ``keep_last`` and told to the user.
        """
        started = time.perf_counter()
        before = self._rough(messages)
        current, tokens = messages, before
        passes = summarizer_calls = 0
        fallback_used = False
        error: str | None = None
        cause: str | None = None
        engine_error: str | None = None
        # Per pass, the last pass that says wins for the model; failures accumulate.
        summary: dict[str, str | None] = dict.fromkeys(_SUMMARY_KEYS)
        extra: dict[str, Any] = {}
        if self.memory_context.strip():
            extra["memory_context"] = sanitize_memory_context(self.memory_context)
        if kept is not None:
            extra["keep_last"] = kept.requested
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
            report = self._report()
            if report.get("warning"):
                # The engine went on after a failure of its own (the compressor's
                # archive): the compaction is fine, the user should still know.
                self._warn("engine_warning", str(report["warning"]))
            summarizer_calls += int(report.get("summarizer_calls", 0) or 0)
            fallback_used = fallback_used or bool(report.get("fallback_used", False))
            if report.get("cause") and cause is None:
                cause, engine_error = str(report["cause"]), report.get("error") or None
            _merge_summary_fields(summary, report)
            # Exact, like ``before``: a rough estimate beside an exact one can
            # make a compaction look like it grew the conversation.
            after = count_message_tokens(result, self.model or None)
            if after >= tokens and len(result) >= len(current):
                break  # no progress: another pass would only repeat the work
            current, tokens = result, after
            if cause == "auth":
                break  # another pass would only be refused again
            if phase == "manual" or not (yield _hook(self.engine.should_compress, after)):
                break
        if phase != "manual":
            self._turn_passes += passes
        changed = current is not messages
        if changed:
            self.compactions += 1
            self._adopt(current, clean=True)
            if self.rotate_session_on_compaction is not None and self.session_id is not None:
                yield from self._op_rotate_after_compaction()
        engine_message = self._report().get("engine_message")
        message, level, reason = self._outcome(
            phase=phase,
            changed=changed,
            error=error,
            cause=cause,
            engine_error=engine_error,
            fallback_used=fallback_used,
            before=before,
            after=tokens,
            count_before=len(messages),
            count_after=len(current),
            extra={"engine_message": engine_message} if engine_message else {},
            cut=kept,
        )
        if level != "info":
            logger.warning("%s", message)
        self._emit(
            CompactionEvent(
                phase=phase,
                reason=reason,
                trigger=trigger,
                tokens_before=before,
                tokens_after=tokens,
                messages_before=len(messages),
                messages_after=len(current),
                summarizer_calls=summarizer_calls,
                duration_s=time.perf_counter() - started,
                fallback_used=fallback_used,
                aborted=not changed,
                message=message,
                level=level,
                passes=passes,
                engine=self.engine_name,
                session_id=self.session_id,
                error=error or engine_error,
                **summary,
            )
        )
        return current

    def _op_rotate_after_compaction(self) -> Op[None]:
        """Give the conversation the next session id (``rotate_session_on_compaction``)."""
        assert self.rotate_session_on_compaction is not None and self.session_id is not None
        try:
            new_session_id = str(self.rotate_session_on_compaction(self.session_id))
        except Exception as exc:
            self._warn("hook_failed", f"rotate_session_on_compaction failed: {_describe(exc)}")
            return
        yield from self._op_rotate_session(new_session_id, {})

    def _op_rotate_session(self, new_session_id: str, kwargs: dict[str, Any]) -> Op[None]:
        """The same conversation under a new session id: ``on_session_start`` with
        ``old_session_id`` and ``boundary_reason="compression"``; nothing is reset."""
        old_session_id = self.session_id
        if old_session_id is None or new_session_id == old_session_id:
            return
        self.session_id = new_session_id
        start = {"old_session_id": old_session_id, "boundary_reason": "compression", **kwargs}
        yield from self._observe(
            "on_session_start",
            _hook(self.engine.on_session_start, new_session_id, blocking=True, **start),
        )

    def _outcome(
        self,
        *,
        phase: Phase,
        changed: bool,
        error: str | None,
        cause: str | None,
        engine_error: str | None,
        before: int,
        fallback_used: bool = True,
        after: int,
        count_before: int,
        count_after: int,
        extra: dict[str, Any],
        cut: KeepCut | None = None,
    ) -> tuple[str | None, Level, str]:
        """The sentence, level and machine-readable reason of a compaction attempt."""
        detail = f"{before:,} → {after:,} tokens, {count_before} → {count_after} messages"
        words = f" ({engine_error})" if engine_error else ""
        if error is not None:
            return (
                f"Context compaction failed ({error}); the conversation is unchanged.",
                "error",
                "engine_error",
            )
        if cause == "auth":
            kept = "" if changed else " The conversation is unchanged."
            return (
                f"Context compaction failed: {describe_cause('auth')}{words}; nothing was "
                f"summarised.{kept}{self._resume_note()}",
                "error",
                "auth",
            )
        if not changed:
            cause = cause or "ineffective"
            return (
                f"Context compaction freed nothing: {describe_cause(cause)}{words}; the "
                f"conversation is unchanged.{self._resume_note()}",
                "warning",
                cause,
            )
        if cause is not None and not fallback_used:
            # The engine stopped at a failed summary (abort_on_summary_failure) rather
            # than fall back; the context changed only by what came before the failure
            # (or, for an engine that trims its view, by that).
            return (
                f"Context compaction stopped: {describe_cause(cause)}{words}; nothing more "
                f"was summarised ({detail}).{self._resume_note()}",
                "warning",
                cause,
            )
        if cause is not None:
            return (
                f"Context compacted with the offline fallback summary ({detail}) because "
                f"{describe_cause(cause)}{words}.{self._resume_note()}",
                "warning",
                cause,
            )
        if phase == "manual":
            also = f"; {cut.describe()}" if cut is not None else ""
            return f"Compacted the conversation ({detail}){also}.", "info", ""
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
        return line, "info", ""

    def _skipped(self, phase: Phase, trigger: str, cause: str, size: int) -> None:
        """Report, once per turn, a compaction the engine declined for a cause."""
        key = f"skipped:{cause}"
        if key in self._turn_notes:
            return
        self._turn_notes.add(key)
        message = f"Context compaction skipped: {describe_cause(cause)}.{self._resume_note()}"
        logger.warning("%s", message)
        self._emit(
            CompactionEvent(
                phase=phase,
                reason=cause,
                trigger=trigger,
                tokens_before=size,
                tokens_after=size,
                messages_before=len(self._history),
                messages_after=len(self._history),
                aborted=True,
                message=message,
                level="warning",
                engine=self.engine_name,
                session_id=self.session_id,
            )
        )

    def _passes_left(self) -> int:
        left = self.max_compactions_per_turn - self._turn_passes
        if left <= 0:
            self._note_once(
                "compaction_limit",
                f"Context compaction skipped: {self.max_compactions_per_turn} passes already "
                "ran this turn.",
            )
        return left

    def _op_need(self, tokens: int | None, phase: Phase, trigger: str) -> Op[tuple[bool, bool]]:
        """``should_compress_info`` as (needed, blocked); a block is reported once per turn.

        Engines may give a reason with every "no" (the compressor says
        ``below_threshold``); it is a skipped compaction only when the tokens
        are at or over the engine's threshold, that is when compaction was
        wanted but blocked (a cooldown, the anti-thrash rule).
        """
        engine = self.engine
        info = yield from self._op_decide(_hook(engine.should_compress_info, tokens), (False, None))
        needed, reason = (bool(info[0]), info[1]) if isinstance(info, tuple) else (bool(info), None)
        size = engine.last_prompt_tokens if tokens is None else tokens
        # "below_threshold" is never a block, even when the host's estimate is over
        # the threshold: lcm judges its own (smaller) view, not the host's history.
        blocked = bool(
            not needed
            and reason
            and reason != "below_threshold"
            and 0 < engine.threshold_tokens <= size
        )
        if blocked:
            self._skipped(phase, trigger, _cause_of_block(str(reason)), size)
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
        why = "estimated tokens over the threshold"
        needed, blocked = yield from self._op_need(rough, "preflight", why)
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
        return (yield from self._compact(messages, phase="preflight", trigger=why, max_passes=left))

    def _manual_skip(
        self, messages: list[Message], trigger: str, message: str, level: Level, reason: str = ""
    ) -> None:
        """The event of a manual compaction that did not run (nothing to do, not supported)."""
        size = self._rough(messages)
        self._emit(
            CompactionEvent(
                phase="manual",
                reason=reason,
                trigger=trigger,
                tokens_before=size,
                tokens_after=size,
                messages_before=len(messages),
                messages_after=len(messages),
                aborted=True,
                message=message,
                level=level,
                engine=self.engine_name,
                session_id=self.session_id,
            )
        )

    def _op_compress_now(
        self, messages: list[Message], focus_topic: str | None, keep_last: int | None = None
    ) -> Op[list[Message]]:
        # A bad keep_last is the caller's mistake: raised before anything happens.
        kept = keep_last_cut(messages, keep_last) if keep_last is not None else None
        self._adopt(messages)
        trigger = "manual request"
        if kept is not None:
            trigger += f" (keep last {kept.requested})"
        if focus_topic:
            trigger += f" (focus: {focus_topic})"
        if kept is not None and not accepts_keyword(self.engine.compress, "keep_last"):
            self._manual_skip(
                messages,
                trigger,
                f"The {self.engine_name} engine cannot keep a chosen number of messages (its "
                "compress has no keep_last argument); the conversation is unchanged.",
                "warning",
                "unsupported",
            )
            return messages
        check = self.engine.has_content_to_compress
        if kept is None:
            has_content = yield from self._op_decide(_hook(check, messages, blocking=True), True)
        elif accepts_keyword(check, "keep_last"):
            has_content = yield from self._op_decide(
                _hook(check, messages, blocking=True, keep_last=kept.requested), True
            )
        else:
            has_content = True  # its answer would be about its own tail, not the one asked for
        if not has_content:
            note = f" ({kept.describe()}: nothing before them)" if kept is not None else ""
            self._manual_skip(messages, trigger, f"Nothing to compress{note}.", "info")
            return messages
        return (
            yield from self._compact(
                messages,
                phase="manual",
                trigger=trigger,
                max_passes=1,
                focus_topic=focus_topic,
                force=True,
                kept=kept,
            )
        )

    def _op_plan_compression(
        self, messages: list[Message], focus_topic: str | None, keep_last: int | None
    ) -> Op[CompressionPlan | None]:
        """The engine's plan of a manual compaction, or None when it cannot make one."""
        if keep_last is not None:
            keep_last_cut(messages, keep_last)  # the same ValueError as compress_now
            if not accepts_keyword(self.engine.compress, "keep_last"):
                return None  # it could not carry the plan out
        plan = yield from self._op_decide(
            _hook(
                self.engine.plan_compression,
                messages,
                blocking=True,
                keep_last=keep_last,
                focus_topic=focus_topic,
            ),
            None,
        )
        if plan is not None and not isinstance(plan, CompressionPlan):
            self._note_once(
                "hook_failed",
                f"plan_compression returned {type(plan).__name__}, not a CompressionPlan",
            )
            return None
        return plan

    def _op_handle_overflow(self, messages: list[Message]) -> Op[list[Message]]:
        self._adopt(messages)
        # A rejected request must be recovered even past the per-turn limit: one pass.
        passes = max(1, self.max_compactions_per_turn - self._turn_passes)
        return (
            yield from self._compact(
                messages,
                phase="overflow",
                trigger="the provider rejected the request as too long",
                max_passes=passes,
                force=True,
            )
        )
