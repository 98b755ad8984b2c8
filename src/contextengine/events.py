"""Events the host reports to observers: compactions, warnings, and the observer protocol.

A context engine is exclusive (one per agent); observers are stackable: any
number of callables may watch one host, and each receives every event. The host
(:class:`contextengine.ContextHost`) emits:

* a :class:`CompactionEvent` for every compaction attempt, successful or not
  (phase ``preflight``, ``auto``, ``manual`` or ``overflow``);
* a :class:`HostEvent` for everything else worth a warning: a failing
  ``select_context``, an observation hook that raised, a plugin that failed to
  load and was replaced by the compressor, a compaction the engine declined.

Both carry ``message``, the one line a user interface shows (None means "show
nothing"), and ``level`` ("info", "warning" or "error"). Observers are isolated
by :func:`notify`: one that raises is logged and the others still run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

__all__ = [
    "CompactionEvent",
    "Event",
    "HostEvent",
    "Level",
    "Observer",
    "Phase",
    "notify",
]

logger = logging.getLogger("contextengine.events")

Phase: TypeAlias = Literal["preflight", "auto", "manual", "overflow"]
Level: TypeAlias = Literal["info", "warning", "error"]


@dataclass(frozen=True, kw_only=True)
class CompactionEvent:
    """One compaction attempt, as the host saw it.

    ``tokens_*`` are the host's rough estimates of the history before and after
    (the same estimate for both, so the difference is meaningful);
    ``summarizer_calls`` and ``fallback_used`` come from the engine when it
    reports them (see ``ContextHost``), else 0 and False. ``aborted`` is True
    when the history was left unchanged: the engine raised, returned invalid
    messages, declined, or had nothing to compress. New fields get defaults.

    ``trigger`` says why the attempt ran ("usage over the threshold", "manual
    request"...). ``reason`` is empty when the compaction went as planned,
    and otherwise says in one machine-readable word why it failed, fell back
    to the offline summary, freed nothing or was skipped: a
    :data:`~contextengine.failure_policy.FailureCause` (``auth``,
    ``rate_limited``, ``timeout``, ``server_error``, ``bad_response``,
    ``over_budget``, ``cooldown``, ``ineffective``) or ``engine_error`` when
    the engine raised or returned invalid messages. Such events have level
    ``warning`` (``error`` for ``auth`` and ``engine_error``), the provider's
    own words in ``error`` and a ``message`` a person understands.
    """

    phase: Phase
    reason: str = ""
    trigger: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    summarizer_calls: int = 0
    duration_s: float = 0.0
    fallback_used: bool = False
    aborted: bool = False
    #: The one line to show the user, or None for silence (a quiet engine's automatic success).
    message: str | None = None
    level: Level = "info"
    #: Compress passes run for this attempt (the host may run several per turn).
    passes: int = 0
    #: Name of the engine that compacted.
    engine: str = ""
    session_id: str | None = None
    #: ``"ExceptionType: text"`` when the engine failed, else None.
    error: str | None = None
    #: The model that wrote the summary (the summary model, the main model after it
    #: failed, or ``"offline"``), from the engine's report; None when none was written
    #: or the engine does not say.
    summary_model: str | None = None
    #: What went wrong with the models that did not write the summary, naming each.
    summary_error: str | None = None
    #: The models that failed, comma-separated.
    summary_failed_model: str | None = None

    @property
    def tokens_saved(self) -> int:
        """Estimated tokens freed (0 when the history grew or stayed the same)."""
        return max(0, self.tokens_before - self.tokens_after)


@dataclass(frozen=True, kw_only=True)
class HostEvent:
    """A warning or note from the host that is not a compaction attempt.

    ``kind`` is a stable identifier observers can filter on, for example
    ``"select_context_failed"``, ``"hook_failed"``, ``"engine_fallback"``,
    ``"compaction_blocked"``, ``"observer_failed"`` or ``"engine_warning"``
    (an engine went on after a failure of its own, e.g. the compressor's archive).
    """

    kind: str
    message: str | None
    level: Level = "warning"
    engine: str = ""
    session_id: str | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


Event: TypeAlias = CompactionEvent | HostEvent


@runtime_checkable
class Observer(Protocol):
    """Anything callable with one event; a plain function works.

    Observers watch, they never steer: the return value is ignored and an
    exception is logged and swallowed.
    """

    def __call__(self, event: Event, /) -> Any: ...


def notify(observers: Iterable[Observer], event: Event) -> None:
    """Deliver ``event`` to every observer, isolating each from the others' failures.

    Called by the host and the registry for every event. An observer that
    raises is logged on the ``contextengine.events`` logger; the rest still run.
    """
    for observer in observers:
        try:
            observer(event)
        except Exception:
            logger.exception("context observer %r raised on %s", observer, type(event).__name__)
