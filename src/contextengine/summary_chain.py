"""Which model writes a summary: the configured summariser, then the main model once.

Both engines hand their summary requests to a :class:`SummaryChain` instead
of calling their summariser directly. The chain holds:

* ``primary``: the configured summariser (a separate summary model, the
  chat's own model, or the offline :class:`~contextengine.DeterministicSummarizer`);
* ``main``: the main (chat) model's summariser, or None. It is tried **once**
  when the primary fails with anything but an auth error (an HTTP failure,
  a timeout, an unusable answer). An auth error is re-raised at once: the
  engines abort the compaction rather than hide a wrong key behind another
  model. A ``main`` that is the primary's own endpoint and model is dropped
  at construction: asking the same model again is the primary's own retry.

The main-model retry respects the compaction's wait cap: it runs only while
the request's ``deadline`` has not passed, and gets that same deadline. It
never doubles the requests of a cooldown: after the primary failed and the
main model stepped in, the primary cools down on the shared ladder
(:data:`~contextengine.failure_policy.COOLDOWN_STEPS_S`, or its
``Retry-After``) and the following summaries go straight to the main model
until the cooldown ends, instead of asking the failing model first every time.
The engine's own :class:`~contextengine.failure_policy.FailurePolicy` sees
the chain as one summariser: one failure (and one step of its ladder) when
the whole chain failed, a success when any model wrote the summary.

:meth:`SummaryChain.summarize` returns a :class:`ChainResult` naming the
model that wrote the summary and every failure on the way; the engines copy
it onto their reports as ``summary_model``, ``summary_error`` and
``summary_failed_model``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contextengine.errors import SummarizerAuthError
from contextengine.failure_policy import COOLDOWN_STEPS_S, FailureCause, FailurePolicy, cause_of
from contextengine.summarizers import DeterministicSummarizer
from contextengine.summary_request import Summarizer, SummaryRequest

__all__ = [
    "OFFLINE_SUMMARY_MODEL",
    "ChainResult",
    "SummaryAttempt",
    "SummaryChain",
    "summarizer_label",
]

#: What ``summary_model`` says when the offline deterministic summariser wrote the summary.
OFFLINE_SUMMARY_MODEL = "offline"

#: Checks a summary: None when it is usable, else (cause, words).
SummaryCheck = Callable[[str], tuple[FailureCause, str] | None]


def summarizer_label(summarizer: object) -> str:
    """The name reports give a summariser: its ``model``, or "offline" for the deterministic one.

    A custom summariser without a ``model`` attribute is named by its class.
    """
    model = getattr(summarizer, "model", None)
    if isinstance(model, str) and model:
        return model
    if isinstance(summarizer, DeterministicSummarizer):
        return OFFLINE_SUMMARY_MODEL
    return type(summarizer).__name__


def _endpoint(summarizer: object) -> tuple[str, str] | None:
    base_url = getattr(summarizer, "base_url", None)
    model = getattr(summarizer, "model", None)
    if isinstance(base_url, str) and isinstance(model, str):
        return base_url.rstrip("/"), model
    return None


@dataclass(frozen=True, kw_only=True)
class SummaryAttempt:
    """One model that did not write the summary, and why."""

    model: str
    cause: FailureCause
    #: The summariser's (or provider's) own words.
    error: str
    retry_after: float | None = None


@dataclass(kw_only=True)
class ChainResult:
    """What :meth:`SummaryChain.summarize` did."""

    #: The summary, or None when every model failed.
    text: str | None = None
    #: The label of the model that wrote ``text`` (:func:`summarizer_label`), else None.
    model: str | None = None
    #: The failures on the way, in order (the primary's first).
    failures: list[SummaryAttempt] = field(default_factory=list)
    #: Summariser calls made (the primary and the retry; a skipped primary is none).
    calls: int = 0

    @property
    def cause(self) -> FailureCause | None:
        """The first failure's cause, else None."""
        return self.failures[0].cause if self.failures else None

    @property
    def error(self) -> str | None:
        """Every failure's words, naming the model: ``"model: words; model: words"``."""
        return "; ".join(f"{f.model}: {f.error}" for f in self.failures) or None

    @property
    def failed_model(self) -> str | None:
        """The models that failed, comma-separated, first first; else None."""
        names = list(dict.fromkeys(f.model for f in self.failures))
        return ", ".join(names) or None

    @property
    def retry_after(self) -> float | None:
        """The longest ``Retry-After`` any failed model asked for, else None."""
        waits = [f.retry_after for f in self.failures if f.retry_after is not None]
        return max(waits) if waits else None


class SummaryChain:
    """The configured summariser, with one retry on the main model; see the module docstring.

    Owned by one engine (it keeps the primary's cooldown between compactions).
    ``clock`` (monotonic seconds) times that cooldown; the engines pass theirs.
    """

    def __init__(
        self,
        primary: Summarizer,
        main: Summarizer | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        same = main is primary or (
            main is not None
            and _endpoint(main) is not None
            and _endpoint(main) == _endpoint(primary)
        )
        #: The main model's summariser, or None (none given, or the primary's own endpoint).
        self.main: Summarizer | None = None if same else main
        #: The primary's own cooldown: while it runs, the main model summarises directly.
        self.primary_policy = FailurePolicy(cooldown_steps_s=COOLDOWN_STEPS_S, clock=clock)

    @property
    def primary_model(self) -> str:
        """The label of the configured summariser."""
        return summarizer_label(self.primary)

    @property
    def main_model(self) -> str | None:
        """The label of the main model's summariser, or None when there is no retry."""
        return summarizer_label(self.main) if self.main is not None else None

    def summarize(self, request: SummaryRequest, check: SummaryCheck | None = None) -> ChainResult:
        """Ask the primary, then (on a failure other than auth) the main model once.

        ``check`` judges an answer (an over-long summary is a failure too);
        by default any non-empty text is accepted. Raises
        :class:`~contextengine.SummarizerAuthError` when the primary refuses
        the credentials.
        """
        judge = check or _non_empty
        result = ChainResult()
        primary_label = self.primary_model
        cooling = self.main is not None and self.primary_policy.cooldown_remaining() > 0
        if cooling:
            last = self.primary_policy.last_failure
            words = f"cooling down for {self.primary_policy.cooldown_remaining():.0f} s"
            if last is not None and last.error:
                words += f" after: {last.error}"
            result.failures.append(
                SummaryAttempt(model=primary_label, cause="cooldown", error=words)
            )
        else:
            attempt = self._try(self.primary, primary_label, request, judge, result)
            if attempt is None:
                self.primary_policy.summarizer_succeeded()
                return result
            result.failures.append(attempt)
            if self.main is None:
                return result
            self.primary_policy.summarizer_failed(
                attempt.cause, attempt.error, retry_after=attempt.retry_after
            )
        assert self.main is not None
        main_label = summarizer_label(self.main)
        if request.deadline is not None and time.monotonic() >= request.deadline:
            result.failures.append(
                SummaryAttempt(
                    model=main_label,
                    cause="timeout",
                    error="no time left for the retry on the main model",
                )
            )
            return result
        try:
            attempt = self._try(self.main, main_label, request, judge, result)
        except SummarizerAuthError as exc:
            # The primary's failure was not about credentials: the main model's
            # refusal ends the retry, and the engine falls back as for any failure.
            attempt = SummaryAttempt(model=main_label, cause="auth", error=str(exc))
        if attempt is not None:
            result.failures.append(attempt)
        return result

    @staticmethod
    def _try(
        summarizer: Summarizer,
        label: str,
        request: SummaryRequest,
        judge: SummaryCheck,
        result: ChainResult,
    ) -> SummaryAttempt | None:
        """Call one summariser; fill ``result`` on success (None), else return the failure."""
        result.calls += 1
        try:
            text = summarizer.summarize(request)
        except SummarizerAuthError:
            raise
        except Exception as exc:  # any other failure is the next model's turn
            retry_after = getattr(exc, "retry_after", None)
            return SummaryAttempt(
                model=label,
                cause=cause_of(exc),
                error=f"{type(exc).__name__}: {exc}",
                retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
            )
        problem = judge(text) if isinstance(text, str) else ("bad_response", "no text")
        if problem is not None:
            return SummaryAttempt(model=label, cause=problem[0], error=problem[1])
        result.text, result.model = text.strip(), label
        return None


def _non_empty(text: str) -> tuple[FailureCause, str] | None:
    return None if text.strip() else ("bad_response", "empty summary")
