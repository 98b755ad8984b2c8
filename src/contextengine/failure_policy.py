"""The one failure policy every engine shares: cooldowns, anti-thrash, and a cap on waiting.

A summariser fails (a 500, a 429 with ``Retry-After``, a timeout, a dropped
connection, an answer that is no summary) and an engine must do three things
right: never lose the conversation (it falls back or aborts, the engines'
business), never hammer the failing summariser, and never make the agent
wait long. This module is the second and third, written once:

* **Cooldown ladder.** After a failure, automatic compaction stops calling the
  summariser for 60 s, then 300 s after a second failure in a row, then 900 s
  (:data:`COOLDOWN_STEPS_S`), or for as long as the provider asked
  (``Retry-After``) when that is longer. A success resets the ladder.
  Compactions that must happen anyway (overflow, a manual request) use the
  offline fallback during a cooldown instead of the summariser.
* **Anti-thrash.** A compaction that frees nothing, or whose next real prompt
  is still over the threshold, is *ineffective*; two in a row block automatic
  compaction, with one retry after every three blocked readings: at most 3
  compactions in any 6 turns when the context's floor is above the threshold.
* **Wait cap.** One compaction may wait on the summariser for at most
  ``max_wait_s`` in all (:meth:`FailurePolicy.wait_deadline`, handed to the
  summariser in :attr:`~contextengine.summarizers.SummaryRequest.deadline`):
  a ``Retry-After`` longer than what is left means "fall back now and cool
  down", not "sleep".

Every failure is recorded with its cause (:data:`FailureCause`), the
provider's own words, and when it happened, so events and ``get_status()``
can tell the user what happened and when automatic compaction resumes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias, get_args

from contextengine.errors import SummarizerAuthError, SummarizerError

__all__ = [
    "COOLDOWN_STEPS_S",
    "DEFAULT_MAX_WAIT_S",
    "FAILURE_CAUSES",
    "Failure",
    "FailureCause",
    "FailurePolicy",
    "cause_of",
    "describe_cause",
]

FailureCause: TypeAlias = Literal[
    "auth",
    "rate_limited",
    "timeout",
    "server_error",
    "bad_response",
    "over_budget",
    "cooldown",
    "ineffective",
]
#: Every cause, in the order the docs list them.
FAILURE_CAUSES: tuple[FailureCause, ...] = get_args(FailureCause)

#: Cooldowns after the 1st, 2nd and every later consecutive summariser failure.
COOLDOWN_STEPS_S = (60.0, 300.0, 900.0)
#: How long one compaction may wait on its summariser, calls and retries together.
DEFAULT_MAX_WAIT_S = 60.0
# Consecutive ineffective compactions that block automatic compaction, and the
# blocked real readings after which one more attempt is allowed. With 2 and 3,
# attempts land on turns 1, 2, 6, 10, ...: never more than 3 in any 6 turns.
_INEFFECTIVE_LIMIT = 2
_THRASH_RETRY_TURNS = 3

_PLAIN: dict[str, str] = {
    "auth": "the summary model refused the credentials (check the API key or quota)",
    "rate_limited": "the summary model is rate limited",
    "timeout": "the summary model did not answer in time",
    "server_error": "the summary model failed",
    "bad_response": "the summary model's answer was not a usable summary",
    "over_budget": "the summary was longer than what it summarised or than the context holds",
    "cooldown": "the summary model is cooling down after a failure",
    "ineffective": "compaction frees too little to bring the conversation under the threshold",
}


def describe_cause(cause: str) -> str:
    """One plain phrase for a cause, for the ``message`` a person reads."""
    return _PLAIN.get(cause, cause.replace("_", " "))


def cause_of(exc: BaseException) -> FailureCause:
    """The cause of a summariser failure: the error's own, or inferred from its type."""
    if isinstance(exc, SummarizerAuthError):
        return "auth"
    cause = getattr(exc, "cause", None) if isinstance(exc, SummarizerError) else None
    for known in FAILURE_CAUSES:
        if cause == known:
            return known
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ValueError | TypeError):
        return "bad_response"
    return "server_error"


@dataclass(frozen=True, kw_only=True)
class Failure:
    """The last thing that went wrong with compaction, as events and status report it."""

    cause: FailureCause
    #: The provider's own words (or the exception's), "" when there are none.
    error: str
    #: Wall-clock time (seconds since the epoch) when it happened.
    at: float


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


class FailurePolicy:
    """Cooldowns, anti-thrash and the wait cap of one engine; see the module docstring.

    Owned by an engine, which reports what happens (``summarizer_failed``,
    ``summarizer_succeeded``, ``compaction_committed``, ``freed_nothing``,
    ``observe_prompt``) and asks :meth:`block` before compacting
    automatically. ``clock`` (monotonic seconds) times cooldowns and is
    injectable for tests; ``wall_clock`` dates what status shows. Wait
    deadlines are always in ``time.monotonic()`` time, the clock summarisers
    read them with.
    """

    def __init__(
        self,
        *,
        cooldown_steps_s: tuple[float, ...] = COOLDOWN_STEPS_S,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not cooldown_steps_s:
            raise ValueError("cooldown_steps_s needs at least one step")
        self.cooldown_steps_s = tuple(float(step) for step in cooldown_steps_s)
        self.max_wait_s = float(max_wait_s)
        self.clock = clock
        self.wall_clock = wall_clock
        #: Consecutive summariser failures (the rung of the ladder).
        self.failures = 0
        #: The last failure, kept after a success so status can still show it.
        self.last_failure: Failure | None = None
        self._cooldown_until = 0.0
        self._ineffective_streak = 0
        self._blocked_readings = 0
        self._awaiting_verdict = False

    # ------------------------------------------------------------------ the summariser

    def cooldown_remaining(self) -> float:
        """Seconds before automatic compaction may call the summariser again (0: now)."""
        if self._cooldown_until <= 0:
            return 0.0
        return max(0.0, self._cooldown_until - self.clock())

    def summarizer_failed(
        self, cause: FailureCause, error: str = "", *, retry_after: float | None = None
    ) -> float:
        """Record a failed summariser call and start the next cooldown; returns its seconds.

        The cooldown is the ladder's next step, or ``retry_after`` (what the
        provider asked for) when that is longer.
        """
        step = self.cooldown_steps_s[min(self.failures, len(self.cooldown_steps_s) - 1)]
        seconds = max(step, float(retry_after or 0.0))
        self.failures += 1
        self._cooldown_until = self.clock() + seconds
        self.record(cause, error)
        return seconds

    def summarizer_succeeded(self) -> None:
        """A summary was written by the summariser: the ladder starts over."""
        self.failures = 0
        self._cooldown_until = 0.0

    def wait_deadline(self) -> float:
        """The ``time.monotonic()`` by which the summariser must be done, for one compaction."""
        return time.monotonic() + self.max_wait_s

    def record(self, cause: FailureCause, error: str = "") -> None:
        """Remember a cause for status (a failure, a fallback, a skip)."""
        self.last_failure = Failure(cause=cause, error=error, at=self.wall_clock())

    # ------------------------------------------------------------------ anti-thrash

    def compaction_committed(self) -> None:
        """A compaction changed the context: the next real prompt size judges it."""
        self._awaiting_verdict = True

    def freed_nothing(self) -> None:
        """A compaction freed nothing: as ineffective as one the next reading condemns."""
        self._ineffective_streak += 1
        self._blocked_readings = 0
        self.record("ineffective")

    def observe_prompt(self, prompt_tokens: int, threshold_tokens: int) -> None:
        """Judge the last compaction on a real prompt size (from the provider's usage)."""
        if prompt_tokens <= 0:
            return  # no usage reported: nothing to judge on
        if prompt_tokens < threshold_tokens:
            self.clear_thrash()
        elif self._awaiting_verdict:
            self._ineffective_streak += 1
            self._blocked_readings = 0
            if self._ineffective_streak >= _INEFFECTIVE_LIMIT:
                self.record("ineffective")
        elif self._ineffective_streak >= _INEFFECTIVE_LIMIT:
            self._blocked_readings += 1
        self._awaiting_verdict = False

    def clear_thrash(self) -> None:
        """Lift the anti-thrash block (a reading under the threshold, a forced compaction)."""
        self._ineffective_streak = 0
        self._blocked_readings = 0
        self._awaiting_verdict = False

    def reset(self) -> None:
        """Forget cooldowns and the anti-thrash state: another model, another story."""
        self.failures = 0
        self._cooldown_until = 0.0
        self.clear_thrash()

    # ------------------------------------------------------------------ decisions

    def block(self, *, force: bool = False) -> tuple[FailureCause, str] | None:
        """Why automatic compaction may not run now, as (cause, detail), or None.

        ``detail`` is ``"cooldown:<seconds>"`` or ``"ineffective"``, the
        reasons ``should_compress_info`` gives. ``force`` (overflow, manual)
        is never blocked.
        """
        if force:
            return None
        remaining = self.cooldown_remaining()
        if remaining > 0:
            return "cooldown", f"cooldown:{math.ceil(remaining)}"
        if (
            self._ineffective_streak >= _INEFFECTIVE_LIMIT
            and self._blocked_readings < _THRASH_RETRY_TURNS
        ):
            return "ineffective", "ineffective"
        return None

    def status(self) -> dict[str, Any]:
        """What ``get_status()`` shows: the last cause, and when automatic compaction resumes.

        ``automatic_compaction`` is ``"on"``, ``"cooling down"`` (with
        ``automatic_compaction_resumes_at``, ISO 8601 UTC, and
        ``..._resumes_in_s``) or ``"blocked: ineffective"`` (it resumes when a
        prompt fits under the threshold again, or after a few turns).
        """
        blocked = self.block()
        state = "on"
        resumes_at: str | None = None
        resumes_in: float | None = None
        if blocked is not None and blocked[0] == "cooldown":
            resumes_in = round(self.cooldown_remaining(), 1)
            resumes_at = _iso(self.wall_clock() + resumes_in)
            state = "cooling down"
        elif blocked is not None:
            state = "blocked: ineffective"
        last = self.last_failure
        return {
            "automatic_compaction": state,
            "automatic_compaction_resumes_at": resumes_at,
            "automatic_compaction_resumes_in_s": resumes_in,
            "last_failure_cause": last.cause if last else None,
            "last_failure_error": last.error if last else None,
            "last_failure_at": _iso(last.at) if last else None,
            "consecutive_summarizer_failures": self.failures,
        }
