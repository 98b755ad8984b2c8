"""Memory of a very long session: peak RSS as 100,000 messages go through the host, per engine.

Each engine runs in its own subprocess, started through a tiny launcher
process, so its peak RSS is its own: the parent's imports, the other engine
and the benchmark's bookkeeping never count (on Linux a child's ``ru_maxrss``
starts at its spawner's RSS). The child replays the chained mini-swe-agent session (``host.py``
builds it: cycled with a run number in every copy; synthetic when
../shared/data is absent) through ``ContextHost`` with the agent loop of
``host.py`` (after_tool_calls, prepare_request, record_response, end_turn),
at a 128,000-token context so compaction runs as in real use, lcm on a
SQLite file in a fresh temporary directory. The session is generated one
message at a time, so the child holds only what the agent loop, the host and
the engine keep (the base data, about 3 MB of text, is held once).

At 10k, 50k and 100k messages (a tenth, half and all of the session) the
child reads ``VmHWM`` (peak RSS so far) and ``VmRSS`` from /proc/self/status;
at the end ``ru_maxrss``. The baseline
is read after the imports, the vocabulary and the data are loaded, before
the first message. Memory grows with the session when the peak at 100k is
more than 10% above the peak at 50k; it levels off when it grew before 50k
only. The token caches' entry counts are reported beside: they are bounded
by design (50,000 entries or 64M characters each) and fill first. Each child
has a time budget; a checkpoint it does not reach is reported as not reached.

Run: ``PYTHONPATH=src python benchmarks/session_memory.py [--quick] [--messages 100000]
[--budget 600]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import contextengine
from contextengine.tokens import cache_info

__all__ = ["run"]

CONTEXT = 128_000
MESSAGES = 100_000
QUICK_MESSAGES = 10_000
#: RSS is read at these shares of the session: 10k, 50k and 100k of 100,000 messages.
CHECKPOINT_SHARES = (0.1, 0.5, 1.0)
#: Wall-clock seconds one engine's child may replay before it stops.
BUDGET_S = 600.0
QUICK_BUDGET_S = 90.0
#: Growth from the first checkpoint to the last above this share counts as growing.
GROWTH_SHARE = 0.10


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


def _status_kib() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process in KiB (empty off Linux).

    RssFile is mostly the SQLite archive read through its memory map: clean
    pages of the file the kernel drops under pressure, not memory the
    process holds. RssAnon is the heap: what the host and engine keep.
    """
    found: dict[str, int] = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                found[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return found


def _archive_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


# ---------------------------------------------------------------- the child


def child(
    engine_name: str, messages: int, checkpoints: Sequence[int], budget_s: float, data: Path
) -> dict[str, Any]:
    """Replay ``messages`` messages through the host; RSS at every checkpoint (runs in a child)."""
    host = _host()
    session = host.load_session_data(data)
    # Load the vocabulary now, so the baseline includes it (a host always has it).
    contextengine.count_tokens("warm up", host.MODEL)
    baseline = _status_kib()
    samples: dict[int, dict[str, Any]] = {}
    started = time.perf_counter()
    stopped_at: int | None = None
    with tempfile.TemporaryDirectory(prefix=f"ce-memory-{engine_name}-") as tmp:
        directory = Path(tmp)
        engine = host.make_engine(engine_name, context_length=CONTEXT, store=directory / "a.db")
        loop = host.AgentLoop(engine, context_length=CONTEXT)
        wanted = sorted(set(checkpoints))
        stream = session.messages()
        try:
            while loop.fed < messages:
                loop.feed(next(stream), timed=False)
                if wanted and loop.fed == wanted[0]:
                    wanted.pop(0)
                    caches = cache_info()
                    samples[loop.fed] = {
                        **_status_kib(),
                        "text_cache_entries": caches.text_entries,
                        "message_cache_entries": caches.message_entries,
                        "seconds": time.perf_counter() - started,
                        "history": len(loop.history),
                        "archive_bytes": _archive_bytes(directory),
                    }
                # Checked every 500 messages: reading the clock is cheap, but not free.
                if loop.fed % 500 == 0 and time.perf_counter() - started > budget_s:
                    stopped_at = loop.fed
                    break
        finally:
            loop.close()
        archive = _archive_bytes(directory)
    return {
        "engine": engine_name,
        "baseline": baseline,
        "samples": {str(k): v for k, v in samples.items()},
        "fed": loop.fed,
        "stopped_at": stopped_at,
        "seconds": time.perf_counter() - started,
        "compactions": loop.compaction_events,
        "archive_bytes": archive,
        # Linux reports ru_maxrss in KiB.
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


# ---------------------------------------------------------------- the parent

# Linux starts a child's ru_maxrss at the RSS of the process that spawned it (the
# high-water mark survives exec), so a child of this process, which may have run
# other benchmarks, would report their memory as its own. A tiny interpreter in
# between spawns the real child: its ru_maxrss then starts from ~10 MB.
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def _spawn(
    engine_name: str, messages: int, checkpoints: Sequence[int], budget_s: float, data: Path
) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter; its JSON result."""
    env = dict(os.environ)
    # The child must import the same contextengine as this process (a worktree's src/).
    package_root = str(Path(contextengine.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        "-c",
        _LAUNCHER,
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        engine_name,
        "--messages",
        str(messages),
        "--checkpoints",
        ",".join(str(c) for c in checkpoints),
        "--budget",
        str(budget_s),
        "--data",
        str(data),
    ]
    # The child stops itself at its budget; the timeout only catches a hang in one request.
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=budget_s + 900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"session_memory child for {engine_name} exited {done.returncode}: "
            + done.stderr.strip()[-2000:]
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _mib(kib: int | None) -> str:
    return "–" if kib is None else f"{kib / 1024:,.0f}"


def _growth(reached: list[tuple[int, int]]) -> str:
    """Whether the peak still grows over the last step, or levelled off before it."""
    if len(reached) < 2:
        return "not enough checkpoints reached"
    steps = [
        f"{(b - a) / 1024:+,.0f} MiB {ca:,}→{cb:,}"
        for (ca, a), (cb, b) in itertools.pairwise(reached)
    ]
    (_, first), (_, before), (_, last) = reached[0], reached[-2], reached[-1]
    if (last - before) / before > GROWTH_SHARE:
        verdict = "yes"
    elif (before - first) / first > GROWTH_SHARE:
        verdict = "levels off"
    else:
        verdict = "no"
    return f"{verdict}: " + ", ".join(steps)


def _table(results: list[dict[str, Any]], checkpoints: Sequence[int], budget_s: float) -> list[str]:
    head = " | ".join(f"peak RSS at {c:,} MiB" for c in checkpoints)
    lines = [
        f"| engine | baseline RSS MiB | {head} | ru_maxrss MiB | messages replayed"
        " | wall s | compactions | archive MB | token cache entries, text / message"
        " | peak RSS grows with the session | anonymous / file-backed RSS at the end MiB"
        " | anonymous RSS grows with the session |",
        "|---|---:|" + "---:|" * len(checkpoints) + "---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in results:
        samples = r["samples"]
        peaks: list[int | None] = [samples.get(str(c), {}).get("VmHWM") for c in checkpoints]
        cells = " | ".join(
            _mib(p) if p is not None else f"not reached in {budget_s:.0f} s" for p in peaks
        )
        verdict = _growth([(c, p) for c, p in zip(checkpoints, peaks, strict=True) if p])
        anon: list[int | None] = [samples.get(str(c), {}).get("RssAnon") for c in checkpoints]
        anon_verdict = _growth([(c, a) for c, a in zip(checkpoints, anon, strict=True) if a])
        last = samples.get(str(checkpoints[-1]), {})
        split = f"{_mib(last.get('RssAnon'))} / {_mib(last.get('RssFile'))}"
        caches = (
            f"{last['text_cache_entries']:,} / {last['message_cache_entries']:,}"
            if "text_cache_entries" in last
            else "–"
        )
        archive = f"{r['archive_bytes'] / 1e6:,.1f}" if r["archive_bytes"] else "–"
        fed = f"{r['fed']:,}" + (" (budget)" if r["stopped_at"] is not None else "")
        lines.append(
            f"| {r['engine']} | {_mib(r['baseline'].get('VmRSS'))} | {cells} |"
            f" {_mib(r['maxrss_kib'])} | {fed} | {r['seconds']:.0f} | {r['compactions']:,} |"
            f" {archive} | {caches} | {verdict} | {split} | {anon_verdict} |"
        )
    return lines


def run(
    messages: int = MESSAGES,
    *,
    quick: bool = False,
    budget_s: float | None = None,
    engines: Sequence[str] = ("compressor", "lcm"),
    data: Path | None = None,
) -> str:
    """Each engine in its own subprocess; the markdown table."""
    host = _host()
    count = min(messages, QUICK_MESSAGES) if quick else messages
    checkpoints = sorted({max(1, int(count * share)) for share in CHECKPOINT_SHARES})
    budget = budget_s if budget_s is not None else (QUICK_BUDGET_S if quick else BUDGET_S)
    source = host.load_session_data(data or host.DATA).source
    results = [_spawn(name, count, checkpoints, budget, data or host.DATA) for name in engines]
    where = host.archive_location(Path(tempfile.gettempdir()))
    return "\n".join(
        [
            f"Session: {count:,} messages of {source}, through ContextHost at a {CONTEXT:,}-token"
            f" context (compaction runs as in real use), model {host.MODEL}, offline summariser;"
            f" lcm archive a SQLite file on {where}.",
            "",
            *_table(results, checkpoints, budget),
            "",
            "Each engine in its own Python process. Peak RSS is VmHWM read when the replay"
            " reaches each size (the whole process: interpreter, vocabulary, the base data,"
            " the host's history, the engine and its token caches, SQLite's page cache);"
            " baseline is RSS before the first message. The session is generated one message"
            " at a time, so RSS holds only what the loop, host and engine keep. Anonymous RSS"
            " (RssAnon) is the heap the process holds; file-backed RSS (RssFile) is mostly the"
            " archive's pages read through SQLite's memory map (up to 2 GB), clean pages of the"
            " file that the kernel drops under memory pressure: it grows with the archive"
            " because searches and appends touch it, not because anything is kept. Wall time is"
            f" the whole replay, model calls excluded; budget {budget:.0f} s per engine.",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MESSAGES:,} messages")
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--engines", default="compressor,lcm")
    parser.add_argument("--budget", type=float, default=None, help="seconds per engine")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoints", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        checkpoints = [int(c) for c in args.checkpoints.split(",") if c.strip()]
        result = child(args.child, args.messages, checkpoints, args.budget, args.data)
        print(json.dumps(result))
        return
    engines = [e for e in args.engines.split(",") if e.strip()]
    print(
        run(args.messages, quick=args.quick, budget_s=args.budget, engines=engines, data=args.data)
    )


if __name__ == "__main__":
    main()
