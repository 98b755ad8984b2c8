"""What a replay records: one :class:`RequestRecord` per request, gathered in a :class:`Trace`.

A trace is the output of a replay, so it is the one thing a replay keeps for
every request of a session: a :class:`RequestRecord` is a handful of numbers
and one 32-character digest (about 200 bytes with its slots), never a message.
:func:`trace_stats` turns a trace into the per-session figures of
``contextengine replay --json``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contextengine.replay.cost import CostTotals, Price

__all__ = ["DEFAULT_MODEL", "RequestRecord", "Trace", "trace_stats"]

#: The model whose tokenizer counts a replay when neither --model nor the session names one.
DEFAULT_MODEL = "gpt-4o"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request of a trace: what was sent before the recorded reply at ``index``."""

    #: Position of the recorded reply in the session's messages.
    index: int
    prompt_tokens: int
    #: Leading prompt tokens identical to the previous request's (the cache model's hit).
    cached_tokens: int
    completion_tokens: int
    messages_sent: int
    #: Phases of the compactions that ran while this request was prepared.
    compactions: tuple[str, ...] = ()
    summarizer_calls: int = 0
    #: CPU time spent in the host and engine for this request (0 for reference traces).
    cpu_ms: float = 0.0
    #: Digest of the whole request as sent (equal digests: byte-identical requests).
    fingerprint: str = ""
    #: The prompt was over the context length: a provider would refuse it (the
    #: baseline's prompt is capped there; an engine's is what it sent).
    overflow: bool = False
    #: Nothing could be sent: the system prompt and the latest user message alone
    #: exceed the window (the host raised ContextOverflowError); not billed.
    refused: bool = False


@dataclass
class Trace:
    """The requests one strategy sent for one session: an engine, ``baseline`` or ``recorded``."""

    label: str
    requests: list[RequestRecord] = field(default_factory=list)


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def trace_stats(trace: Trace, price: Price) -> dict[str, Any]:
    """The per-session figures of a trace under ``price`` (the JSON fields of ``replay``)."""
    totals = CostTotals(price)
    phases: dict[str, int] = {}
    for request in trace.requests:
        totals.add(request.prompt_tokens, request.cached_tokens, request.completion_tokens)
        for phase in request.compactions:
            phases[phase] = phases.get(phase, 0) + 1
    cpu = [r.cpu_ms for r in trace.requests]
    return {
        "requests": len(trace.requests),
        "compactions": sum(phases.values()),
        "compactions_by_phase": phases,
        "summarizer_calls": sum(r.summarizer_calls for r in trace.requests),
        "prompt_tokens_total": totals.prompt_tokens,
        "prompt_tokens_peak": max((r.prompt_tokens for r in trace.requests), default=0),
        "cached_tokens_total": totals.cached_tokens,
        "cache_hit_rate": round(totals.cache_hit_rate, 4),
        "completion_tokens_total": totals.completion_tokens,
        "cost": round(totals.cost, 6),
        "overhead_ms_median": round(statistics.median(cpu), 3) if cpu else 0.0,
        "overhead_ms_p95": round(_percentile(cpu, 0.95), 3) if cpu else 0.0,
        "overflow_requests": sum(1 for r in trace.requests if r.overflow),
        "refused_requests": sum(1 for r in trace.requests if r.refused),
    }
