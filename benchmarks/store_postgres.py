"""Archive benchmark (PostgreSQL): bulk and per-turn ingest, ``lcm_grep``, concurrent writers.

The measurements of ``benchmarks/store.py`` (same messages, same queries, same
checks; see its docstring) on a ``PostgresStore``:

* bulk ingest (``import_messages``: ``COPY`` in chunks, the rows' words
  computed in a second thread), with token counts given and counted;
* per-turn ingest through ``LosslessEngine.on_turn_complete`` and through
  ``append_messages(..., to_context=True)`` alone, at each archive size;
* ``lcm_grep`` on ONE conversation grown to each size (100,000 messages in the
  full run), warm (one pool) and cold (a new store, so a new connection, per
  query; the server's own caches stay warm);
* concurrent writers: 1, 4 and 8 processes at once, each appending turns of
  10 messages to a conversation of its own, SQLite and PostgreSQL side by
  side; throughput is all messages over the wall time from the common start
  to the last writer's end.

PostgreSQL is the server at ``CONTEXTENGINE_BENCH_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``), in a throwaway schema dropped
at the end. Run: ``PYTHONPATH=src python benchmarks/store_postgres.py [--quick] [--size 100000]``.
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
from collections.abc import Iterator, Sequence
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
    name = "contextengine_bench_store"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("store.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


def _generator(seed: int) -> Iterator[dict[str, Any]]:
    bench = _store_bench()
    source: Iterator[dict[str, Any]] = bench.messages(bench.corpus(), random.Random(seed))
    return source


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


# ------------------------------------------------------------------------------ concurrent writers


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
    import importlib

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


# ------------------------------------------------------------------------------ the run


def run(
    size: int = 100_000,
    *,
    quick: bool = False,
    turn_sizes: Sequence[int] = (10_000, 100_000),
    turns: int = 200,
    queries: int = 50,
    cold: int = 20,
    bulk: int = 100_000,
    concurrent_total: int = 16_000,
    budget_s: float = 3_600.0,
    seed: int = 7,
) -> str:
    """Measure the PostgreSQL store; return markdown tables."""
    from contextengine.store.postgres import PostgresStore

    bench = _store_bench()
    if quick:
        size, turn_sizes, turns, queries, cold, bulk = 10_000, (10_000,), 50, 10, 5, 10_000
        concurrent_total = 4_000
    started = time.monotonic()
    source = bench.messages(bench.corpus(), random.Random(seed))
    heldout = bench.heldout_queries()
    schema = f"ce_bench_{os.getpid()}"
    ingest: list[Any] = []
    turn_rows: list[str] = []
    search_rows: list[str] = []
    try:
        with PostgresStore(PG_URL, schema=schema) as store:
            bench.progress(f"PostgreSQL bulk ingest of {bulk:,} messages, twice")
            for counted in (False, True):
                cid = store.open_conversation(f"bulk-{counted}")
                batch = [next(source) for _ in range(bulk)]
                label = (
                    "bulk `import_messages` (COPY), exact counts given (as `archive migrate`)"
                    if not counted
                    else "bulk `import_messages` (COPY), counted exactly by the store"
                )
                ingest.append(
                    bench.bulk_ingest(store, cid, batch, counted=counted, start_seq=0, label=label)
                )
            big = store.open_conversation("one-large-conversation")
            stored = 0
            for step in sorted({*(s for s in turn_sizes if s <= size), size}):
                if time.monotonic() - started > budget_s:
                    bench.progress(f"budget of {budget_s:.0f} s spent: stopping at {stored:,}")
                    break
                bench.progress(f"growing one conversation to {step:,} messages")
                while stored < step:
                    n = min(50_000, step - stored)
                    growth = bench.bulk_ingest(
                        store,
                        big,
                        [next(source) for _ in range(n)],
                        counted=True,
                        start_seq=stored,
                        label=f"bulk into one conversation, to {stored + n:,}",
                    )
                    stored += growth.messages
                store.vacuum()  # fresh planner statistics, as autovacuum would give
                bench.progress(f"per-turn ingest at {stored:,}")
                figures = bench.per_turn(store, source, archive=stored, turns=turns, tag=str(step))
                turn_rows.append(figures.row())
                bench.progress(f"search at {stored:,}")
                qs = bench.query_set(store, big, stored, heldout, queries, seed + step)
                rows, warm, cold_ms = bench.search_table(
                    store,
                    big,
                    qs,
                    reopen=lambda: PostgresStore(PG_URL, schema=schema, min_size=1, max_size=1),
                    cold=cold,
                )
                search_rows.append(f"\n**{stored:,} messages in one conversation**\n")
                search_rows += [*bench.SEARCH_HEADER, *rows]
                search_rows.append(
                    f"| **all (warm)** | {len(warm)} | {bench.percentile(warm, 0.5):.1f} "
                    f"| **{bench.percentile(warm, 0.95):.1f}** | | |"
                )
                if cold_ms:
                    search_rows.append(
                        f"| all (cold: new connection) | {len(cold_ms)} "
                        f"| {bench.percentile(cold_ms, 0.5):.1f}"
                        f" | {bench.percentile(cold_ms, 0.95):.1f} | | |"
                    )
            bench.progress("10 MB row")
            big_rows = bench.big_row_table(store, source)
    finally:
        _drop(schema)
    concurrency = {}
    with tempfile.TemporaryDirectory() as tmp:
        for writers in WRITER_COUNTS:
            sqlite_rate = _concurrent(
                "sqlite", str(Path(tmp) / f"w{writers}.db"), "", writers, concurrent_total, seed
            )
            pg_schema = f"ce_bench_{os.getpid()}_w{writers}"
            try:
                pg_rate = _concurrent(
                    "postgres", PG_URL, pg_schema, writers, concurrent_total, seed
                )
            finally:
                _drop(pg_schema)
            concurrency[writers] = (sqlite_rate, pg_rate)
            bench.progress(f"  {writers} writers: {concurrency[writers]}")
    writers_table = [
        "| concurrent writer processes | SQLite msg/s | PostgreSQL msg/s |",
        "|---:|---:|---:|",
        *(f"| {w} | {s:,.0f} | {p:,.0f} |" for w, (s, p) in concurrency.items()),
    ]
    return "\n".join(
        [
            "Ingest into PostgreSQL (local server, same machine). Bulk: `import_messages`, "
            "`COPY` in chunks with the rows' words (`tsv`) computed by the store in a second "
            "thread; token counts exact either way. CPU time is the client process's.",
            "",
            *bench.INGEST_HEADER,
            *(i.row() for i in ingest),
            "",
            "Per turn (2 messages), as in the SQLite table: the engine's `on_turn_complete` "
            "(two transactions) and `append_messages(..., to_context=True)` alone (one). "
            "Waiting = wall − client CPU: round trips, the server's work and its commit.",
            "",
            *bench.TURN_HEADER,
            *turn_rows,
            "",
            "`lcm_grep` on ONE conversation, the queries and checks of the SQLite table. Cold: "
            "a new `PostgresStore` (a new connection) per query; the server's caches stay warm.",
            *search_rows,
            "",
            *big_rows,
            "",
            f"Concurrent writers: {concurrent_total:,} messages in all, in turns of {TURN}"
            " messages (`append_messages`), each writer on its own conversation.",
            "",
            *writers_table,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000, help="the large conversation")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--budget", type=float, default=3_600.0)
    args = parser.parse_args(argv)
    print(run(args.size, quick=args.quick, queries=args.queries, budget_s=args.budget))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
