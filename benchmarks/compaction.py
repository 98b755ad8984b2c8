"""What compaction costs: one forced compaction, and the requests that compact during a replay.

Both engines on the same session: the first 5,000 messages of the chained
mini-swe-agent trajectories (``host.py`` builds it; synthetic when
../shared/data is absent), model gpt-4o (o200k), the offline
``DeterministicSummarizer``, lcm on a SQLite file in a fresh temporary
directory (never ``:memory:``).

1. **Forced compaction** at a 32,000-token context. The engine is given the
   whole session first (``on_session_start``, then ``on_turn_complete`` with
   every message: lcm archives them all) and the token cache is warm, as a
   host that ran the session would have left it. Then one
   ``engine.compress(history, force=True)`` is timed in wall and CPU time.
   Reported: summaries written and summariser calls (``last_compression``),
   the view's exact tokens after, and whether it fits the threshold.
2. **Replay** at a 64,000-token context through ``ContextHost``, the agent
   loop of ``host.py`` (every hook of each request: after_tool_calls,
   prepare_request, record_response, end_turn). An observer marks the
   requests during which a ``CompactionEvent`` was emitted; the medians and
   p95 of those and of the others are reported per engine, and the
   lcm/compressor ratio of the compacting medians (issue 10's target: 3x).

Each replay is bounded by a time budget; a replay cut short says so and
reports the requests it reached.

Run: ``PYTHONPATH=src python benchmarks/compaction.py [--quick] [--messages 5000]
[--budget 300]``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from contextengine.tokens import cache_clear, count_message_tokens

__all__ = ["run"]

Message = dict[str, Any]

FORCED_CONTEXT = 32_000
REPLAY_CONTEXT = 64_000
MESSAGES = 5_000
QUICK_MESSAGES = 1_000
#: Wall-clock seconds one engine's replay may take before it is cut short.
BUDGET_S = 300.0
QUICK_BUDGET_S = 60.0
TARGET_VS_COMPRESSOR = 3.0
#: lcm's note for raw messages it left out of the view unsummarised (assemble.py).
HIDDEN_NOTE = "[Not shown for space:"


def _host() -> ModuleType:
    """``benchmarks/host.py``, imported by path (this folder is not a package)."""
    name = "_benchmark_host"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("host.py"))
    if spec is None or spec.loader is None:
        raise ImportError("cannot import benchmarks/host.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


host = _host()


# ---------------------------------------------------------------- 1. one forced compaction


@dataclass
class Forced:
    engine: str
    wall_s: float
    cpu_s: float
    messages_before: int
    tokens_before: int
    messages_after: int
    view_tokens: int
    threshold: int
    summaries: int
    summarizer_calls: int
    stopped: str
    #: The view leaves raw messages out for space (lcm's "Not shown for space" note).
    hidden: bool


def forced(name: str, messages: list[Message], directory: Path) -> Forced:
    """One ``compress(force=True)`` of ``messages`` at FORCED_CONTEXT, after ingesting them."""
    cache_clear()
    gc.collect()
    engine = host.make_engine(name, context_length=FORCED_CONTEXT, store=directory / "archive.db")
    tokens = count_message_tokens(messages, host.MODEL)  # the warm cache a host leaves
    engine.on_session_start(host.SESSION_KEY)
    engine.on_turn_complete(messages)
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    result = engine.compress(list(messages), current_tokens=tokens, force=True)
    wall_ns = time.perf_counter_ns() - wall
    cpu_ns = time.process_time_ns() - cpu
    report = engine.last_compression
    if name == "lcm":
        summaries = len(getattr(report, "written", ()) or ())
        stopped = str(getattr(report, "stopped", None) or "–")
    else:
        # The compressor writes at most one summary, when pruning was not enough.
        summaries = int(bool(getattr(report, "summarized_messages", 0)))
        stopped = str(getattr(report, "reason", "") or "–")
    out = Forced(
        engine=name,
        wall_s=wall_ns / 1e9,
        cpu_s=cpu_ns / 1e9,
        messages_before=len(messages),
        tokens_before=tokens,
        messages_after=len(result),
        view_tokens=count_message_tokens(result, host.MODEL),
        threshold=int(engine.threshold_tokens),
        summaries=summaries,
        summarizer_calls=int(getattr(report, "summarizer_calls", 0) or 0),
        stopped=stopped,
        hidden=any(HIDDEN_NOTE in str(m.get("content") or "") for m in result),
    )
    host.close_engine(engine)
    return out


def _forced_table(results: list[Forced]) -> list[str]:
    lines = [
        "| engine | messages | tokens before | wall s | CPU s | summaries written"
        " | summariser calls | view tokens after | threshold | fits | messages hidden unsummarised"
        " | stopped / reason |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.engine} | {r.messages_before:,} | {r.tokens_before:,} | {r.wall_s:.2f} |"
            f" {r.cpu_s:.2f} | {r.summaries} | {r.summarizer_calls} | {r.view_tokens:,} |"
            f" {r.threshold:,} | {'yes' if r.view_tokens <= r.threshold else 'NO'} |"
            f" {'yes' if r.hidden else 'no'} | {r.stopped} |"
        )
    return lines


# ---------------------------------------------------------------- 2. replay through the host


@dataclass
class Replay:
    engine: str
    timings: list[Any]
    compactions: int
    fed: int
    #: Messages fed when the budget ran out, or None when the session was replayed whole.
    stopped_at: int | None
    seconds: float


def replay(name: str, messages: list[Message], directory: Path, budget_s: float) -> Replay:
    """The session through ContextHost at REPLAY_CONTEXT, every request timed."""
    cache_clear()
    gc.collect()
    engine = host.make_engine(name, context_length=REPLAY_CONTEXT, store=directory / "archive.db")
    loop = host.AgentLoop(engine, context_length=REPLAY_CONTEXT)
    started = time.perf_counter()
    stopped_at: int | None = None
    try:
        for message in messages:
            timing = loop.feed(message)
            if timing is not None and time.perf_counter() - started > budget_s:
                stopped_at = loop.fed
                break
    finally:
        loop.close()
    return Replay(
        name,
        loop.requests,
        loop.compaction_events,
        loop.fed,
        stopped_at,
        time.perf_counter() - started,
    )


def _stats(values: Sequence[int]) -> tuple[str, str]:
    if not values:
        return "–", "–"
    return host.fmt_ms(statistics.median(values)), host.fmt_ms(host.percentile(values, 0.95))


def _replay_table(results: list[Replay], total: int, budget_s: float) -> list[str]:
    lines = [
        "| engine | messages replayed | requests | compacting requests | compaction events"
        " | compacting wall median / p95 ms | other wall median / p95 ms"
        " | compacting CPU median ms | other CPU median ms | replay wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        hit = [t for t in r.timings if t.compacted]
        rest = [t for t in r.timings if not t.compacted]
        hit_wall = _stats([t.wall_ns for t in hit])
        rest_wall = _stats([t.wall_ns for t in rest])
        hit_cpu = _stats([t.cpu_ns for t in hit])[0]
        rest_cpu = _stats([t.cpu_ns for t in rest])[0]
        reached = (
            f"{r.fed:,}"
            if r.stopped_at is None
            else f"{r.fed:,} of {total:,} (not reached in {budget_s:.0f} s)"
        )
        lines.append(
            f"| {r.engine} | {reached} | {len(r.timings):,} | {len(hit):,} | {r.compactions:,} |"
            f" {hit_wall[0]} / {hit_wall[1]} | {rest_wall[0]} / {rest_wall[1]} | {hit_cpu} |"
            f" {rest_cpu} | {r.seconds:.1f} |"
        )
    return lines


def _replay_target(results: list[Replay], budget_s: float) -> str:
    medians: dict[str, float] = {}
    cut = False
    for r in results:
        hit = [t.wall_ns for t in r.timings if t.compacted]
        cut = cut or r.stopped_at is not None
        if hit:
            medians[r.engine] = float(statistics.median(hit))
    if "lcm" not in medians or "compressor" not in medians:
        return (
            "Issue 10 target (lcm's compacting median within 3x the compressor's): not measured"
            " (an engine did not compact)."
        )
    ratio = medians["lcm"] / medians["compressor"]
    verdict = "PASS" if ratio <= TARGET_VS_COMPRESSOR else "FAIL"
    note = f" (a replay was cut by its {budget_s:.0f} s budget)" if cut else ""
    return (
        f"Issue 10 target (lcm's compacting median within 3x the compressor's): {verdict}"
        f" (lcm/compressor {ratio:.1f}x){note}."
    )


# ---------------------------------------------------------------- run


def run(
    messages: int = MESSAGES,
    *,
    quick: bool = False,
    budget_s: float | None = None,
    engines: Sequence[str] = host.ENGINES,
    data: Path = host.DATA,
) -> str:
    """The forced compaction and the replay of every engine; markdown tables."""
    count = min(messages, QUICK_MESSAGES) if quick else messages
    budget = budget_s if budget_s is not None else (QUICK_BUDGET_S if quick else BUDGET_S)
    session = host.load_session_data(data)
    history = session.take(count)
    forced_results: list[Forced] = []
    replay_results: list[Replay] = []
    where = ""
    for name in engines:
        with tempfile.TemporaryDirectory(prefix=f"ce-compaction-{name}-") as tmp:
            where = where or host.archive_location(Path(tmp).parent)
            forced_results.append(forced(name, history, Path(tmp)))
        with tempfile.TemporaryDirectory(prefix=f"ce-replay-{name}-") as tmp:
            replay_results.append(replay(name, history, Path(tmp), budget))
    header = (
        f"Session: the first {count:,} messages of {session.source}. Model {host.MODEL} (o200k),"
        f" offline summariser, lcm archive a SQLite file on {where}."
    )
    return "\n".join(
        [
            header,
            "",
            f"### One forced compaction at a {FORCED_CONTEXT:,}-token context",
            "",
            *_forced_table(forced_results),
            "",
            "The time of one `engine.compress(history, force=True)` call, after the engine was"
            " given the whole session (lcm archived every message; not timed) with a warm token"
            " cache; it includes lcm's summary commits to the file. View tokens are the exact"
            " count of what compress returned; it fits when at or under the engine's threshold."
            " Hidden: the view leaves older raw messages out, neither summarised nor shown (lcm"
            " does so to fit when its summaries stop short of them); they stay searchable."
            " `stopped` is lcm's reason for stopping early (max_passes, deadline), or the"
            " compressor's report.",
            "",
            f"### Replay through the host at a {REPLAY_CONTEXT:,}-token context",
            "",
            *_replay_table(replay_results, count, budget),
            "",
            "Each request is every hook an agent loop calls for it (after_tool_calls when tool"
            " results came before it, prepare_request, record_response, end_turn when the reply"
            " ends the turn), excluding the model call; compacting requests are those during"
            " which the host emitted a CompactionEvent (aborted attempts included). Wall time"
            f" includes SQLite commits and fsyncs; budget {budget:.0f} s per engine.",
            "",
            _replay_target(replay_results, budget),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MESSAGES:,} messages")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--engines", default=",".join(host.ENGINES))
    parser.add_argument("--budget", type=float, default=None, help="seconds per engine's replay")
    parser.add_argument("--data", type=Path, default=host.DATA)
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e.strip()]
    print(
        run(args.messages, quick=args.quick, budget_s=args.budget, engines=engines, data=args.data)
    )


if __name__ == "__main__":
    main()
