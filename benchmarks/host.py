"""Per-request CPU cost of ContextHost + engine as the history grows (100 / 1,000 / 5,000 messages).

Replays one long chained session: the tau-bench airline trajectories in
../shared/data, one after another (tool-call ids made unique, one system
prompt), or a synthetic tool-calling session when that data is absent. Every
assistant message is one request: ``prepare_request`` on the history so far,
``record_response`` with a usage that matches it, and ``after_tool_calls``
after tool results, as an agent loop would. The context window is set far
above the history so nothing is compacted: this measures the host's own
plumbing (rough estimate, preflight checks, select_context, sanitising,
usage) plus the engine's per-request hooks, not compaction.

For each size the last 200 requests before the history reaches it are
timed with ``time.process_time_ns`` (CPU time, so other processes on the
machine do not count); the table gives the median and p95 in microseconds
and the ratio of the median to the 100-message one. Goal: under 1 ms at
5,000 messages and within 1.5x of the 100-message figure.

Run: ``PYTHONPATH=src python benchmarks/host.py [--engine compressor]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from contextengine.host import ContextHost
from contextengine.replay.loop import build_engine

Message = dict[str, Any]

SIZES = (100, 1_000, 5_000)
WINDOW = 200
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau-bench"


#: What run_all measures: the host's own overhead (a window so large nothing is
#: ever compacted), and the lossless engine at a real window, where its view is
#: bounded by the threshold rather than by the history.
DEFAULT_RUNS = (("compressor", 100_000_000), ("lcm", 128_000))


def tau_session(limit: int) -> tuple[list[Message], str]:
    """Chained tau-bench trajectories, or a synthetic session when the data is absent."""
    files = sorted(DATA.glob("historical_trajectories/*.json"))
    if not files:
        return synthetic_session(limit), "synthetic"
    runs = json.loads(files[0].read_text(encoding="utf-8"))
    chained: list[Message] = []
    for n, run in enumerate(runs):
        for msg in run.get("traj") or []:
            if msg.get("role") == "system" and chained:
                continue
            msg = dict(msg)
            if msg.get("tool_calls"):
                msg["tool_calls"] = [
                    {**call, "id": f"r{n}_{call.get('id')}"} for call in msg["tool_calls"]
                ]
            if msg.get("role") == "tool":
                msg["tool_call_id"] = f"r{n}_{msg.get('tool_call_id')}"
            chained.append(msg)
        if len(chained) >= limit + 50:
            break
    if len(chained) < limit:
        return synthetic_session(limit), "synthetic (tau-bench too short)"
    return chained, f"tau-bench ({files[0].name}, chained)"


def synthetic_session(limit: int) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "You are an airline agent. " * 40}]
    i = 0
    while len(messages) < limit + 50:
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "get_reservation", "arguments": json.dumps({"id": i})},
        }
        messages += [
            {"role": "user", "content": f"Please check reservation {i}. " * 5},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": json.dumps(
                    {"seat": i}
                    | {"flights": [{"n": f"HAT{j:03d}", "date": "2024-05-01"} for j in range(6)]}
                ),
            },
            {"role": "assistant", "content": f"Reservation {i} is confirmed. " * 4},
        ]
        i += 1
    return messages


def replay(
    engine_name: str, session: list[Message], limit: int, context_length: int = 100_000_000
) -> list[int]:
    """CPU nanoseconds of each request among the session's messages limit - WINDOW..limit."""
    # build_engine gives an engine that takes a store an in-memory one: a
    # benchmark never writes into the user's archive.
    engine = build_engine(engine_name, context_length=context_length, model="gpt-4o")
    host = ContextHost(engine, model="gpt-4o", context_length=context_length)
    host.start_session("bench")
    history: list[Message] = []
    timings: list[int] = []
    for index, msg in enumerate(session[:limit]):
        # Timed by position in the recorded session: a compacted history is shorter.
        timed = index >= limit - WINDOW
        if msg.get("role") == "assistant" and history:
            started = time.process_time_ns()
            host.prepare_request(history)
            history = host.history
            rough = host.status()["rough_tokens"]
            host.record_response(
                {"prompt_tokens": rough, "completion_tokens": 50, "total_tokens": rough + 50}
            )
            elapsed = time.process_time_ns() - started
            if timed:
                timings.append(elapsed)
        history.append(msg)
        if msg.get("role") == "assistant" and not msg.get("tool_calls"):
            host.end_turn(history)  # the turn's end resets the host's per-turn pass budget
        if msg.get("role") == "tool" and history and history[-1] is msg:
            started = time.process_time_ns()
            history = host.after_tool_calls(history)
            elapsed = time.process_time_ns() - started
            if timings and timed:
                timings[-1] += elapsed
    host.end_session(history)
    return timings


def percentile(values: list[int], share: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(share * len(ordered)))])


def run(engines: tuple[tuple[str, int], ...] = DEFAULT_RUNS) -> str:
    """Replay every (engine, context length) at every size; the markdown tables."""
    return "\n\n".join(_table(name, context_length) for name, context_length in engines)


def _table(engine_name: str, context_length: int) -> str:
    session, source = tau_session(max(SIZES))
    rows = []
    base = 0.0
    for size in SIZES:
        timings = replay(engine_name, session, size, context_length)
        median = statistics.median(timings) / 1_000
        p95 = percentile(timings, 0.95) / 1_000
        base = base or median
        rows.append(
            f"| {size:,} | {len(timings)} | {median:.1f} | {p95:.1f} | {median / base:.2f}x |"
        )
    header = [
        f"Host + `{engine_name}` engine at a {context_length:,}-token context, CPU time per"
        f" request, session: {source}",
        "",
        "| messages | requests timed | median µs | p95 µs | median vs 100 |",
        "|---:|---:|---:|---:|---:|",
    ]
    return "\n".join(header + rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="compressor")
    parser.add_argument("--context-length", type=int, default=100_000_000)
    args = parser.parse_args()
    print(run(((args.engine, args.context_length),)))


if __name__ == "__main__":
    main()
