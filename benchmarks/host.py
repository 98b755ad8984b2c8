"""Per-request cost of ContextHost + engine as the history grows, warm and cold, for every engine.

What a user's agent pays on each request, for ``compressor`` and ``lcm`` in
the same run and the same table:

* **the session**: the 30 mini-swe-agent SWE-bench trajectories in
  ../shared/data chained into one conversation (one system prompt, tool-call
  ids made unique per chained run). The data holds 2,720 messages, so longer
  sessions cycle it, and every cycled copy carries its run number inside each
  message's text: no message repeats exactly, so the token-count caches do no
  better than they would on a real session. A synthetic coding session
  stands in when the data is absent.
* **the store**: lcm writes to a SQLite file in a fresh temporary directory
  (WAL, ``synchronous=FULL``, as the user's archive is), never ``:memory:``.
* **the loop**: each recorded assistant message is one request, driven as
  the README's agent loop drives it. A request's figure is the sum of every
  hook of that request: ``after_tool_calls`` (when tool results were appended
  since the previous reply), ``prepare_request``, ``record_response`` (a usage
  dict whose prompt tokens are those of the request sent) and ``end_turn``
  when the reply ends the turn. The recorded reply stands in for the model;
  building the usage dict is the provider's work and is not timed.
* **the context length**: 100,000,000 tokens, so the view is never capped
  and nothing compacts: the figure is the steady per-request plumbing on a
  growing history (``benchmarks/compaction.py`` measures compaction).
* **warm**: every size runs in a fresh engine, a fresh temporary directory
  and empty token caches; the last 200 requests before the history reaches
  the size are timed in wall time (``time.perf_counter_ns``) and CPU time
  (``time.process_time_ns``). A size that the time budget does not let the
  replay reach is reported as such, never extrapolated.
* **cold**: resuming at that size. lcm: a new engine and host on the same
  archive file, ``start_session`` with the same key, then the first
  ``prepare_request`` with the full history (a JSON copy, as a new process
  would load it). compressor: a fresh engine and host given the full history
  on their first request. The token caches are emptied first, as in a new
  process; loading the vocabulary (once per process) is not included.

``run()`` returns the markdown for ``run_all.py``. The session builder and the
agent loop are reused by ``compaction.py`` and ``session_memory.py``.

Run: ``PYTHONPATH=src python benchmarks/host.py [--quick] [--sizes 100,1000]
[--budget 120] [--engines compressor,lcm]``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextengine import ContextHost, DeterministicSummarizer, load_session
from contextengine.engine import ContextEngine
from contextengine.errors import ContextEngineError
from contextengine.events import CompactionEvent, Event
from contextengine.replay.loop import build_engine
from contextengine.tokens import cache_clear, estimate_tokens_rough, message_tokens

__all__ = [
    "AgentLoop",
    "RequestTiming",
    "Session",
    "archive_location",
    "close_engine",
    "fmt_ms",
    "load_session_data",
    "make_engine",
    "percentile",
    "run",
]

Message = dict[str, Any]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MODEL = "gpt-4o"
ENGINES = ("compressor", "lcm")
SIZES = (100, 1_000, 5_000, 50_000)
QUICK_SIZES = (100, 1_000, 5_000)
#: Far above any history here: the view is never capped and nothing compacts.
UNCAPPED = 100_000_000
TIMED_REQUESTS = 200
#: Wall-clock seconds one (engine, size) replay may take before it is cut short.
BUDGET_S = 120.0
QUICK_BUDGET_S = 30.0
SESSION_KEY = "bench"
#: Issue 10's targets, on the warm wall median.
TARGET_FLAT = 2.0
TARGET_VS_COMPRESSOR = 3.0


# ---------------------------------------------------------------- the session


@dataclass(frozen=True)
class Session:
    """Recorded runs chained into one endless conversation (see :meth:`messages`)."""

    system: Message
    #: Each run's messages without its system prompt.
    runs: list[list[Message]]
    source: str

    @property
    def base_messages(self) -> int:
        """Messages before the data starts to cycle (the system prompt included)."""
        return 1 + sum(len(run) for run in self.runs)

    def messages(self) -> Iterator[Message]:
        """The chained session, cycled forever; take what you need with :meth:`take`.

        Every message is a new dict holding new strings. Tool-call ids get the
        chained run's number (``r<n>_``) so they stay unique; from the second
        pass over the data on, each text also ends with ``[run <n>]`` and each
        call's arguments get ``"run": <n>``, so no message is an exact repeat
        of an earlier one (a real session does not repeat itself, and the
        token caches are keyed by content).
        """
        yield dict(self.system)
        for lap in itertools.count():
            for number, run in enumerate(self.runs):
                tag = lap * len(self.runs) + number
                for message in run:
                    yield _chained(message, tag, marked=lap > 0)

    def take(self, count: int) -> list[Message]:
        """The first ``count`` messages of :meth:`messages`."""
        return list(itertools.islice(self.messages(), count))


def _fresh(text: str, tag: int, *, marked: bool) -> str:
    """``text`` as a new string object, with the run number when ``marked``.

    New objects even unmarked: CPython caches a string's hash on the object, and
    a string hashed by an earlier replay in this process would make the token
    cache's lookups cheaper than in a process that just read the session.
    """
    return f"{text}\n[run {tag}]" if marked else (text + " ")[:-1]


def _arguments(arguments: Any, tag: int, *, marked: bool) -> Any:
    if not isinstance(arguments, str):
        return arguments
    if marked:
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            # Arguments are counted too: a cycled copy must not repeat them exactly.
            return json.dumps({**parsed, "run": tag})
    return _fresh(arguments, tag, marked=marked)


def _chained(message: Message, tag: int, *, marked: bool) -> Message:
    out = dict(message)
    calls = out.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                **call,
                "id": f"r{tag}_{call.get('id')}",
                "function": {
                    **call.get("function", {}),
                    "arguments": _arguments(
                        call.get("function", {}).get("arguments"), tag, marked=marked
                    ),
                },
            }
            for call in calls
        ]
    if out.get("role") == "tool":
        out["tool_call_id"] = f"r{tag}_{out.get('tool_call_id')}"
    if isinstance(out.get("content"), str):
        out["content"] = _fresh(out["content"], tag, marked=marked)
    return out


def load_session_data(data: Path = DATA) -> Session:
    """The mini-swe-agent trajectories under ``data``, or a synthetic session when absent."""
    files = sorted((data / "mini-swe-agent" / "trajs").glob("*.traj.json"))
    system: Message | None = None
    runs: list[list[Message]] = []
    for path in files:
        try:
            messages = load_session(path, format="swe-agent").messages
        except ContextEngineError:
            continue
        if messages and messages[0].get("role") == "system":
            system = system or messages[0]
            messages = messages[1:]
        runs.append(messages)
    if system is None or not runs:
        return _synthetic_session()
    count = 1 + sum(len(run) for run in runs)
    return Session(
        system,
        runs,
        f"mini-swe-agent ({len(runs)} SWE-bench trajectories chained, {count:,} messages,"
        " cycled with a run number beyond)",
    )


def _synthetic_session(runs: int = 30, steps: int = 40) -> Session:
    """A bash-tool coding session of the same shape as the real one, for when the data is absent."""
    rng = random.Random(10)
    words = [
        *("def", "class", "import", "return", "self", "value", "error", "test", "assert"),
        *("config", "path", "file", "line", "module", "request", "response", "token"),
        *("cache", "index", "query", "commit", "branch", "build"),
    ]
    recorded: list[list[Message]] = []
    for run in range(runs):
        messages: list[Message] = [
            {"role": "user", "content": f"Task {run}: fix the failing test in module_{run}.py. "}
        ]
        for step in range(steps):
            call = f"call_{step}"
            command = f"grep -n {rng.choice(words)} src/module_{run}_{step}.py"
            messages.append(
                {
                    "role": "assistant",
                    "content": f"THOUGHT: step {step} of task {run}, looking at the code.",
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {
                                "name": "bash",
                                "arguments": json.dumps({"command": command}),
                            },
                        }
                    ],
                }
            )
            lines = [
                f"{n}: " + " ".join(rng.choice(words) for _ in range(12))
                for n in range(rng.randint(5, 80))
            ]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": "<returncode>0</returncode>\n<output>\n"
                    + "\n".join(lines)
                    + "\n</output>",
                }
            )
        messages.append({"role": "assistant", "content": f"Task {run} is done."})
        recorded.append(messages)
    system = {"role": "system", "content": "You are a coding agent with a bash tool. " * 20}
    return Session(system, recorded, "synthetic coding session (../shared/data absent)")


# ---------------------------------------------------------------- engines and the loop


def make_engine(
    name: str, *, context_length: int, store: Path | None = None, **options: Any
) -> ContextEngine:
    """``name`` with the offline summariser and, for lcm, the SQLite file ``store``."""
    given: dict[str, Any] = {"summarizer": DeterministicSummarizer(), **options}
    if name == "lcm":
        if store is None:
            raise ValueError("lcm is measured on a file store: pass store=")
        given["store"] = str(store)
    return build_engine(name, context_length=context_length, model=MODEL, options=given)


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One request: every hook of it, in nanoseconds of wall and CPU time."""

    #: Messages of the recorded session fed before this request's reply.
    position: int
    wall_ns: int
    cpu_ns: int
    #: A CompactionEvent was emitted during one of the request's hooks.
    compacted: bool


class _PromptTokens:
    """Prompt tokens of each request sent, as the provider's usage would report them.

    Counted incrementally when a request starts with the previous one (compared
    with ``==``, which is a pointer check per message while the messages are
    the same objects, as they are between compactions), in full otherwise. Not
    timed: it is the provider's count.
    """

    def __init__(self) -> None:
        self.previous: list[Message] = []
        self.total = 0

    def of(self, request: list[Message]) -> int:
        count = len(self.previous)
        if len(request) < count or request[:count] != self.previous:
            self.total, count = 0, 0
        self.total += sum(message_tokens(m, MODEL) for m in request[count:])
        # A copy: the compressor's request can be the history itself, which grows.
        self.previous = list(request)
        return self.total + 3


class AgentLoop:
    """Feeds recorded messages to a ContextHost as the README's agent loop would.

    ``feed`` takes the session one message at a time: a user message is
    appended; an assistant message is the reply to a request (prepare_request,
    record_response, append, end_turn when it calls no tool); tool results are
    appended and, once every call of the reply is answered, handed to
    ``after_tool_calls``, whose cost is charged to the next request. Each
    request's :class:`RequestTiming` is returned, and kept in :attr:`requests`
    unless ``feed`` is called with ``timed=False``. :attr:`compaction_events`
    counts the host's CompactionEvents.
    """

    def __init__(
        self,
        engine: ContextEngine,
        *,
        context_length: int,
        session_key: str = SESSION_KEY,
        observers: Iterable[Any] = (),
    ) -> None:
        self.engine = engine
        self.host = ContextHost(
            engine,
            model=MODEL,
            context_length=context_length,
            observers=[self._observe, *observers],
        )
        self.host.start_session(session_key)
        self.history: list[Message] = []
        self.requests: list[RequestTiming] = []
        self.fed = 0
        self.compaction_events = 0
        self._prompt = _PromptTokens()
        self._unanswered: set[Any] = set()
        self._carry_wall = 0
        self._carry_cpu = 0
        self._carry_compacted = False

    def _observe(self, event: Event) -> None:
        if isinstance(event, CompactionEvent):
            self.compaction_events += 1

    def feed(self, message: Message, *, timed: bool = True) -> RequestTiming | None:
        """Process one recorded message; returns the timing when it was a request's reply."""
        role = message.get("role")
        position = self.fed
        self.fed += 1
        if role == "assistant" and self.history:
            timing = self._request(message, position)
            if timed:
                self.requests.append(timing)
            return timing
        self.history.append(message)
        if role == "assistant" and message.get("tool_calls"):
            self._unanswered = {call.get("id") for call in message["tool_calls"]}
        elif role == "tool" and self._unanswered:
            self._unanswered.discard(message.get("tool_call_id"))
            if not self._unanswered:
                self._after_tool_calls()
        return None

    def _after_tool_calls(self) -> None:
        events = self.compaction_events
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        self.history = self.host.after_tool_calls(self.history)
        self._carry_wall += time.perf_counter_ns() - wall
        self._carry_cpu += time.process_time_ns() - cpu
        self._carry_compacted = self._carry_compacted or self.compaction_events > events

    def _request(self, reply: Message, position: int) -> RequestTiming:
        host = self.host
        events = self.compaction_events
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        request = host.prepare_request(self.history)
        wall_ns = time.perf_counter_ns() - wall
        cpu_ns = time.process_time_ns() - cpu
        self.history = host.history
        # The provider's side, not timed: the usage it would report for this request.
        # The reply's size is a rough estimate on purpose: counting it exactly here
        # would warm the token cache for the host, which counts it next request.
        prompt = self._prompt.of(request)
        completion = estimate_tokens_rough([reply])
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        host.record_response(usage)
        wall_ns += time.perf_counter_ns() - wall
        cpu_ns += time.process_time_ns() - cpu
        self.history.append(reply)
        if reply.get("tool_calls"):
            self._unanswered = {call.get("id") for call in reply["tool_calls"]}
        else:
            wall, cpu = time.perf_counter_ns(), time.process_time_ns()
            host.end_turn(self.history, usage)
            wall_ns += time.perf_counter_ns() - wall
            cpu_ns += time.process_time_ns() - cpu
        timing = RequestTiming(
            position=position,
            wall_ns=wall_ns + self._carry_wall,
            cpu_ns=cpu_ns + self._carry_cpu,
            compacted=self._carry_compacted or self.compaction_events > events,
        )
        self._carry_wall = self._carry_cpu = 0
        self._carry_compacted = False
        return timing

    def close(self) -> None:
        """End the session (a real boundary) and close the engine."""
        try:
            self.host.end_session(self.history)
        finally:
            close_engine(self.engine)


# ---------------------------------------------------------------- helpers


def close_engine(engine: ContextEngine) -> None:
    """Release the engine's store when it has one (``close`` is not part of the contract)."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in 0..1)."""
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(share * len(ordered)) - 1)])


def fmt_ms(ns: float) -> str:
    """Nanoseconds as milliseconds with sensible precision."""
    ms = ns / 1e6
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 1:
        return f"{ms:.1f}"
    return f"{ms:.3f}"


def archive_location(directory: Path) -> str:
    """The filesystem type holding ``directory`` (tmpfs would make fsync free)."""
    best, kind = "", "unknown filesystem"
    try:
        target = str(directory.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and target.startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    except OSError:
        pass
    note = " (fsync is free there: flattering)" if kind in ("tmpfs", "ramfs") else ""
    return f"{kind} under {directory}{note}"


# ---------------------------------------------------------------- the benchmark


@dataclass
class WarmResult:
    engine: str
    size: int
    timings: list[RequestTiming]
    #: Messages fed when the budget ran out, or None when the size was reached.
    stopped_at: int | None
    seconds: float


@dataclass
class ColdResult:
    engine: str
    size: int
    wall_ns: int
    cpu_ns: int
    #: Messages the lcm archive was topped up with (the warm replay stopped short).
    topped_up: int = 0


def warm(
    engine_name: str, session: Session, size: int, directory: Path, budget_s: float
) -> tuple[WarmResult, list[Message]]:
    """Replay ``size`` messages in a fresh engine; the last TIMED_REQUESTS requests are kept.

    Returns the result and the session's first ``size`` messages (for the cold run).
    """
    cache_clear()  # a fresh session in a fresh process: nothing counted yet
    gc.collect()
    # Generated as the replay goes: an agent does not hold its future messages, and
    # 50,000 of them held in advance would slow every full garbage collection.
    messages = itertools.islice(session.messages(), size)
    engine = make_engine(engine_name, context_length=UNCAPPED, store=directory / "archive.db")
    loop = AgentLoop(engine, context_length=UNCAPPED)
    started = time.perf_counter()
    stopped_at: int | None = None
    timings: list[RequestTiming] = []
    try:
        for message in messages:
            timing = loop.feed(message, timed=False)
            if timing is not None:
                timings.append(timing)
                del timings[:-TIMED_REQUESTS]
                # Checked between requests only: a request is never cut in half.
                if time.perf_counter() - started > budget_s:
                    stopped_at = loop.fed
                    break
    finally:
        loop.close()
    result = WarmResult(engine_name, size, timings, stopped_at, time.perf_counter() - started)
    return result, session.take(size)


def cold(engine_name: str, messages: list[Message], directory: Path, archived: int) -> ColdResult:
    """The first request of a resumed session holding ``messages`` (see the module docstring)."""
    path = directory / "archive.db"
    topped_up = 0
    if engine_name == "lcm" and archived < len(messages):
        # The warm replay stopped short: store the rest in one turn so the
        # archive holds the whole history, as it would have had the replay ended.
        engine = make_engine("lcm", context_length=UNCAPPED, store=path)
        engine.on_session_start(SESSION_KEY)
        engine.on_turn_complete(messages)
        close_engine(engine)
        topped_up = len(messages) - archived
    # A resumed agent loads its history from disk: new objects, no shared identity.
    history = json.loads(json.dumps(messages))
    cache_clear()
    gc.collect()
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    engine = make_engine(engine_name, context_length=UNCAPPED, store=path)
    host = ContextHost(engine, model=MODEL, context_length=UNCAPPED)
    host.start_session(SESSION_KEY)
    host.prepare_request(history)
    wall_ns = time.perf_counter_ns() - wall
    cpu_ns = time.process_time_ns() - cpu
    close_engine(engine)
    return ColdResult(
        engine_name, size=len(messages), wall_ns=wall_ns, cpu_ns=cpu_ns, topped_up=topped_up
    )


def measure(
    engines: Sequence[str], sizes: Sequence[int], session: Session, budget_s: float
) -> tuple[list[WarmResult], list[ColdResult], str]:
    """Warm and cold runs of every engine at every size, each in its own temp directory."""
    warm_results: list[WarmResult] = []
    cold_results: list[ColdResult] = []
    where = ""
    for size in sizes:
        for name in engines:
            with tempfile.TemporaryDirectory(prefix=f"ce-host-{name}-{size}-") as tmp:
                directory = Path(tmp)
                where = where or archive_location(directory.parent)
                result, messages = warm(name, session, size, directory, budget_s)
                warm_results.append(result)
                archived = result.stopped_at if result.stopped_at is not None else size
                cold_results.append(cold(name, messages, directory, archived))
                del messages
    return warm_results, cold_results, where


def _warm_table(results: list[WarmResult], engines: Sequence[str], budget_s: float) -> list[str]:
    by = {(r.engine, r.size): r for r in results}
    base: dict[str, float] = {}
    smallest = min((r.size for r in results), default=0)
    lines = [
        "| messages | engine | requests timed | wall median ms | wall p95 ms | CPU median ms"
        f" | CPU p95 ms | wall median vs {smallest:,} | lcm / compressor (wall median)"
        " | replay s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sorted({r.size for r in results}):
        for name in engines:
            r = by.get((name, size))
            if r is None:
                continue
            if r.stopped_at is not None:
                tail = ""
                if r.timings:
                    wall = statistics.median(t.wall_ns for t in r.timings)
                    tail = f"; wall median {fmt_ms(wall)} ms there"
                lines.append(
                    f"| {size:,} | {name} | not reached in {budget_s:.0f} s (stopped at"
                    f" {r.stopped_at:,} messages{tail}) | – | – | – | – | – | – |"
                    f" {r.seconds:.0f} |"
                )
                continue
            walls = [t.wall_ns for t in r.timings]
            cpus = [t.cpu_ns for t in r.timings]
            median = statistics.median(walls)
            # The ratio is to the smallest size only: a later size cannot stand in for it.
            if size == smallest:
                base[name] = median
            vs_base = f"{median / base[name]:.2f}x" if name in base else "–"
            ratio = ""
            other = by.get(("compressor", size))
            if name == "lcm" and other and other.stopped_at is None and other.timings:
                ratio = f"{median / statistics.median(t.wall_ns for t in other.timings):.1f}x"
            lines.append(
                f"| {size:,} | {name} | {len(walls)} | {fmt_ms(median)} |"
                f" {fmt_ms(percentile(walls, 0.95))} | {fmt_ms(statistics.median(cpus))} |"
                f" {fmt_ms(percentile(cpus, 0.95))} | {vs_base} | {ratio} | {r.seconds:.0f} |"
            )
    return lines


def _cold_table(results: list[ColdResult], engines: Sequence[str]) -> list[str]:
    by = {(r.engine, r.size): r for r in results}
    lines = [
        "| messages | engine | wall ms | CPU ms | lcm / compressor (wall) |",
        "|---:|---|---:|---:|---:|",
    ]
    for size in sorted({r.size for r in results}):
        for name in engines:
            r = by.get((name, size))
            if r is None:
                continue
            ratio = ""
            other = by.get(("compressor", size))
            if name == "lcm" and other:
                ratio = f"{r.wall_ns / max(1, other.wall_ns):.1f}x"
            note = f" (archive topped up with {r.topped_up:,})" if r.topped_up else ""
            lines.append(
                f"| {size:,} | {name}{note} | {fmt_ms(r.wall_ns)} | {fmt_ms(r.cpu_ns)} | {ratio} |"
            )
    return lines


def _targets(results: list[WarmResult], budget_s: float) -> str:
    def median(name: str, size: int) -> float | None:
        for r in results:
            if r.engine == name and r.size == size and r.stopped_at is None and r.timings:
                return float(statistics.median(t.wall_ns for t in r.timings))
        return None

    def verdict(a: float | None, b: float | None, limit: float, what: str) -> str:
        if a is None or b is None:
            return f"{what}: not measured (not reached in {budget_s:.0f} s or size not run)"
        ratio = a / b
        return f"{what}: {'PASS' if ratio <= limit else 'FAIL'} ({ratio:.1f}x)"

    base = median("lcm", 100)
    checks = [
        verdict(median("lcm", 5_000), base, TARGET_FLAT, "lcm at 5,000 within 2x of lcm at 100"),
        verdict(
            median("lcm", 5_000),
            median("compressor", 5_000),
            TARGET_VS_COMPRESSOR,
            "lcm at 5,000 within 3x of the compressor at 5,000",
        ),
        verdict(median("lcm", 50_000), base, TARGET_FLAT, "flat: lcm at 50,000 within 2x of 100"),
    ]
    return "Issue 10 targets (warm wall median): " + "; ".join(checks) + "."


def run(
    sizes: Sequence[int] = SIZES,
    *,
    quick: bool = False,
    budget_s: float | None = None,
    engines: Sequence[str] = ENGINES,
    data: Path = DATA,
) -> str:
    """Warm and cold per-request cost of every engine at every size; markdown tables."""
    if quick:
        sizes = [s for s in sizes if s <= max(QUICK_SIZES)] or list(QUICK_SIZES)
    budget = budget_s if budget_s is not None else (QUICK_BUDGET_S if quick else BUDGET_S)
    session = load_session_data(data)
    warm_results, cold_results, where = measure(engines, sizes, session, budget)
    header = (
        f"Session: {session.source}. Context length {UNCAPPED:,} tokens: the view is never"
        f" capped and nothing compacts. lcm archive: a SQLite file on {where}. Model {MODEL}"
        " (o200k). Offline summariser."
    )
    warm_note = (
        "Warm: per request, the sum of every hook an agent loop calls for it (after_tool_calls"
        " when tool results came before it, prepare_request, record_response, and end_turn"
        " when the reply ends the turn), over the last"
        f" {TIMED_REQUESTS} requests before the history reaches the size, each size in a fresh"
        " engine, temp directory and empty token caches. Wall time includes SQLite commits and"
        " fsyncs and any wait on this shared 2-core machine; CPU time excludes waits. Excluded:"
        " the model call and the provider's token count for the usage dict. A replay cut by its"
        f" {budget:.0f} s budget is reported as not reached."
    )
    cold_note = (
        "Cold: resuming at that size. lcm: engine construction on the same archive file,"
        " start_session with the same key and the first prepare_request with the full history"
        " (a JSON copy, new objects as a new process would load); compressor: a fresh engine"
        " and host, the same first request. Token caches emptied first, as in a new process;"
        " the vocabulary load (once per process) and reading the history from disk excluded."
    )
    return "\n".join(
        [
            header,
            "",
            *_warm_table(warm_results, engines, budget),
            "",
            warm_note,
            "",
            _targets(warm_results, budget),
            "",
            *_cold_table(cold_results, engines),
            "",
            cold_note,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"sizes up to {max(QUICK_SIZES):,}")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--budget", type=float, default=None, help="seconds per engine and size")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    engines = [e for e in args.engines.split(",") if e.strip()]
    print(run(sizes, quick=args.quick, budget_s=args.budget, engines=engines, data=args.data))


if __name__ == "__main__":
    main()
