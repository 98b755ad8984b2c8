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

Two reference traces need no engine (:mod:`.reference`): the unmanaged
:func:`baseline_trace` and Claude Code's :func:`recorded_trace`.

Memory and time
    A replay keeps what the engine keeps, and per request does work in
    proportion to the request, never to the history:

    * messages are fed one at a time (:meth:`Replayer.feed`), from a list or
      from a :class:`~contextengine.formats.SessionStream` that reads the
      file as it goes; :func:`compare_stream` feeds one stream to every
      engine and both reference traces in lockstep, so the file is read once;
    * the history is the host's, which the engine compacts; the digest and
      token count of each message sent are kept for the last request only;
    * the reference traces keep running sums (:mod:`.reference`);
    * an engine that archives (``lcm``) gets a SQLite file in a temporary
      folder, deleted when the replay ends: on disk, the archive costs the
      process its page cache, not the whole transcript in RAM, and a replay
      never writes into the user's own archive;
    * the trace itself is one small :class:`RequestRecord` per request.

Warm-up
    Before the first session of a process is timed, each engine serves one
    small request that is not measured (:func:`warm_up`): the first request
    an engine serves in a process otherwise pays for lazy imports, the
    tokenizer's vocabulary, compiled patterns and caches (up to about 150 ms,
    all of it charged to whichever engine came first). The warm-up session
    is tiny, never compacts (so no summariser is called) and uses its own
    temporary archive.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from contextengine.engine import ContextEngine
from contextengine.errors import ContextOverflowError, EngineLoadError
from contextengine.events import CompactionEvent, Event
from contextengine.formats import Session, SessionStream
from contextengine.host import ContextHost
from contextengine.replay.cost import PrefixCache, Price, message_fingerprint
from contextengine.replay.reference import (
    BaselineBuilder,
    RecordedBuilder,
    baseline_trace,
    is_boundary,
    recorded_trace,
)
from contextengine.replay.trace import DEFAULT_MODEL, RequestRecord, Trace, trace_stats
from contextengine.tokens import REPLY_PRIMING_TOKENS, message_tokens

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
    "compare_stream",
    "parse_option",
    "recorded_trace",
    "replay_session",
    "trace_stats",
    "warm_up",
]

Message = dict[str, Any]
#: Called with the number of requests just replayed: one per recorded reply,
#: however many engines replay it.
Progress = Callable[[int], None]


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
    name: str,
    *,
    context_length: int,
    model: str,
    options: Mapping[str, Any] | None = None,
    store: str | os.PathLike[str] = ":memory:",
) -> ContextEngine:
    """Load ``name`` strictly (a broken plugin must not be measured as the compressor).

    Replays pass ``context_length``, ``model`` and ``store``, each only when
    the engine accepts it and the caller's ``options`` did not set it.
    ``store`` is the archive of an engine that keeps one: in memory unless
    the caller names a file (:class:`Replayer` gives a temporary one), and
    never the user's own archive.
    """
    from contextengine.registry import load_engine

    given = dict(options or {})
    defaults: dict[str, Any] = {"context_length": context_length, "model": model}
    if "store" not in given:
        defaults["store"] = store
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
    """Fingerprint and token count of each message of the last request, reused by the next.

    Keyed by id(): the entry holds the message, so the id stays its own. Only
    the messages of the latest request are kept; an agent's next request is
    mostly the same objects, so each message is fingerprinted once while it
    stays in the context, and nothing outlives the context.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self._known: dict[int, tuple[Message, str, int]] = {}

    def of(self, messages: Sequence[Message]) -> tuple[list[str], list[int]]:
        fingerprints: list[str] = []
        tokens: list[int] = []
        known = self._known
        fresh: dict[int, tuple[Message, str, int]] = {}
        for message in messages:
            key = id(message)
            entry = known.get(key)
            if entry is None or entry[0] is not message:
                entry = fresh.get(key)
                if entry is None:
                    entry = (
                        message,
                        message_fingerprint(message),
                        message_tokens(message, self.model),
                    )
            fresh[key] = entry
            fingerprints.append(entry[1])
            tokens.append(entry[2])
        self._known = fresh
        return fingerprints, tokens


class Replayer:
    """Replays one session through a host holding ``engine``; a context manager.

    ``run()`` feeds every message of ``messages`` (a list, or any iterable
    such as a :class:`~contextengine.formats.SessionStream`, read once); or
    call :meth:`feed` with each message yourself. Afterwards :attr:`history`
    is the conversation as the host left it, :meth:`final_context` what the
    engine would send next, :attr:`trace` the requests sent, and :attr:`host`
    answers tool calls (``lcm_grep``...). Leaving the ``with`` block ends the
    session, closes the engine and deletes its temporary archive.
    """

    def __init__(
        self,
        messages: Iterable[Message] = (),
        *,
        engine: str,
        context_length: int,
        model: str = DEFAULT_MODEL,
        options: Mapping[str, Any] | None = None,
        session_id: str = "replay",
    ) -> None:
        self.messages: Iterable[Message] = (
            list(messages) if isinstance(messages, Sequence) else messages
        )
        self.engine_name = engine
        self.model = model
        self.context_length = int(context_length)
        self.session_id = session_id
        # The archive of an engine that keeps one lives on disk for the replay
        # only: in memory it would hold the whole transcript in RAM.
        self._scratch = tempfile.TemporaryDirectory(prefix="contextengine-replay-")
        try:
            self.engine = build_engine(
                engine,
                context_length=self.context_length,
                model=model,
                options=options,
                store=os.path.join(self._scratch.name, "archive.db"),
            )
        except BaseException:
            self._scratch.cleanup()
            raise
        self._events: list[CompactionEvent] = []
        self.host = ContextHost(
            self.engine,
            model=model,
            context_length=self.context_length,
            observers=(self._observe,),
        )
        self.history: list[Message] = []
        self.trace = Trace(engine)
        self._shapes = _Shapes(model)
        self._cache = PrefixCache()
        self._index = 0
        self._started = self._closed = False
        self._tools_pending = self._turn_open = False

    def _observe(self, event: Event) -> None:
        if isinstance(event, CompactionEvent):
            self._events.append(event)

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the session (a real boundary), release the engine and delete its archive."""
        if self._closed:
            return
        self._closed = True
        try:
            self.host.end_session(self.history)
        finally:
            try:
                close = getattr(self.engine, "close", None)
                if callable(close):
                    close()
            finally:
                self._scratch.cleanup()

    def _drain(self) -> tuple[tuple[str, ...], int]:
        events, self._events = self._events, []
        phases = tuple(e.phase for e in events if not e.aborted)
        return phases, sum(e.summarizer_calls for e in events)

    def start(self) -> None:
        """Begin the session (``on_session_start``); :meth:`feed` does it when needed."""
        if not self._started:
            self._started = True
            self.host.start_session(self.session_id)

    def feed(self, message: Message) -> RequestRecord | None:
        """Feed the next recorded message; returns the request it caused, if a reply."""
        self.start()
        host = self.host
        index = self._index
        self._index += 1
        history = self.history
        role = message.get("role")
        if role != "assistant" or not history:
            if role == "user" and self._turn_open:
                host.end_turn(history, None)  # the user interrupted a tool-calling turn
                self._turn_open = False
            self._tools_pending = self._tools_pending and role == "tool"
            history.append(message)
            return None
        started = time.process_time()
        if self._tools_pending:
            history = host.after_tool_calls(history)
        try:
            request = host.prepare_request(history)
        except ContextOverflowError:
            return self._refused(index, message, time.process_time() - started)
        history = host.history
        cpu = time.process_time() - started
        fingerprints, tokens = self._shapes.of(request)
        # The sum of the per-message counts is count_message_tokens(request).
        prompt = sum(tokens) + REPLY_PRIMING_TOKENS
        completion = message_tokens(message, self.model)
        cached = self._cache.observe(fingerprints, tokens, prompt)
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
        self.history = history
        self._tools_pending = self._turn_open = bool(message.get("tool_calls"))
        if not self._tools_pending:
            host.end_turn(history, usage)
        cpu += time.process_time() - started
        phases, calls = self._drain()
        record = RequestRecord(
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
        self.trace.requests.append(record)
        return record

    def _refused(self, index: int, message: Message, cpu: float) -> RequestRecord:
        """A request nothing of which could be sent: recorded, not billed; the replay goes on."""
        history = self.host.history
        history.append(message)
        self.history = history
        self._tools_pending = self._turn_open = bool(message.get("tool_calls"))
        self._drain()
        record = RequestRecord(
            index=index,
            prompt_tokens=0,
            cached_tokens=0,
            completion_tokens=0,
            messages_sent=0,
            cpu_ms=cpu * 1000.0,
            refused=True,
        )
        self.trace.requests.append(record)
        return record

    def run(self, progress: Progress | None = None) -> Trace:
        """Feed every recorded message; returns the trace of requests sent.

        ``progress`` is called with 1 after each request.
        """
        self.start()
        for message in self.messages:
            if self.feed(message) is not None and progress is not None:
                progress(1)
        return self.trace

    def final_context(self) -> list[Message]:
        """What the engine would send for one more request now (the assembled context)."""
        if not self.history:
            return []
        request = self.host.prepare_request(self.history)
        self.history = self.host.history
        self._events.clear()
        return request


def replay_session(
    messages: Iterable[Message],
    *,
    engine: str,
    context_length: int,
    model: str = DEFAULT_MODEL,
    options: Mapping[str, Any] | None = None,
    session_id: str = "replay",
    progress: Progress | None = None,
) -> Trace:
    """Replay ``messages`` (a list or a stream) through ``engine`` and return its trace."""
    with Replayer(
        messages,
        engine=engine,
        context_length=context_length,
        model=model,
        options=options,
        session_id=session_id,
    ) as replayer:
        return replayer.run(progress)


# ---------------------------------------------------------------- warm-up

#: A session small enough never to compact: a system prompt, a request, a
#: tool call and its result, the answer.
_WARM_UP_SESSION: tuple[Message, ...] = (
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Where is the deploy script? Run the tests in tests/."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_warm_up",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls tools"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_warm_up", "content": "deploy.sh\nREADME.md"},
    {"role": "assistant", "content": "It is tools/deploy.sh; the tests pass."},
)
#: (engine, model) pairs already warmed up in this process.
_WARMED: set[tuple[str, str]] = set()


#: The warm-up's context window: far above its session, so nothing compacts.
_WARM_UP_CONTEXT = 128_000


def warm_up(
    engines: Sequence[str],
    *,
    model: str,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Serve one small untimed request with each engine, once per process (module docstring).

    Called by every comparison before its timed pass. ``options`` apply as in
    the replay, except ``store``: the warm-up never writes into an archive
    the caller named.
    """
    for name in engines:
        if (name, model) in _WARMED:
            continue
        given = {k: v for k, v in ((options or {}).get(name) or {}).items() if k != "store"}
        with Replayer(
            _WARM_UP_SESSION,
            engine=name,
            context_length=_WARM_UP_CONTEXT,
            model=model,
            options=given,
            session_id="warm-up",
        ) as replayer:
            replayer.run()
        _WARMED.add((name, model))


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


def _compare(
    *,
    session_id: str,
    source: str,
    format: str,
    messages: Iterable[Message],
    boundaries: Callable[[], Sequence[Any]] | None,
    engines: Sequence[str],
    context_length: int,
    model: str,
    options: Mapping[str, Mapping[str, Any]] | None,
    progress: Progress | None,
) -> SessionComparison:
    """One pass over ``messages``, each fed to every engine and both reference traces."""
    warm_up(engines, model=model, options=options)
    with ExitStack() as stack:
        replayers = [
            stack.enter_context(
                Replayer(
                    engine=name,
                    context_length=context_length,
                    model=model,
                    options=(options or {}).get(name),
                    session_id=session_id,
                )
            )
            for name in engines
        ]
        baseline = BaselineBuilder(context_length=context_length, model=model)
        recorded = RecordedBuilder(boundaries, model=model) if boundaries is not None else None
        count = 0
        for message in messages:
            requested = False
            for replayer in replayers:
                requested = replayer.feed(message) is not None or requested
            baseline.feed(message)
            if recorded is not None:
                recorded.feed(message)
            count += 1
            if progress is not None and requested:
                progress(1)
        traces = {replayer.engine_name: replayer.trace for replayer in replayers}
    return SessionComparison(
        session_id=session_id,
        source=source,
        format=format,
        messages=count,
        traces=traces,
        baseline=baseline.trace,
        recorded=None if recorded is None else recorded.trace,
        model=model,
    )


def compare_stream(
    stream: SessionStream,
    engines: Sequence[str],
    *,
    context_length: int,
    model: str | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
) -> SessionComparison:
    """Replay one streamed session through every engine, reading it once.

    The same figures as :func:`compare_sessions` on the loaded session, in
    memory that does not grow with the session: each message goes to every
    engine and both reference traces, then is let go. ``model`` None means
    the session's recorded model (read ahead to the first reply), else
    :data:`DEFAULT_MODEL`.
    """
    session_model = model or stream.recorded_model() or DEFAULT_MODEL
    metadata = stream.metadata

    def live() -> Sequence[Any]:
        # Filled while the stream is read, each entry before the message at its index.
        compactions: Sequence[Any] = metadata.get("compactions") or ()
        return compactions

    return _compare(
        session_id=stream.id,
        source=stream.source,
        format=stream.format,
        messages=stream,
        boundaries=live if "compactions" in metadata else None,
        engines=engines,
        context_length=context_length,
        model=session_model,
        options=options,
        progress=progress,
    )


def compare_sessions(
    sessions: Iterable[Session | SessionStream],
    engines: Sequence[str],
    *,
    context_length: int,
    model: str | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
) -> list[SessionComparison]:
    """Replay every session through every engine; ``options`` maps engine name to its options.

    ``model`` None means the session's recorded model, else :data:`DEFAULT_MODEL`
    (it chooses the tokenizer and is what the engines are told). Streams
    (:func:`~contextengine.formats.iter_sessions`) go through :func:`compare_stream`.
    """
    results = []
    for session in sessions:
        if isinstance(session, SessionStream):
            results.append(
                compare_stream(
                    session,
                    engines,
                    context_length=context_length,
                    model=model,
                    options=options,
                    progress=progress,
                )
            )
            continue
        session_model = model or str(session.metadata.get("model") or DEFAULT_MODEL)
        recorded: list[Any] = sorted(
            (c for c in session.metadata.get("compactions") or [] if is_boundary(c)),
            key=lambda c: int(c["index"]),
        )
        results.append(
            _compare(
                session_id=session.id,
                source=session.source,
                format=session.format,
                messages=session.messages,
                boundaries=_constant(recorded) if recorded else None,
                engines=engines,
                context_length=context_length,
                model=session_model,
                options=options,
                progress=progress,
            )
        )
    return results


def _constant(values: Sequence[Any]) -> Callable[[], Sequence[Any]]:
    return lambda: values
