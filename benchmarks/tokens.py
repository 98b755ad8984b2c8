"""Benchmark token counting on the real transcripts in ../shared/data.

Prints two markdown tables:

1. throughput of ``count_tokens`` (o200k_base, cold cache) per corpus;
2. the cost of one agent turn: append one message to a conversation of N messages and
   recount all of it, warm (the previous turns were counted) versus cold (empty cache),
   next to ``estimate_tokens_rough`` on the same list.

Run it as ``.venv/bin/python benchmarks/tokens.py [--data PATH]``; ``run()`` returns the
same markdown for ``benchmarks/run_all.py``.
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

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))

from contextengine import tokens  # noqa: E402  (needs the sys.path entry above)

DEFAULT_DATA = REPO.parent / "shared" / "data"
TURN_SIZES = (100, 1_000, 10_000)
TURNS_MEASURED = 20


def _spotter(data: Path) -> Iterator[str]:
    for path in sorted((data / "spotter" / "transcripts").glob("*.jsonl")):
        yield path.read_text(encoding="utf-8")


def _message_texts(messages: list[dict[str, Any]]) -> Iterator[str]:
    for msg in messages:
        if isinstance(msg.get("content"), str):
            yield msg["content"]
        for call in msg.get("tool_calls") or ():
            yield call["function"]["arguments"]


def _mini_swe_agent(data: Path) -> Iterator[str]:
    for path in sorted((data / "mini-swe-agent" / "trajs").glob("*.traj.json")):
        yield from _message_texts(json.loads(path.read_text(encoding="utf-8"))["messages"])


def _tau_bench_runs(data: Path) -> list[dict[str, Any]]:
    path = data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    runs: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return runs


def _tau_bench(data: Path) -> Iterator[str]:
    for run in _tau_bench_runs(data):
        yield from _message_texts(run["traj"])


def _locomo_turns(data: Path) -> Iterator[dict[str, Any]]:
    samples = json.loads((data / "LoCoMo" / "locomo10.json").read_text(encoding="utf-8"))
    for sample in samples:
        conversation = sample["conversation"]
        sessions = sorted(
            (k for k in conversation if k.startswith("session_") and k[8:].isdigit()),
            key=lambda k: int(k[8:]),
        )
        for key in sessions:
            yield from conversation[key]


def _locomo(data: Path) -> Iterator[str]:
    for turn in _locomo_turns(data):
        yield turn["text"]


CORPORA = {
    "spotter (Claude Code JSONL, whole files)": _spotter,
    "mini-swe-agent (message contents)": _mini_swe_agent,
    "tau-bench (contents + tool arguments)": _tau_bench,
    "LoCoMo (dialogue turns)": _locomo,
}


def _throughput(data: Path) -> str:
    rows = [
        "| corpus | texts | chars | tokens | seconds | tokens/s | MB/s | repeated texts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    tokens.get_encoding()  # load the vocabulary outside the timed region
    for label, corpus in CORPORA.items():
        texts = list(corpus(data))
        tokens.cache_clear()
        start = time.perf_counter()
        total = sum(tokens.count_tokens(text) for text in texts)
        seconds = time.perf_counter() - start
        chars = sum(len(text) for text in texts)
        rows.append(
            f"| {label} | {len(texts):,} | {chars:,} | {total:,} | {seconds:.2f} "
            f"| {total / seconds:,.0f} | {chars / seconds / 1e6:.2f} "
            f"| {tokens.cache_info().text_hits:,} |"
        )
    return "\n".join(rows)


def _message_pool(data: Path) -> list[dict[str, Any]]:
    pool: list[dict[str, Any]] = []
    for run in _tau_bench_runs(data):
        pool.extend(run["traj"])
    for turn in _locomo_turns(data):
        pool.append({"role": "user", "name": turn["speaker"], "content": turn["text"]})
    return pool


def _conversation(pool: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    # Suffix every content with its position so that no two messages share a cache entry.
    out = []
    for i in range(n):
        msg = dict(pool[i % len(pool)])
        msg["content"] = f"{msg.get('content') or ''} [{i}]"
        out.append(msg)
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _per_turn(data: Path) -> str:
    rows = [
        "| messages | tokens | cold recount (ms) | warm recount after append (ms) "
        "| encoder calls per warm turn | estimate_tokens_rough (ms) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    pool = _message_pool(data)
    for n in TURN_SIZES:
        conversation = _conversation(pool, n)
        tokens.cache_clear()
        start = time.perf_counter()
        total = tokens.count_message_tokens(conversation)
        cold = time.perf_counter() - start

        # Steady state: the first n - TURNS_MEASURED messages were counted on earlier turns.
        tokens.cache_clear()
        history = conversation[: n - TURNS_MEASURED]
        tokens.count_message_tokens(history)
        calls_before = tokens.cache_info().encoder_calls
        warm: list[float] = []
        rough: list[float] = []
        for msg in conversation[n - TURNS_MEASURED :]:
            history.append(msg)
            start = time.perf_counter()
            tokens.count_message_tokens(history)
            warm.append(time.perf_counter() - start)
            start = time.perf_counter()
            tokens.estimate_tokens_rough(history)
            rough.append(time.perf_counter() - start)
        calls = (tokens.cache_info().encoder_calls - calls_before) / TURNS_MEASURED
        rows.append(
            f"| {n:,} | {total:,} | {_ms(cold)} | {_ms(statistics.median(warm))} "
            f"| {calls:.1f} | {_ms(statistics.median(rough))} |"
        )
    return "\n".join(rows)


def run(data: Path | None = None) -> str:
    """Run both benchmarks on *data* (default ../shared/data) and return markdown."""
    data = data or DEFAULT_DATA
    if not data.is_dir():
        raise FileNotFoundError(f"{data} is absent: the token benchmark needs ../shared/data")
    return "\n".join(
        [
            "### count_tokens throughput (o200k_base, cold cache)",
            "",
            "Repeated texts (e.g. tau-bench's system prompt, once per run) are cache hits.",
            "",
            _throughput(data),
            "",
            f"### Per-turn recount cost (median of {TURNS_MEASURED} turns)",
            "",
            _per_turn(data),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder")
    args = parser.parse_args(argv)
    try:
        print(run(args.data))
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
