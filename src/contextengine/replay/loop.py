"""The replay loop: a recorded session fed through a ContextHost, its replies as the model.

An agent loop alternates requests and replies; a recorded session holds both.
:class:`Replayer` walks the recorded messages in order and, at every assistant
message, does what an agent built on :class:`~contextengine.ContextHost` does
before calling its model::

    history = host.after_tool_calls(history)     # when tool results came since the last reply
    request = host.prepare_request(history)      # preflight compaction, select_context
    history = host.history
    host.record_response(usage)                  # usage counted from `request` and the reply
    history.append(recorded_reply)
    host.end_turn(history, usage)                # when the reply calls no tool

The recorded reply is what the model answered, whatever the engine sent: the
replay measures what each engine *sends* (prompt tokens, the cacheable
prefix, compactions, CPU time), not how a model would have answered. Usage is
counted offline with the tokenizer: ``prompt = count_message_tokens(request)``
and ``completion = message_tokens(reply)``.

Two reference traces need no engine:

* :func:`baseline_trace`: no context management, every request the whole
  history, capped at the context length (a provider refuses beyond it; those
  requests are flagged ``overflow``);
* :func:`recorded_trace`: for a Claude Code session that recorded its own
  compaction, the requests Claude Code actually sent: the whole history until
  a boundary, then its summary and what followed.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextengine.engine import ContextEngine
from contextengine.errors import EngineLoadError
from contextengine.events import CompactionEvent, Event
from contextengine.formats import Session
from contextengine.host import ContextHost
from contextengine.replay.cost import CostTotals, PrefixCache, Price, message_fingerprint
from contextengine.tokens import count_message_tokens, message_tokens

__all__ = [
    "DEFAULT_MODEL",
    "Progress",
    "Replayer",
    "RequestRecord",
    "SessionComparison",
    "Trace",
    "baseline_trace",
    "build_engine",
    "compare_sessions",
    "parse_option",
    "recorded_trace",
    "replay_session",
    "trace_stats",
]

Message = dict[str, Any]
#: Called with the number of recorded messages just processed.
Progress = Callable[[int], None]

#: The model whose tokenizer counts a replay when neither --model nor the session names one.
DEFAULT_MODEL = "gpt-4o"


@dataclass(frozen=True)
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
    }


# ---------------------------------------------------------------- engines


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with value read as JSON when it parses (numbers, booleans), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"engine option {text!r}: expected key=value")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def build_engine(
    name: str, *, context_length: int, model: str, options: Mapping[str, Any] | None = None
) -> ContextEngine:
    """Load ``name`` strictly (a broken plugin must not be measured as the compressor).

    Replays pass ``context_length`` and ``model``, and an in-memory ``store``
    (a replay never writes into the user's archive), each only when the engine
    accepts it and the caller did not set it.
    """
    from contextengine.registry import load_engine

    given = dict(options or {})
    defaults: dict[str, Any] = {"context_length": context_length, "model": model}
    if "store" not in given:
        defaults["store"] = ":memory:"
    while True:
        try:
            return load_engine(name, strict=True, **{**defaults, **given})
        except EngineLoadError as exc:
            dropped = next((k for k in defaults if f"unknown option {k!r}" in exc.cause), None)
            if dropped is None:
                raise
            del defaults[dropped]


# ---------------------------------------------------------------- the loop


def _request_digest(fingerprints: Sequence[str]) -> str:
    return hashlib.blake2b("|".join(fingerprints).encode(), digest_size=16).hexdigest()


class _Shapes:
    """Fingerprint and token count per message object, computed once per object."""

    def __init__(self, model: str) -> None:
        self.model = model
        # Keyed by id(); the message is kept alive in the value so the id stays its own.
        self._known: dict[int, tuple[Message, str, int]] = {}

    def of(self, messages: Sequence[Message]) -> tuple[list[str], list[int]]:
        fingerprints: list[str] = []
        tokens: list[int] = []
        known = self._known
        for message in messages:
            entry = known.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, message_fingerprint(message), message_tokens(message, self.model))
                known[id(message)] = entry
            fingerprints.append(entry[1])
            tokens.append(entry[2])
        return fingerprints, tokens


class Replayer:
    """Replays one session through a host holding ``engine``; a context manager.

    ``run()`` feeds every recorded message; afterwards :attr:`history` is the
    conversation as the host left it, :meth:`final_context` what the engine
    would send next, and :attr:`host` answers tool calls (``lcm_grep``...).
    Leaving the ``with`` block ends the session and closes the engine.
    """

    def __init__(
        self,
        messages: Sequence[Message],
        *,
        engine: str,
        context_length: int,
        model: str = DEFAULT_MODEL,
        options: Mapping[str, Any] | None = None,
        session_id: str = "replay",
    ) -> None:
        self.messages = list(messages)
        self.engine_name = engine
        self.model = model
        self.context_length = int(context_length)
        self.session_id = session_id
        self.engine = build_engine(
            engine, context_length=self.context_length, model=model, options=options
        )
        self._events: list[CompactionEvent] = []
        self.host = ContextHost(
            self.engine,
            model=model,
            context_length=self.context_length,
            observers=(self._observe,),
        )
        self.history: list[Message] = []
        self._shapes = _Shapes(model)
        self._closed = False

    def _observe(self, event: Event) -> None:
        if isinstance(event, CompactionEvent):
            self._events.append(event)

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the session (a real boundary) and release the engine's resources."""
        if self._closed:
            return
        self._closed = True
        try:
            self.host.end_session(self.history)
        finally:
            close = getattr(self.engine, "close", None)
            if callable(close):
                close()

    def _drain(self) -> tuple[tuple[str, ...], int]:
        events, self._events = self._events, []
        phases = tuple(e.phase for e in events if not e.aborted)
        return phases, sum(e.summarizer_calls for e in events)

    def run(self, progress: Progress | None = None) -> Trace:
        """Feed every recorded message; returns the trace of requests sent."""
        host, model = self.host, self.model
        trace = Trace(self.engine_name)
        cache = PrefixCache()
        host.start_session(self.session_id)
        history = self.history
        tools_pending = turn_open = False
        for index, message in enumerate(self.messages):
            role = message.get("role")
            if role != "assistant" or not history:
                if role == "user" and turn_open:
                    host.end_turn(history, None)  # the user interrupted a tool-calling turn
                    turn_open = False
                tools_pending = tools_pending and role == "tool"
                history.append(message)
                if progress is not None:
                    progress(1)
                continue
            started = time.process_time()
            if tools_pending:
                history = host.after_tool_calls(history)
            request = host.prepare_request(history)
            history = host.history
            cpu = time.process_time() - started
            prompt = count_message_tokens(request, model)
            completion = message_tokens(message, model)
            fingerprints, tokens = self._shapes.of(request)
            cached = cache.observe(fingerprints, tokens, prompt)
            digest = _request_digest(fingerprints)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            started = time.process_time()
            host.record_response(usage)
            # A compacted history is the host's new list: appending to it is what agents do.
            history.append(message)
            tools_pending = bool(message.get("tool_calls"))
            turn_open = tools_pending
            if not tools_pending:
                host.end_turn(history, usage)
            cpu += time.process_time() - started
            phases, calls = self._drain()
            trace.requests.append(
                RequestRecord(
                    index=index,
                    prompt_tokens=prompt,
                    cached_tokens=cached,
                    completion_tokens=completion,
                    messages_sent=len(request),
                    compactions=phases,
                    summarizer_calls=calls,
                    cpu_ms=cpu * 1000.0,
                    fingerprint=digest,
                    overflow=prompt > self.context_length,
                )
            )
            if progress is not None:
                progress(1)
        self.history = history
        return trace

    def final_context(self) -> list[Message]:
        """What the engine would send for one more request now (the assembled context)."""
        if not self.history:
            return []
        request = self.host.prepare_request(self.history)
        self.history = self.host.history
        self._events.clear()
        return request


def replay_session(
    messages: Sequence[Message],
    *,
    engine: str,
    context_length: int,
    model: str = DEFAULT_MODEL,
    options: Mapping[str, Any] | None = None,
    session_id: str = "replay",
    progress: Progress | None = None,
) -> Trace:
    """Replay ``messages`` through ``engine`` and return its trace."""
    with Replayer(
        messages,
        engine=engine,
        context_length=context_length,
        model=model,
        options=options,
        session_id=session_id,
    ) as replayer:
        return replayer.run(progress)


# ---------------------------------------------------------------- reference traces


def _reply_indices(messages: Sequence[Message]) -> Iterable[int]:
    """Positions of the replies that follow at least one message (those are requests)."""
    return (i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0)


def baseline_trace(
    messages: Sequence[Message], *, context_length: int, model: str = DEFAULT_MODEL
) -> Trace:
    """Every request the whole history, capped at ``context_length`` (flagged ``overflow``)."""
    shapes = _Shapes(model)
    fingerprints, tokens = shapes.of(messages)
    trace = Trace("baseline")
    cache = PrefixCache()
    running = 0
    done = 0
    for index in _reply_indices(messages):
        running += sum(tokens[done:index])
        done = index
        full = running + 3  # count_message_tokens' reply priming
        prompt = min(full, context_length)
        cached = cache.observe(fingerprints[:index], tokens[:index], prompt)
        trace.requests.append(
            RequestRecord(
                index=index,
                prompt_tokens=prompt,
                cached_tokens=cached,
                completion_tokens=tokens[index] if index < len(tokens) else 0,
                messages_sent=index,
                overflow=full > context_length,
            )
        )
    return trace


def recorded_trace(session: Session, *, model: str = DEFAULT_MODEL) -> Trace | None:
    """The requests Claude Code sent around its own recorded compactions; None without one.

    Reads ``metadata["compactions"]`` of the ``claude-code`` importer: before
    the first boundary the request is the whole history; after a boundary at
    ``index`` it is the summary (as a user message) and the messages from
    ``index`` on. The summariser call itself is counted, not priced.
    """
    boundaries = [
        c
        for c in session.metadata.get("compactions") or []
        if isinstance(c, Mapping) and isinstance(c.get("index"), int) and c.get("summary")
    ]
    if not boundaries:
        return None
    boundaries.sort(key=lambda c: int(c["index"]))
    summaries = [{"role": "user", "content": str(c["summary"])} for c in boundaries]
    messages = session.messages
    shapes = _Shapes(model)
    trace = Trace("recorded")
    cache = PrefixCache()
    current = -1
    for index in _reply_indices(messages):
        latest = current
        while latest + 1 < len(boundaries) and int(boundaries[latest + 1]["index"]) <= index:
            latest += 1
        phases: tuple[str, ...] = ()
        if latest != current:
            phases = tuple(
                str(b.get("trigger") or "auto") for b in boundaries[current + 1 : latest + 1]
            )
            current = latest
        if current < 0:
            request = list(messages[:index])
        else:
            request = [summaries[current], *messages[int(boundaries[current]["index"]) : index]]
        fingerprints, tokens = shapes.of(request)
        prompt = sum(tokens) + 3
        trace.requests.append(
            RequestRecord(
                index=index,
                prompt_tokens=prompt,
                cached_tokens=cache.observe(fingerprints, tokens, prompt),
                completion_tokens=message_tokens(messages[index], model),
                messages_sent=len(request),
                compactions=phases,
                summarizer_calls=len(phases),
            )
        )
    return trace


# ---------------------------------------------------------------- comparisons


@dataclass
class SessionComparison:
    """One session replayed through each engine compared, beside its reference traces."""

    session_id: str
    source: str
    format: str
    messages: int
    traces: dict[str, Trace]
    baseline: Trace
    recorded: Trace | None = None
    #: The model the engines were told, whose tokenizer counted the requests.
    model: str = DEFAULT_MODEL

    def to_json(self, price: Price) -> list[dict[str, Any]]:
        """One JSON row per engine: its figures, the baseline's and the recorded ones."""
        base = trace_stats(self.baseline, price)
        recorded = None if self.recorded is None else trace_stats(self.recorded, price)
        rows = []
        for engine, trace in self.traces.items():
            row: dict[str, Any] = {
                "session": self.session_id,
                "source": self.source,
                "format": self.format,
                "engine": engine,
                "model": self.model,
                "messages": self.messages,
                **trace_stats(trace, price),
                "baseline_prompt_tokens_total": base["prompt_tokens_total"],
                "baseline_prompt_tokens_peak": base["prompt_tokens_peak"],
                "baseline_cost": base["cost"],
                "baseline_overflow_requests": base["overflow_requests"],
                "compaction_requests": [
                    i for i, r in enumerate(trace.requests, start=1) if r.compactions
                ],
            }
            row["savings_vs_baseline"] = (
                round(1 - row["cost"] / base["cost"], 4) if base["cost"] else 0.0
            )
            row["recorded"] = recorded
            rows.append(row)
        return rows


def compare_sessions(
    sessions: Sequence[Session],
    engines: Sequence[str],
    *,
    context_length: int,
    model: str | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
) -> list[SessionComparison]:
    """Replay every session through every engine; ``options`` maps engine name to its options.

    ``model`` None means the session's recorded model, else :data:`DEFAULT_MODEL`
    (it chooses the tokenizer and is what the engines are told).
    """
    results = []
    for session in sessions:
        session_model = model or str(session.metadata.get("model") or DEFAULT_MODEL)
        traces = {
            name: replay_session(
                session.messages,
                engine=name,
                context_length=context_length,
                model=session_model,
                options=(options or {}).get(name),
                session_id=session.id,
                progress=progress,
            )
            for name in engines
        }
        results.append(
            SessionComparison(
                session_id=session.id,
                source=session.source,
                format=session.format,
                messages=len(session.messages),
                traces=traces,
                baseline=baseline_trace(
                    session.messages, context_length=context_length, model=session_model
                ),
                recorded=recorded_trace(session, model=session_model),
                model=session_model,
            )
        )
    return results
