"""Archive benchmark (SQLite): ingest through the real paths, ``lcm_grep`` on one conversation.

What it measures, on a file store (WAL, ``synchronous=FULL``, as shipped):

* **Bulk ingest** (:meth:`Store.import_messages`, the path of importers,
  replays and ``archive migrate``) twice: with the token counts given (as
  ``archive migrate`` copies them) and counted exactly by the store.
* **Per-turn ingest** through the engine's real path: a ``LosslessEngine``
  fed turn by turn (``on_turn_complete`` with the history grown by a user
  message and a reply, exact token counts), at several archive sizes; beside
  it the store alone (``append_messages(..., to_context=True)``, one
  transaction). Wall and CPU time per turn: the difference is mostly the
  commit's fsync.
* **Search** on ONE conversation grown to each size (1,000,000 messages in the
  full run) with the bulk path: ``store.search`` (text mode, scope "all",
  limit 20), the ``lcm_grep`` engine, with four kinds of queries and their
  result counts checked: *needle* (a message's unique marker: that message
  must be found, and nothing else but the next message, whose ``ctx`` holds
  the start of it), *words* (2-4 words of a stored message: some
  result expected), *miss* (made-up words: no result allowed) and *held out*
  (LoCoMo questions and tau-bench task instructions, text never stored).
  Warm: one connection, repeated; cold: a new connection per query (SQLite's
  page cache empty; the operating system's file cache is not dropped).
* **A 10 MB tool output** in a conversation: a frequent word, a word only near
  its end, and a regex for that word.

The messages are synthetic but real: texts of the tau-bench airline runs
(user, assistant, tool results), LoCoMo dialogue turns and mini-swe-agent
steps (thoughts, commands, command outputs) in ../shared/data, cycled and
perturbed (a few words swapped for words drawn from the whole corpus), each
with a unique marker ``ref<n>``. Without the data a tiny built-in corpus is
used and the figures mean little.

Run: ``PYTHONPATH=src python benchmarks/store.py [--quick] [--size 1000000]``
(progress goes to stderr; a full run takes a few minutes to tens of minutes
and stops growing the archive when ``--budget`` seconds are spent).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine.store import SQLiteStore, Store

__all__ = [
    "QuerySet",
    "bulk_ingest",
    "corpus",
    "heldout_queries",
    "messages",
    "per_turn",
    "percentile",
    "progress",
    "query_set",
    "run",
    "search_table",
]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
_FALLBACK = [
    ("user", "Please run the test suite again and show me the failing assertion."),
    ("assistant", "The reservation ABC123 was booked on flight HAT170 from JFK to LAX."),
    ("tool", "I updated the config file and restarted the service; the error persists."),
]
_MINI_SWE_CHARS = 20_000


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def corpus(data: Path = DATA) -> list[tuple[str, str]]:
    """(role, text) pairs of the real transcripts, or a tiny fallback when they are absent."""
    out: list[tuple[str, str]] = []
    tau = data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    if tau.exists():
        for run_ in json.loads(tau.read_text()):
            for msg in run_["traj"]:
                content = msg.get("content")
                if isinstance(content, str) and content and msg.get("role") != "system":
                    out.append((msg["role"], content[:4000]))
    locomo = data / "LoCoMo" / "locomo10.json"
    if locomo.exists():
        for sample in json.loads(locomo.read_text()):
            for key, turns in sample["conversation"].items():
                if key.startswith("session_") and isinstance(turns, list):
                    out += [("user", f"{t['speaker']}: {t['text']}") for t in turns]
    for path in sorted((data / "mini-swe-agent" / "trajs").glob("*.traj.json")):
        for msg in json.loads(path.read_text()).get("messages", [])[2:]:
            content = msg.get("content")
            if isinstance(content, str) and content:
                role = "assistant" if msg.get("role") == "assistant" else "tool"
                out.append((role, content[:_MINI_SWE_CHARS]))
    return out or list(_FALLBACK)


def heldout_queries(data: Path = DATA) -> list[str]:
    """Questions never stored as text: LoCoMo's questions and tau-bench's task instructions."""
    out: list[str] = []
    locomo = data / "LoCoMo" / "locomo10.json"
    if locomo.exists():
        out += [qa["question"] for s in json.loads(locomo.read_text()) for qa in s["qa"]]
    tau = data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    if tau.exists():
        for run_ in json.loads(tau.read_text()):
            instruction = run_["info"]["task"]["instruction"]
            out += [s.strip() for s in instruction.split(".")[1:3] if len(s.split()) > 3]
    return out or ["which flight did the user book", "why did the test fail"]


def messages(texts: Sequence[tuple[str, str]], rng: random.Random) -> Iterator[dict[str, Any]]:
    """Endless messages: real texts cycled at random, perturbed, each with a unique ``ref<n>``."""
    vocabulary = [w for _, t in texts[:5000] for w in t.split() if w.isalpha()][:50_000]
    n = 0
    while True:
        role, text = texts[rng.randrange(len(texts))]
        words = text.split()
        for _ in range(max(1, min(len(words), 400) // 12)):
            if words:
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
        words.append(f"ref{n:07d}")
        n += 1
        content = " ".join(words)
        if role == "tool":
            yield {"role": "tool", "tool_call_id": f"call_{n}", "content": content}
        else:
            yield {"role": "user" if role == "user" else "assistant", "content": content}


def _exact_tokens() -> Callable[[dict[str, Any]], int]:
    from contextengine.tokens import message_tokens

    return message_tokens


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else 0.0


# ------------------------------------------------------------------------------------ ingest


@dataclass
class Ingest:
    """One bulk import: messages, characters, wall seconds, CPU seconds (all threads, writer)."""

    label: str
    messages: int
    chars: int
    wall_s: float
    cpu_s: float
    writer_s: float

    def row(self) -> str:
        return (
            f"| {self.label} | {self.messages:,} | {self.chars / max(1, self.messages):,.0f} "
            f"| {self.wall_s:.1f} | **{self.messages / self.wall_s:,.0f}** | {self.cpu_s:.1f} "
            f"| {self.writer_s / max(1, self.messages) * 1e6:.1f} |"
        )


def bulk_ingest(
    store: Store,
    conversation_id: str,
    batch: list[dict[str, Any]],
    *,
    counted: bool,
    start_seq: int,
    label: str,
) -> Ingest:
    """``import_messages`` of ``batch``; token counts exact, given by the caller or not."""
    counts = None
    if not counted:
        count = _exact_tokens()
        counts = [count(m) for m in batch]  # counted before the clock: "as migrate has them"
    chars = sum(len(str(m.get("content") or "")) for m in batch)
    wall, cpu, writer = time.perf_counter(), time.process_time(), time.thread_time()
    stored = store.import_messages(conversation_id, batch, token_counts=counts, start_seq=start_seq)
    result = Ingest(
        label,
        stored,
        chars,
        time.perf_counter() - wall,
        time.process_time() - cpu,
        time.thread_time() - writer,
    )
    progress(f"  {result.row()}")
    return result


INGEST_HEADER = [
    "| path | messages | chars/msg | wall s | msg/s (wall) | CPU s (all threads)"
    " | writer thread CPU µs/msg |",
    "|---|---:|---:|---:|---:|---:|---:|",
]


@dataclass
class TurnFigures:
    """Per-turn latencies at one archive size, in milliseconds."""

    archive: int
    engine_wall: list[float] = field(default_factory=list)
    engine_cpu: list[float] = field(default_factory=list)
    store_wall: list[float] = field(default_factory=list)
    store_cpu: list[float] = field(default_factory=list)

    def row(self) -> str:
        wait = [w - c for w, c in zip(self.engine_wall, self.engine_cpu, strict=True)]
        return (
            f"| {self.archive:,} | {len(self.engine_wall)} "
            f"| {percentile(self.engine_wall, 0.5):.2f} / {percentile(self.engine_wall, 0.95):.2f} "
            f"| {percentile(self.engine_cpu, 0.5):.2f} | {percentile(wait, 0.5):.2f} "
            f"| {percentile(self.store_wall, 0.5):.2f} / {percentile(self.store_wall, 0.95):.2f} "
            f"| {percentile(self.store_cpu, 0.5):.2f} |"
        )


TURN_HEADER = [
    "| archive messages | turns | engine turn p50 / p95 ms (wall) | engine CPU p50 ms"
    " | waiting p50 ms (commit, fsync) | store append p50 / p95 ms (wall) | store CPU p50 ms |",
    "|---:|---:|---:|---:|---:|---:|---:|",
]


def per_turn(
    store: Store, source: Iterator[dict[str, Any]], *, archive: int, turns: int, tag: str
) -> TurnFigures:
    """Turns of 2 messages through ``LosslessEngine.on_turn_complete``, then the store alone."""
    from contextengine.engines.lossless import LosslessEngine

    figures = TurnFigures(archive=archive)
    engine = LosslessEngine(context_length=1_000_000, store=store)
    try:
        engine.on_session_start(f"turns-engine-{tag}")
        history: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
        for turn in range(turns + 1):
            history += [
                {"role": "user", "content": next(source)["content"]},
                {"role": "assistant", "content": next(source)["content"]},
            ]
            wall, cpu = time.perf_counter(), time.thread_time()
            engine.on_turn_complete(history)
            if turn:  # the first turn also stores the system prompt
                figures.engine_wall.append((time.perf_counter() - wall) * 1000)
                figures.engine_cpu.append((time.thread_time() - cpu) * 1000)
    finally:
        engine.close()
    count = _exact_tokens()
    cid = store.open_conversation(f"turns-store-{tag}")
    seq = 0
    for _ in range(turns):
        pair = [
            {"role": "user", "content": next(source)["content"]},
            {"role": "assistant", "content": next(source)["content"]},
        ]
        wall, cpu = time.perf_counter(), time.thread_time()
        store.append_messages(
            cid, pair, token_counts=[count(m) for m in pair], start_seq=seq, to_context=True
        )
        figures.store_wall.append((time.perf_counter() - wall) * 1000)
        figures.store_cpu.append((time.thread_time() - cpu) * 1000)
        seq += 2
    progress(f"  {figures.row()}")
    return figures


# ------------------------------------------------------------------------------------ search


@dataclass
class QuerySet:
    """Queries by kind, with what each must return: a target message id, or a count rule."""

    #: (query, the message holding it, the ids allowed in the results)
    needle: list[tuple[str, str, frozenset[str]]] = field(default_factory=list)
    words: list[str] = field(default_factory=list)  # must find something
    miss: list[str] = field(default_factory=list)  # must find nothing
    heldout: list[str] = field(default_factory=list)  # reported only


def query_set(
    store: Store, conversation_id: str, size: int, heldout: Sequence[str], n: int, seed: int
) -> QuerySet:
    """``n`` queries of each kind for a conversation of ``size`` messages."""
    rng = random.Random(seed)
    out = QuerySet()
    for _ in range(n):
        seq = rng.randrange(size)
        (msg,) = store.get_messages(conversation_id, seq, seq + 1)
        words = str(msg.message.get("content", "")).split()
        marker = next(w for w in reversed(words) if w.startswith("ref"))
        plain = [w for w in words if w.isalpha() and len(w) > 2]
        after = store.get_messages(conversation_id, seq + 1, seq + 2)
        out.needle.append((marker, msg.id, frozenset([msg.id, *(m.id for m in after)])))
        k = min(len(plain), rng.randint(2, 4))
        out.words.append(" ".join(rng.sample(plain, k)) if k else "flight")
        out.miss.append(
            " ".join(
                "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(9)) + "q"
                for _ in range(2)
            )
        )
    out.heldout = [heldout[rng.randrange(len(heldout))] for _ in range(n)]
    return out


@dataclass
class KindFigures:
    latencies: list[float] = field(default_factory=list)
    results: list[int] = field(default_factory=list)
    passed: int = 0
    checked: int = 0


def _timed_search(store: Store, cid: str, query: str) -> tuple[float, list[Any]]:
    start = time.perf_counter()
    page = store.search(cid, query, limit=20)
    return (time.perf_counter() - start) * 1000, page.results


def search_table(
    store: Store,
    conversation_id: str,
    queries: QuerySet,
    *,
    reopen: Callable[[], Store] | None,
    cold: int,
) -> tuple[list[str], list[float], list[float]]:
    """Rows of the search table (one per query kind) and all warm / cold latencies."""
    kinds: dict[str, KindFigures] = {k: KindFigures() for k in ("needle", "words", "miss")}
    kinds["held out"] = KindFigures()
    for query, target, allowed in queries.needle:
        ms, results = _timed_search(store, conversation_id, query)
        figures = kinds["needle"]
        figures.latencies.append(ms)
        figures.results.append(len(results))
        figures.checked += 1
        ids = {h.id for h in results}
        figures.passed += target in ids and ids <= allowed
    for kind, texts, rule in (
        ("words", queries.words, lambda n: n > 0),
        ("miss", queries.miss, lambda n: n == 0),
        ("held out", queries.heldout, None),
    ):
        figures = kinds[kind]
        for query in texts:
            ms, results = _timed_search(store, conversation_id, query)
            figures.latencies.append(ms)
            figures.results.append(len(results))
            if rule is not None:
                figures.checked += 1
                figures.passed += bool(rule(len(results)))
    cold_ms: list[float] = []
    if reopen is not None:
        mixed = [q for q, *_ in queries.needle] + queries.words + queries.miss + queries.heldout
        for query in random.Random(1).sample(mixed, min(cold, len(mixed))):
            fresh = reopen()
            try:
                cold_ms.append(_timed_search(fresh, conversation_id, query)[0])
            finally:
                fresh.close()
    rows = []
    for kind, f in kinds.items():
        check = f"{f.passed}/{f.checked}" if f.checked else "—"
        rows.append(
            f"| {kind} | {len(f.latencies)} | {percentile(f.latencies, 0.5):.1f} "
            f"| {percentile(f.latencies, 0.95):.1f} | {statistics.mean(f.results or [0]):.1f} "
            f"| {check} |"
        )
    warm = [ms for f in kinds.values() for ms in f.latencies]
    return rows, warm, cold_ms


SEARCH_HEADER = [
    "| query kind | queries | p50 ms | p95 ms | mean results | checks passed |",
    "|---|---:|---:|---:|---:|---:|",
]


def big_row_table(store: Store, source: Iterator[dict[str, Any]], size_mb: int = 10) -> list[str]:
    """Search a conversation that holds one ``size_mb`` MB tool output."""
    cid = store.open_conversation("big-row")
    filler: list[str] = []
    while sum(len(t) for t in filler) < size_mb * 1_000_000:
        filler.append(str(next(source)["content"]))
    big = "\n".join(filler) + "\nthe deployment finally wrote quokkatail to app49.log\n"
    history = [next(source) for _ in range(50)]
    history.append({"role": "tool", "tool_call_id": "call_big", "content": big})
    history += [next(source) for _ in range(50)]
    store.import_messages(cid, history, token_counts=[1] * len(history), start_seq=0)
    frequent = max(
        ("flight", "error", "file", "the"), key=lambda w: big.count(f" {w} ")
    )  # a word thousands of times in the row
    rows = [
        "| search in a conversation holding a 10 MB tool output | ms | results |",
        "|---|---:|---:|",
    ]
    for label, query, mode in (
        (f"frequent word ({frequent!r}, text)", frequent, "text"),
        ("word only near the end (text)", "quokkatail", "text"),
        ("file name near the end (text)", "app49.log", "text"),
        ("word near the end (regex)", r"quokka\w+", "regex"),
    ):
        start = time.perf_counter()
        page = store.search(cid, query, mode=mode, limit=20)  # type: ignore[arg-type]
        ms = (time.perf_counter() - start) * 1000
        rows.append(f"| {label} | {ms:.1f} | {len(page.results)} |")
    return rows


# ------------------------------------------------------------------------------------ the run


def run(
    size: int = 1_000_000,
    *,
    quick: bool = False,
    turn_sizes: Sequence[int] = (10_000, 100_000, 1_000_000),
    turns: int = 200,
    queries: int = 50,
    cold: int = 20,
    bulk: int = 200_000,
    budget_s: float = 3_600.0,
    path: Path | None = None,
    seed: int = 7,
) -> str:
    """Run every measurement on a fresh file archive; return the markdown tables."""
    if quick:
        size, turn_sizes, turns, queries, cold, bulk = 20_000, (20_000,), 50, 10, 5, 20_000
    started = time.monotonic()
    rng = random.Random(seed)
    source = messages(corpus(), rng)
    heldout = heldout_queries()
    ingest: list[Ingest] = []
    turn_rows: list[str] = []
    search_rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        db_path = path or Path(tmp) / "bench.db"
        with SQLiteStore(db_path) as store:
            progress(f"bulk ingest of {bulk:,} messages, twice")
            for counted in (False, True):
                cid = store.open_conversation(f"bulk-{counted}")
                batch = [next(source) for _ in range(bulk)]
                label = (
                    "bulk `import_messages`, exact counts given (as `archive migrate`)"
                    if not counted
                    else "bulk `import_messages`, counted exactly by the store"
                )
                ingest.append(
                    bulk_ingest(store, cid, batch, counted=counted, start_seq=0, label=label)
                )
            big = store.open_conversation("one-large-conversation")
            stored = 0
            steps = sorted({*(s for s in turn_sizes if s <= size), size})
            for step in steps:
                if time.monotonic() - started > budget_s:
                    progress(f"budget of {budget_s:.0f} s spent: stopping at {stored:,}")
                    break
                progress(f"growing one conversation to {step:,} messages")
                while stored < step:
                    n = min(100_000, step - stored)
                    batch = [next(source) for _ in range(n)]
                    growth = bulk_ingest(
                        store,
                        big,
                        batch,
                        counted=True,
                        start_seq=stored,
                        label=f"bulk into one conversation, to {stored + n:,}",
                    )
                    stored += growth.messages
                    if stored == step:
                        ingest.append(growth)
                progress(f"per-turn ingest at {stored:,}")
                turn_rows.append(
                    per_turn(store, source, archive=stored, turns=turns, tag=str(step)).row()
                )
                progress(f"search at {stored:,}")
                qs = query_set(store, big, stored, heldout, queries, seed + step)
                rows, warm, cold_ms = search_table(
                    store, big, qs, reopen=lambda: SQLiteStore(db_path), cold=cold
                )
                search_rows.append(f"\n**{stored:,} messages in one conversation**\n")
                search_rows += [*SEARCH_HEADER, *rows]
                search_rows.append(
                    f"| **all (warm)** | {len(warm)} | {percentile(warm, 0.5):.1f} "
                    f"| **{percentile(warm, 0.95):.1f}** | | |"
                )
                if cold_ms:
                    search_rows.append(
                        f"| all (cold: new connection) | {len(cold_ms)} "
                        f"| {percentile(cold_ms, 0.5):.1f} | {percentile(cold_ms, 0.95):.1f} | | |"
                    )
                progress("\n".join(search_rows[-8:]))
            progress("10 MB row")
            big_rows = big_row_table(store, source)
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # measure the file alone
            per_message = _disk_bytes(Path(db_path)) / max(1, store.stats()["messages"])
    sections = [
        "Ingest (SQLite file, WAL, `synchronous=FULL`). Bulk: `import_messages`; token counts "
        "are exact either way (given: counted before the clock, as `archive migrate` copies "
        "them; counted: the store's tokenizer runs in the bulk path's second thread). CPU time "
        "adds up every thread of the process; the writer thread (SQLite's inserts and FTS5 "
        "indexing, one transaction per chunk) is the bound: 10^6 / its µs per message is the "
        "rate two free cores would reach.",
        "",
        *INGEST_HEADER,
        *(i.row() for i in ingest),
        "",
        "Per turn (2 messages). *Engine*: `LosslessEngine.on_turn_complete` on a new "
        "conversation of an archive that already holds the large conversation, exact token "
        "counts; it stores the messages and extends the active context (two transactions). "
        "*Store*: `append_messages(..., to_context=True)` alone, one transaction, counts "
        "computed before. Waiting = wall − CPU: mostly the commit's fsync.",
        "",
        *TURN_HEADER,
        *turn_rows,
        "",
        "`lcm_grep` (`store.search`, text mode, scope all, limit 20) on ONE conversation, grown "
        "with the bulk path. Checks: a needle (a message's unique marker) must return that "
        "message and nothing else but the next one (whose context holds its start); 2-4 words "
        "of a stored message must find something; made-up words must find nothing; held-out "
        "questions (LoCoMo, tau-bench instructions) are only counted. Cold: a new store "
        "(connection) per query; the OS file cache stays warm.",
        *search_rows,
        "",
        *big_rows,
        "",
        f"Archive on disk: {per_message:,.0f} bytes per message (WAL checkpointed).",
    ]
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="the large conversation")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, few queries")
    parser.add_argument("--queries", type=int, default=50, help="queries of each kind")
    parser.add_argument("--budget", type=float, default=3_600.0, help="seconds before stopping")
    args = parser.parse_args(argv)
    print(run(args.size, quick=args.quick, queries=args.queries, budget_s=args.budget))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
