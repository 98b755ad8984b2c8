"""Replay real transcripts through ContextCompressor and report what compaction costs and keeps.

For each transcript a minimal host loop appends the messages turn by turn.
Before every assistant response it bills the prompt tokens of what would be
sent, feeds them to ``update_from_response``, and before the next request asks
``should_compress`` and compacts. Reported per transcript:

* compactions;
* prompt tokens billed in total, with compaction and without (the baseline is
  capped at the context length, as a provider would refuse more);
* engine overhead per turn (update, decision and compaction; median and max, ms);
* anchor retention: the share of the exact identifiers
  (:func:`contextengine.anchors.extract_anchors`) of the compacted region that
  are still present in the context right after each compaction (mean).

Sources (``../shared/data``): mini-swe-agent trajectories (plain messages; the
bash action stays in the assistant text, observations are user messages) and
tau-bench airline runs (native tool calls), chained ten runs to a session so
that they outgrow the window. Also times ``compress()`` on a 5,000-message
session made of chained tau-bench runs, with a warm token cache as a host
would have. Summariser: the offline ``DeterministicSummarizer``.

Usage: ``PYTHONPATH=src python benchmarks/compressor.py [--data DIR] [--context-length N]``.
``run(data_dir) -> str`` returns the markdown for ``run_all``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contextengine.anchors import extract_anchors
from contextengine.engines.compressor import ContextCompressor
from contextengine.identifiers import listed_identifiers
from contextengine.tokens import count_message_tokens, message_tokens

__all__ = ["run"]

Message = dict[str, Any]

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_CONTEXT_LENGTH = 32_000
TAU_RUNS_PER_SESSION = 10
PERF_MESSAGES = 5_000


# ---------------------------------------------------------------- loaders (kept local on purpose:
# the formats package is written separately; these two shapes are simple)


def _clean(msg: dict[str, Any]) -> Message:
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    return {k: msg[k] for k in keep if k in msg and msg[k] is not None}


def load_mini_swe_agent(data: Path) -> Iterator[tuple[str, list[Message]]]:
    for path in sorted((data / "mini-swe-agent" / "trajs").glob("*.traj.json")):
        raw = json.loads(path.read_text())
        messages = [{"role": m["role"], "content": m.get("content") or ""} for m in raw["messages"]]
        yield str(raw.get("instance_id", path.stem)), messages


def load_tau_runs(data: Path) -> list[list[Message]]:
    path = data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    return [[_clean(m) for m in run["traj"]] for run in json.loads(path.read_text())]


def chain(runs: list[list[Message]]) -> list[Message]:
    """One long session: the first run's system prompt, then every run's other messages."""
    out = list(runs[0])
    for run in runs[1:]:
        out += [m for m in run if m.get("role") != "system"]
    return out


def load_tau_sessions(data: Path) -> Iterator[tuple[str, list[Message]]]:
    runs = load_tau_runs(data)
    for start in range(0, len(runs), TAU_RUNS_PER_SESSION):
        group = runs[start : start + TAU_RUNS_PER_SESSION]
        yield f"tau-airline runs {start}-{start + len(group) - 1}", chain(group)


# ---------------------------------------------------------------- replay


def _text(msg: Message) -> str:
    content = msg.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content else ""
    for tool_call in msg.get("tool_calls") or []:
        text += "\n" + str(tool_call.get("function", {}).get("arguments", ""))
    return text


def anchor_retention(before: list[Message], after: list[Message]) -> float | None:
    """Share of the anchors of the messages not kept verbatim that are still in ``after``."""
    kept = {id(m) for m in after}
    region = "\n".join(_text(m) for m in before if id(m) not in kept)
    anchors = set(extract_anchors(region))
    if not anchors:
        return None
    context = "\n".join(_text(m) for m in after)
    listed = listed_identifiers(context)  # paths a summary groups as folder/{a,b}
    return sum(1 for a in anchors if a in context or a in listed) / len(anchors)


def replay(messages: list[Message], context_length: int) -> dict[str, Any]:
    engine = ContextCompressor(context_length=context_length)
    context: list[Message] = []
    full = 0  # tokens of the whole history, for the no-compaction baseline
    billed = baseline = 0
    overhead_ms: list[float] = []
    retention: list[float] = []
    for msg in messages:
        if msg.get("role") == "assistant" and context:
            started = time.perf_counter()
            if engine.should_compress():
                before = context
                context = engine.compress(context)
                if context is not before:
                    share = anchor_retention(before, context)
                    if share is not None:
                        retention.append(share)
            overhead = time.perf_counter() - started
            prompt = count_message_tokens(context)
            billed += prompt
            baseline += min(full + 3, context_length)
            started = time.perf_counter()
            engine.update_from_response(
                {"prompt_tokens": prompt, "completion_tokens": message_tokens(msg)}
            )
            overhead_ms.append((overhead + time.perf_counter() - started) * 1_000)
        context = [*context, msg]
        full += message_tokens(msg)
    return {
        "messages": len(messages),
        "tokens": full,
        "compactions": engine.compression_count,
        "billed": billed,
        "baseline": baseline,
        "overhead_median_ms": statistics.median(overhead_ms) if overhead_ms else 0.0,
        "overhead_max_ms": max(overhead_ms) if overhead_ms else 0.0,
        "retention": statistics.mean(retention) if retention else None,
    }


def _row(name: str, r: dict[str, Any]) -> str:
    saved = 1 - r["billed"] / r["baseline"] if r["baseline"] else 0.0
    retention = "–" if r["retention"] is None else f"{r['retention']:.0%}"
    return (
        f"| {name} | {r['messages']} | {r['tokens']:,} | {r['compactions']} | {r['billed']:,} | "
        f"{r['baseline']:,} | {saved:.0%} | {r['overhead_median_ms']:.2f} | "
        f"{r['overhead_max_ms']:.1f} | {retention} |"
    )


def time_big_session(data: Path, context_length: int = 200_000, repeats: int = 5) -> str:
    runs = load_tau_runs(data)
    session: list[Message] = []
    index = 0
    while len(session) < PERF_MESSAGES:
        run = runs[index % len(runs)]
        session += run if not session else [m for m in run if m.get("role") != "system"]
        index += 1
    session = session[:PERF_MESSAGES]
    while session[-1].get("role") == "assistant" and session[-1].get("tool_calls"):
        session.pop()  # never end on a call whose results were cut off
    tokens = count_message_tokens(session)  # warm: a host has counted these already
    timings: list[float] = []
    report = None
    for _ in range(repeats):
        engine = ContextCompressor(context_length=context_length)
        started = time.perf_counter()
        engine.compress(session, current_tokens=tokens)
        timings.append(time.perf_counter() - started)
        report = engine.last_compression
    assert report is not None
    return (
        f"compress() on a {len(session):,}-message session ({tokens:,} tokens, chained "
        f"tau-bench runs, context {context_length:,}, warm token cache): median "
        f"{statistics.median(timings) * 1_000:.1f} ms, min {min(timings) * 1_000:.1f} ms "
        f"over {repeats} runs; {report.reason}, {report.tokens_before:,} → "
        f"{report.tokens_after:,} tokens, {report.messages_after} messages, "
        f"{report.summarizer_calls} summariser call(s)."
    )


def run(data_dir: Path = DEFAULT_DATA, context_length: int = DEFAULT_CONTEXT_LENGTH) -> str:
    """Replay every transcript found under ``data_dir``; return the report as markdown."""
    data = Path(data_dir)
    lines = [
        f"### Compressor replay (context {context_length:,} tokens, offline summariser)",
        "",
        "| transcript | msgs | tokens | compactions | billed | baseline | saved | "
        "overhead/turn ms (median) | max ms | anchors kept |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    totals: list[dict[str, Any]] = []
    sources = []
    if (data / "mini-swe-agent" / "trajs").is_dir():
        sources.append(load_mini_swe_agent(data))
    if (data / "tau-bench").is_dir():
        sources.append(load_tau_sessions(data))
    for source in sources:
        for name, messages in source:
            result = replay(messages, context_length)
            totals.append(result)
            lines.append(_row(name, result))
    if totals:
        kept = [t["retention"] for t in totals if t["retention"] is not None]
        overall = {
            "messages": sum(t["messages"] for t in totals),
            "tokens": sum(t["tokens"] for t in totals),
            "compactions": sum(t["compactions"] for t in totals),
            "billed": sum(t["billed"] for t in totals),
            "baseline": sum(t["baseline"] for t in totals),
            "overhead_median_ms": statistics.median(t["overhead_median_ms"] for t in totals),
            "overhead_max_ms": max(t["overhead_max_ms"] for t in totals),
            "retention": statistics.mean(kept) if kept else None,
        }
        lines.append(_row("**all**", overall))
    else:
        lines.append("(no transcripts found under " + str(data) + ")")
    if (data / "tau-bench").is_dir():
        lines += ["", time_big_session(data)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--context-length", type=int, default=DEFAULT_CONTEXT_LENGTH)
    args = parser.parse_args(argv)
    print(run(args.data, args.context_length))
    return 0


if __name__ == "__main__":
    sys.exit(main())
