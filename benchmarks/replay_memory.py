"""Replay memory and speed on one long Claude Code session (about 50 / 100 / 200 MB).

The input is built, never committed: the real Claude Code sessions in
``../shared/data/spotter/transcripts/*.jsonl`` are chained end to end, as many
copies as it takes to reach the size, into ONE session in a temporary folder.
Every uuid, parent link, message id, request id and tool id is rewritten per
copy so the file is one consistent conversation (each copy's first record
hangs off the previous copy's last message; the recorded compactions stay
where they were), and every text, thinking block, tool input string and
tool result is varied per copy (a short marker appended) so the token caches
see new text, as they would in a real long session, instead of exact repeats.

Each file is replayed with the real command, ``contextengine replay FILE
--engine NAME --context-length 128000 --json``, in a subprocess, once per
engine: wall time, CPU time and peak RSS (the child's own rusage, from
``os.wait4``) are the command's own, a fresh interpreter per run. The command
also writes a per-request timeline (``--timeline``), from which the table
gives requests per CPU second in the first and in the last quarter of the
session's requests: equal figures mean the replay does not slow down as the
history grows.

Run: ``PYTHONPATH=src python benchmarks/replay_memory.py [--quick] [--sizes 50 100 200]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Result", "build_session", "replay_once", "run"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ENGINES = ("compressor", "lcm")
CONTEXT_LENGTH = 128_000
SIZES_MB = (50, 100, 200)
QUICK_SIZES_MB = (8, 16)
SESSION_ID = "00000000-0000-4000-8000-00000000c4a1"
_NAMESPACE = uuid.UUID("6f0c7f8e-2d3b-4b8e-9a51-7c3d2e1f0a99")
#: Keys holding a record uuid (rewritten per copy with uuid5, so they stay uuids).
_UUID_KEYS = ("uuid", "parentUuid", "logicalParentUuid", "sourceToolAssistantUUID", "leafUuid")
#: Keys holding another identifier that must be unique per copy.
_ID_KEYS = ("messageId", "requestId", "toolUseID", "parentToolUseID", "sourceToolUseID")


#: What the figures include, printed under the table.
NOTE = (
    "One `contextengine replay FILE --engine NAME --context-length 128000 --model gpt-4o "
    "--json --timeline T` process per row (a fresh interpreter). Wall and CPU seconds are "
    "the whole command: interpreter start, imports and vocabulary, reading and parsing "
    "the JSONL (twice for Claude Code: an index pass, then the messages), the replay "
    "through the engine (lcm archives every message in a temporary SQLite file, deleted "
    "afterwards), the unmanaged baseline and Claude Code's recorded compaction as "
    "reference traces, token counting and the cost model. Peak RSS is the process's "
    "maximum resident set (its own VmHWM, read at exit): SQLite's page cache, and the "
    "token and anchor caches, which keep up to 64M characters of text each whatever "
    "the session's size, are in it. Requests per second are requests per CPU second of "
    "the process (file, engine and reference traces together) over the first and the "
    "last quarter of the session's requests, from the timeline: equal figures mean no "
    "slow-down as the history grows. The input is the spotter Claude Code sessions "
    "chained into one session with fresh ids and per-copy text variations (see the "
    "module docstring), written to a temporary folder and deleted."
)


def _spotter_files(data: Path) -> list[Path]:
    return sorted((data / "spotter" / "transcripts").glob("*.jsonl"))


def _new_uuid(copy: int, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    return str(uuid.uuid5(_NAMESPACE, f"{copy}:{value}"))


def _new_id(copy: int, value: Any) -> Any:
    return f"{value}c{copy}" if isinstance(value, str) and value else value


def _vary(text: Any, marker: str) -> Any:
    return text + marker if isinstance(text, str) and text else text


def _vary_block(block: Any, copy: int, marker: str) -> Any:
    if not isinstance(block, dict):
        return _vary(block, marker)
    kind = block.get("type")
    block = dict(block)
    if kind == "text":
        block["text"] = _vary(block.get("text"), marker)
    elif kind == "thinking":
        block["thinking"] = _vary(block.get("thinking"), marker)
    elif kind == "tool_use":
        block["id"] = _new_id(copy, block.get("id"))
        if isinstance(block.get("input"), dict):
            block["input"] = {k: _vary(v, marker) for k, v in block["input"].items()}
    elif kind == "tool_result":
        block["tool_use_id"] = _new_id(copy, block.get("tool_use_id"))
        content = block.get("content")
        if isinstance(content, list):
            block["content"] = [_vary_block(b, copy, marker) for b in content]
        else:
            block["content"] = _vary(content, marker)
    return block


def _rewrite(record: dict[str, Any], copy: int) -> dict[str, Any]:
    """One record of copy ``copy``: new ids, one session id, varied text."""
    for key in _UUID_KEYS:
        if key in record:
            record[key] = _new_uuid(copy, record[key])
    for key in _ID_KEYS:
        if key in record:
            record[key] = _new_id(copy, record[key])
    if "sessionId" in record:
        record["sessionId"] = SESSION_ID
    snapshot = record.get("snapshot")
    if isinstance(snapshot, dict) and "messageId" in snapshot:
        record["snapshot"] = {**snapshot, "messageId": _new_id(copy, snapshot["messageId"])}
    message = record.get("message")
    if isinstance(message, dict):
        marker = f" ~{copy}" if copy else ""
        message = dict(message)
        if isinstance(message.get("id"), str):
            message["id"] = _new_id(copy, message["id"])
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = [_vary_block(b, copy, marker) for b in content]
        elif isinstance(content, str):
            message["content"] = _vary(content, marker)
        record["message"] = message
    # toolUseResult duplicates the tool output for Claude Code's UI; the
    # importer never reads it, so it is kept (the file's size is honest) as is.
    return record


def _copies(files: Sequence[Path]) -> Iterator[tuple[int, Path]]:
    copy = 0
    while True:
        for file in files:
            yield copy, file
            copy += 1


def build_session(data: Path, target_mb: float, folder: Path) -> tuple[Path, int]:
    """Write one chained Claude Code session of at least ``target_mb`` MB; (path, copies)."""
    files = _spotter_files(data)
    if not files:
        raise FileNotFoundError(f"no Claude Code sessions under {data}/spotter/transcripts")
    target = int(target_mb * 1_000_000)
    path = folder / f"chained-{target_mb:g}MB.jsonl"
    written = 0
    tip: str | None = None
    copies = 0
    with path.open("w", encoding="utf-8") as out:
        for copy, file in _copies(files):
            if written >= target:
                break
            copies += 1
            rooted = False
            last_message: str | None = None
            for line in file.open(encoding="utf-8"):
                if not line.strip():
                    continue
                record = _rewrite(json.loads(line), copy)
                is_root = "uuid" in record and record.get("parentUuid") is None
                if not rooted and is_root and record.get("subtype") != "compact_boundary":
                    # This copy's root continues the previous copy's conversation.
                    record["parentUuid"] = tip
                    rooted = True
                if record.get("type") in ("user", "assistant") and not record.get("isSidechain"):
                    last_message = record.get("uuid")
                text = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
                out.write(text)
                written += len(text.encode("utf-8"))
            tip = last_message or tip
    return path, copies


@dataclass
class Result:
    """One replay of one file through one engine, measured from outside the process."""

    engine: str
    file_mb: float
    messages: int
    requests: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    first_quarter_rps: float
    last_quarter_rps: float
    compactions: int
    prompt_tokens: int
    failed: str = ""


def _quarter_rates(timeline: Path) -> tuple[float, float]:
    """Requests per CPU second in the first and in the last quarter of the requests.

    The timeline has one line per request, ``number cpu_seconds``, written as
    the reply is taken; request ``n``'s work lies between its line and the next.
    """
    marks = [
        float(line.split()[1])
        for line in timeline.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    if len(marks) < 9:
        return 0.0, 0.0
    quarter = (len(marks) - 1) // 4
    first = marks[quarter] - marks[0]
    last = marks[-1] - marks[-1 - quarter]
    return quarter / max(first, 1e-9), quarter / max(last, 1e-9)


#: Runs the CLI (the rest of argv after the file name), then writes the process's
#: VmHWM in KiB to that file at exit.
_PEAK_WRAPPER = """
import atexit, runpy, sys
target = sys.argv.pop(1)
def _peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            with open(target, "w") as out:
                out.write(line.split()[1])
atexit.register(_peak)
sys.argv[0] = "contextengine"
runpy.run_module("contextengine", run_name="__main__", alter_sys=True)
"""


def replay_once(path: Path, engine: str, *, cli: Sequence[str] | None = None) -> Result:
    """Run ``contextengine replay`` on ``path`` in a fresh process and measure that process.

    ``cli`` is the command that starts the CLI (default: this interpreter
    running the CLI through :data:`_PEAK_WRAPPER`). CPU time comes from
    ``os.wait4``, for that one process. The peak RSS is the process's own
    ``VmHWM``, which the wrapper reads at exit: ``VmHWM`` starts afresh at
    ``exec``, while a child's ``ru_maxrss`` starts at its parent's RSS when
    it forks, so run from a large process (``run_all.py`` after the store
    benchmarks) every run reported the parent's 2 GB. A custom ``cli`` gets
    ``ru_maxrss``.
    """
    size = path.stat().st_size / 1_000_000
    with tempfile.TemporaryDirectory(prefix="replay-memory-") as tmp:
        timeline = Path(tmp) / "timeline.txt"
        out, err = Path(tmp) / "stdout.json", Path(tmp) / "stderr.txt"
        env = dict(os.environ)
        env["CONTEXTENGINE_HOME"] = tmp  # never the user's own data directory
        peak_file = Path(tmp) / "peak.txt"
        command = [
            *(cli or [sys.executable, "-c", _PEAK_WRAPPER, str(peak_file)]),
            "replay",
            str(path),
            "--engine",
            engine,
            "--context-length",
            str(CONTEXT_LENGTH),
            "--model",
            "gpt-4o",
            "--json",
            "--timeline",
            str(timeline),
        ]
        started = time.perf_counter()
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr)
            _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        cpu = usage.ru_utime + usage.ru_stime
        peak = usage.ru_maxrss / 1024  # kilobytes on Linux
        if peak_file.exists():
            peak = int(peak_file.read_text()) / 1024
        if proc.returncode != 0:
            tail = err.read_text(encoding="utf-8").strip().splitlines()[-1:]
            return Result(engine, size, 0, 0, wall, cpu, peak, 0, 0, 0, 0, failed=" ".join(tail))
        (row,) = json.loads(out.read_text(encoding="utf-8"))["sessions"]
        first, last = _quarter_rates(timeline) if timeline.exists() else (0.0, 0.0)
        return Result(
            engine=engine,
            file_mb=size,
            messages=int(row["messages"]),
            requests=int(row["requests"]),
            wall_s=wall,
            cpu_s=cpu,
            peak_rss_mb=peak,
            first_quarter_rps=first,
            last_quarter_rps=last,
            compactions=int(row["compactions"]),
            prompt_tokens=int(row["prompt_tokens_total"]),
        )


def _table(results: Sequence[Result]) -> str:
    lines = [
        "| file MB | messages | engine | wall s | CPU s | peak RSS MB "
        "| req/s first quarter | req/s last quarter | compactions |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.failed:
            lines.append(
                f"| {r.file_mb:.0f} | — | {r.engine} | {r.wall_s:.1f} | {r.cpu_s:.1f} "
                f"| {r.peak_rss_mb:,.0f} | failed: {r.failed} | | |"
            )
            continue
        lines.append(
            f"| {r.file_mb:.0f} | {r.messages:,} | {r.engine} | {r.wall_s:.1f} | {r.cpu_s:.1f} "
            f"| {r.peak_rss_mb:,.0f} | {r.first_quarter_rps:,.0f} | {r.last_quarter_rps:,.0f} "
            f"| {r.compactions} |"
        )
    return "\n".join(lines)


def run(
    data: Path = DATA,
    quick: bool = False,
    sizes: Sequence[float] | None = None,
    engines: Sequence[str] = ENGINES,
    cli: Sequence[str] | None = None,
) -> str:
    """Build the chained sessions, replay each through each engine, return the markdown table."""
    if not _spotter_files(data):
        return f"_{data}/spotter/transcripts is absent: replay memory benchmark skipped_"
    chosen = list(sizes or (QUICK_SIZES_MB if quick else SIZES_MB))
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="replay-memory-input-") as tmp:
        for size in sorted(chosen):
            path, _ = build_session(data, size, Path(tmp))
            for engine in engines:
                print(f"replaying {path.name} through {engine}...", file=sys.stderr, flush=True)
                results.append(replay_once(path, engine, cli=cli))
            path.unlink()
    return "\n\n".join(
        [
            _table(results),
            NOTE,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--quick", action="store_true", help="8 and 16 MB instead of 50-200")
    parser.add_argument("--sizes", type=float, nargs="*", default=None, help="sizes in MB")
    parser.add_argument("--engines", nargs="*", default=list(ENGINES))
    parser.add_argument(
        "--cli",
        default=None,
        help="command that starts the CLI, e.g. 'contextengine' (default: python -m contextengine)",
    )
    parser.add_argument(
        "--write", type=Path, default=None, help="only write the chained session of --sizes here"
    )
    args = parser.parse_args(argv)
    if args.write is not None:
        for size in args.sizes or SIZES_MB:
            path, copies = build_session(args.data, size, args.write)
            print(f"{path} ({copies} copies, {path.stat().st_size / 1e6:.1f} MB)")
        return 0
    cli = args.cli.split() if args.cli else None
    print(run(args.data, quick=args.quick, sizes=args.sizes, engines=args.engines, cli=cli))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
