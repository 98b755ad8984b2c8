"""Archive benchmark, SQLite and PostgreSQL side by side: ingest, ``lcm_grep`` latency, concurrency.

Both stores get the same synthetic messages (the generator of
``benchmarks/store.py``: real tau-bench and LoCoMo texts, cycled and
perturbed) and the same queries (2-4 words of a random stored message of a
random conversation, ``store.search`` text mode, scope "all", limit 20).

* Growth: each archive grows to every size in ``sizes`` (conversations of
  ``per_conversation`` messages, one ``append_messages`` call each); at each
  size we report the ingest rate of the step and the grep p50/p95.
* Concurrent writers: 1, 4 and 8 processes at once, each appending turns of
  10 messages to conversations of its own (as agents on a gateway do), into
  a fresh archive; throughput is all messages over the wall time from the
  common start to the last writer's end. SQLite serialises writers on its
  file lock; PostgreSQL takes them in parallel up to its row locks.

PostgreSQL is the server at ``CONTEXTENGINE_BENCH_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), in a throwaway schema dropped
at the end. Run: ``PYTHONPATH=src python benchmarks/store_postgres.py --sizes 100000,1000000``.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from contextengine.store import SQLiteStore, Store

__all__ = ["run"]

PG_URL = os.environ.get("CONTEXTENGINE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
TURN = 10
WRITER_COUNTS = (1, 4, 8)


def _store_bench() -> ModuleType:
    """``benchmarks/store.py``, imported by path (this folder is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "contextengine_bench_store", Path(__file__).with_name("store.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generator(seed: int) -> Iterator[dict[str, Any]]:
    bench = _store_bench()
    messages: Iterator[dict[str, Any]] = bench.messages(bench.corpus(), random.Random(seed))
    return messages


def _open(kind: str, where: str, schema: str) -> Store:
    if kind == "sqlite":
        return SQLiteStore(where, token_counter=lambda m: 1)
    from contextengine.store.postgres import PostgresStore

    return PostgresStore(where, schema=schema, token_counter=lambda m: 1)


def _drop(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _grow(
    store: Store, sizes: list[int], per_conversation: int, queries: int, seed: int
) -> dict[int, tuple[float, float, float]]:
    """Size -> (ingest msg/s of the step, grep p50 ms, grep p95 ms)."""
    bench = _store_bench()
    rng = random.Random(seed)
    source = _generator(seed)
    conversations: list[str] = []
    stored = 0
    out: dict[int, tuple[float, float, float]] = {}
    for size in sorted(sizes):
        started = time.perf_counter()
        added = bench.ingest(store, source, conversations, stored, size, per_conversation)
        stored += added
        rate = added / (time.perf_counter() - started)
        p50, p95 = bench.grep_latencies(store, conversations, rng, per_conversation, queries)
        out[size] = (rate, p50, p95)
        print(f"  {type(store).__name__} {size:,}: {out[size]}", file=sys.stderr, flush=True)
    return out


def _writer(
    kind: str, where: str, schema: str, worker: int, messages: int, seed: int, barrier: Any
) -> tuple[float, float]:
    """One writer process: append ``messages`` in turns of ``TURN``; return its (start, end)."""
    source = _generator(seed + worker)
    batches = [[next(source) for _ in range(TURN)] for _ in range(messages // TURN)]
    store = _open(kind, where, schema)
    try:
        cid = store.open_conversation(f"writer-{worker}")
        barrier.wait()
        start = time.time()
        seq = 0
        for batch in batches:
            store.append_messages(cid, batch, token_counts=[1] * len(batch), start_seq=seq)
            seq += len(batch)
        return start, time.time()
    finally:
        store.close()


def _concurrent(kind: str, where: str, schema: str, writers: int, total: int, seed: int) -> float:
    """Messages per second of ``writers`` processes appending ``total`` messages in all."""
    from concurrent.futures import ProcessPoolExecutor

    _open(kind, where, schema).close()  # create and migrate before the clock starts
    # Spawned children find _writer by module name, however this file was imported.
    if str(Path(__file__).parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent))
    writer = importlib.import_module("store_postgres")._writer
    spawn = multiprocessing.get_context("spawn")
    per_writer = total // writers // TURN * TURN
    with spawn.Manager() as manager, ProcessPoolExecutor(writers, mp_context=spawn) as pool:
        barrier = manager.Barrier(writers)
        futures = [
            pool.submit(writer, kind, where, schema, w, per_writer, seed, barrier)
            for w in range(writers)
        ]
        spans = [f.result() for f in futures]
    elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
    return per_writer * writers / elapsed


def _both(tmp: Path, tag: str, action: Callable[[str, str, str], Any]) -> tuple[Any, Any]:
    """Run ``action(kind, where, schema)`` on a fresh SQLite file and a fresh PostgreSQL schema."""
    sqlite_result = action("sqlite", str(tmp / f"{tag}.db"), "")
    schema = f"ce_bench_{os.getpid()}_{tag}"
    try:
        pg_result = action("postgres", PG_URL, schema)
    finally:
        _drop(schema)
    return sqlite_result, pg_result


def run(
    sizes: list[int] | None = None,
    *,
    quick: bool = False,
    per_conversation: int = 1_000,
    queries: int = 200,
    concurrent_total: int = 16_000,
    seed: int = 7,
) -> str:
    """Measure both stores; return two markdown tables (growth, concurrent writers)."""
    sizes = sizes or ([10_000] if quick else [100_000, 1_000_000])
    if quick:
        queries, concurrent_total = min(queries, 50), min(concurrent_total, 4_000)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)

        def grow(kind: str, where: str, schema: str) -> dict[int, tuple[float, float, float]]:
            store = _open(kind, where, schema)
            try:
                return _grow(store, sizes, per_conversation, queries, seed)
            finally:
                store.close()

        sqlite_growth, pg_growth = _both(tmp, "growth", grow)
        concurrency = {}
        for writers in WRITER_COUNTS:
            concurrency[writers] = _both(
                tmp,
                f"writers{writers}",
                lambda kind, where, schema, n=writers: _concurrent(
                    kind, where, schema, n, concurrent_total, seed
                ),
            )
            print(f"  {writers} writers: {concurrency[writers]}", file=sys.stderr, flush=True)

    growth = [
        "| stored messages | SQLite ingest msg/s | PostgreSQL ingest msg/s"
        " | SQLite grep p50 / p95 ms | PostgreSQL grep p50 / p95 ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for size in sorted(sizes):
        s, p = sqlite_growth[size], pg_growth[size]
        growth.append(
            f"| {size:,} | {s[0]:,.0f} | {p[0]:,.0f} | {s[1]:.1f} / {s[2]:.1f}"
            f" | {p[1]:.1f} / {p[2]:.1f} |"
        )
    writers_table = [
        "| concurrent writer processes | SQLite msg/s | PostgreSQL msg/s |",
        "|---:|---:|---:|",
    ]
    for writers, (s_rate, p_rate) in concurrency.items():
        writers_table.append(f"| {writers} | {s_rate:,.0f} | {p_rate:,.0f} |")
    note = (
        f"Concurrent writers: {concurrent_total:,} messages in all, in turns of {TURN}"
        " messages, each writer on its own conversation."
    )
    return "\n".join(growth) + "\n\n" + "\n".join(writers_table) + "\n\n" + note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated message counts")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--concurrent-total", type=int, default=16_000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(
        run(
            sizes,
            quick=args.quick,
            queries=args.queries,
            concurrent_total=args.concurrent_total,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
