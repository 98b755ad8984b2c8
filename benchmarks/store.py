"""Archive benchmark: ingest messages/s, ``lcm_grep`` p50/p95 latency and bytes per message.

The archive grows to each size in ``--sizes`` (one file, measured at every
step): conversations of ``--per-conversation`` messages, each ingested with
one ``append_messages`` call. The messages are synthetic but realistic: the
texts of the real tau-bench airline runs (user, assistant, tool results) and
LoCoMo dialog turns in ../shared/data, cycled and perturbed (a few words
swapped for words drawn from the whole corpus, plus numbers and ids) so the
vocabulary keeps growing as a real archive's does. Each grep is a 2-4 word
query taken from a random stored message of a random conversation, run with
``store.search`` (text mode, scope "all", limit 20).

Run: ``PYTHONPATH=src python benchmarks/store.py --sizes 10000,100000,1000000``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contextengine.store import SQLiteStore, Store

__all__ = ["corpus", "grep_latencies", "ingest", "messages", "run"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
_FALLBACK = [
    "Please run the test suite again and show me the failing assertion.",
    "The reservation ABC123 was booked on flight HAT170 from JFK to LAX.",
    "I updated the config file and restarted the service; the error persists.",
]


def corpus(data: Path = DATA) -> list[tuple[str, str]]:
    """(role, text) pairs from the real transcripts, or a tiny fallback when they are absent."""
    out: list[tuple[str, str]] = []
    tau = data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    if tau.exists():
        for run in json.loads(tau.read_text()):
            for msg in run["traj"]:
                content = msg.get("content")
                if isinstance(content, str) and content and msg.get("role") != "system":
                    out.append((msg["role"], content[:4000]))
    locomo = data / "LoCoMo" / "locomo10.json"
    if locomo.exists():
        for sample in json.loads(locomo.read_text()):
            conv = sample["conversation"]
            for key, turns in conv.items():
                if key.startswith("session_") and isinstance(turns, list):
                    for turn in turns:
                        out.append(("user", f"{turn['speaker']}: {turn['text']}"))
    return out or [("user", t) for t in _FALLBACK]


def messages(texts: list[tuple[str, str]], rng: random.Random) -> Iterator[dict[str, Any]]:
    """Endless synthetic messages: ``texts`` cycled at random, perturbed by words of the corpus."""
    vocabulary = [w for _, t in texts[:5000] for w in t.split()][:50_000]
    n = 0
    while True:
        role, text = texts[rng.randrange(len(texts))]
        words = text.split()
        for _ in range(max(1, len(words) // 12)):
            if words:
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
        words.append(f"ref{rng.randrange(10**6)}")
        n += 1
        yield {"role": "user" if role == "user" else "assistant", "content": " ".join(words)}


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def ingest(
    store: Store,
    source: Iterator[dict[str, Any]],
    conversations: list[str],
    stored: int,
    size: int,
    per_conversation: int,
) -> int:
    """Grow ``store`` from ``stored`` to ``size`` messages; return how many were added.

    Each new conversation (appended to ``conversations``) gets up to
    ``per_conversation`` messages of ``source`` in one ``append_messages`` call.
    """
    added = 0
    while stored + added < size:
        batch = [next(source) for _ in range(min(per_conversation, size - stored - added))]
        cid = store.open_conversation(f"bench-{len(conversations)}")
        conversations.append(cid)
        counts = [len(str(m["content"])) // 4 for m in batch]
        store.append_messages(cid, batch, token_counts=counts, start_seq=0)
        added += len(batch)
    return added


def grep_latencies(
    store: Store,
    conversations: list[str],
    rng: random.Random,
    per_conversation: int,
    queries: int,
) -> tuple[float, float]:
    """p50 and p95 ms of ``queries`` greps, each 2-4 words of a random stored message."""
    latencies = []
    for _ in range(queries):
        cid = rng.choice(conversations)
        msg = store.get_messages(cid, rng.randrange(per_conversation), None)[:1]
        words = [w for w in str(msg[0].message["content"]).split() if w.isalpha()]
        k = min(len(words), rng.randint(2, 4))
        query = " ".join(rng.sample(words, k)) if k else "flight"
        t0 = time.perf_counter()
        store.search(cid, query, limit=20)
        latencies.append((time.perf_counter() - t0) * 1000)
    latencies.sort()
    return statistics.median(latencies), latencies[int(0.95 * (len(latencies) - 1))]


def run(
    sizes: list[int],
    *,
    per_conversation: int = 1_000,
    queries: int = 200,
    path: Path | None = None,
    seed: int = 7,
) -> str:
    """Grow one archive to each size, measure at each step; return a markdown table."""
    rng = random.Random(seed)
    texts = corpus()
    source = messages(texts, rng)
    rows = [
        "| stored messages | ingest msg/s | lcm_grep p50 ms | lcm_grep p95 ms | bytes/message |",
        "|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        db_path = path or Path(tmp) / "bench.db"
        with SQLiteStore(db_path, token_counter=lambda m: 1) as store:
            conversations: list[str] = []
            stored = 0
            for size in sorted(sizes):
                started = time.perf_counter()
                added = ingest(store, source, conversations, stored, size, per_conversation)
                stored += added
                rate = added / (time.perf_counter() - started)
                p50, p95 = grep_latencies(store, conversations, rng, per_conversation, queries)
                store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # measure the file alone
                per_msg = _disk_bytes(db_path) / stored
                rows.append(
                    f"| {stored:,} | {rate:,.0f} | {p50:.1f} | {p95:.1f} | {per_msg:,.0f} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated message counts")
    parser.add_argument("--per-conversation", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(run(sizes, per_conversation=args.per_conversation, queries=args.queries))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
