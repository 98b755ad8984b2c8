"""Bounded resources: a 10 MB tool output and a 100,000-message session, per engine.

Two cases, each engine (``compressor``; ``lcm`` on an SQLite *file* in a fresh
temporary directory), each case in its own fresh interpreter (started through
a tiny launcher, so its ``ru_maxrss`` is its own: on Linux a child's
high-water mark starts at its spawner's RSS), driven through ``ContextHost``
at a 128,000-token window (model ``gpt-4o``, offline ``DeterministicSummarizer``)
as an agent loop drives it. Peak memory is ``resource.getrusage(RUSAGE_SELF)
.ru_maxrss`` at the end of the case minus the same figure taken as the
baseline, after the imports, the vocabulary, the engine and the host are
loaded and the session is started, before the case's data exists.

**One huge tool output.** A session (system prompt, a user message, an
assistant ``bash`` call) gets a tool result of 10 MB of log lines, one of
them, in the middle, carrying a unique word. The result is the newest
message, in the protected tail, where no compaction can take it. Timed (wall
and CPU): the request, ``after_tool_calls`` then ``prepare_request(history,
tools=...)``. Checked: the request's exact tokens plus the tool schemas' are
within the window, and how the output was made to fit (the window
guarantee's excerpt with its marker, or lcm's large-content reference).
Then, for lcm, ``lcm_grep`` for the unique word (through
``host.handle_tool_call``), timed, and whether it found the message.

**A 100,000-message session**, grown through the host turn by turn (no bulk
import): each turn is a user message, an assistant ``bash`` call, its result
(20 log lines) and an assistant answer, so two requests per turn
(``prepare_request``, ``record_response`` with the request's exact prompt
tokens, ``after_tool_calls`` once the result is in, ``end_turn``). Reported:
peak RSS, the median wall and CPU time of a request over the first and the
last 500 requests (every hook of a request, as ``benchmarks/host.py`` times
them), compactions, and the archive's size on disk (the SQLite file with its
WAL and shared-memory files) at the end. A case that its time budget stops
says how far it got.

Quick mode (CI size): a 1 MB output and 5,000 messages.

Run: ``PYTHONPATH=src python benchmarks/reliability/resources.py [--quick]
[--output docs/reliability.md]`` (``--output`` rewrites the figures between the
markers of that page's "Bounded resources" section). Exits 1 when a request
does not fit the window or ``lcm_grep`` misses the word.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import contextengine
from contextengine import (
    CompactionEvent,
    ContextHost,
    DeterministicSummarizer,
    load_engine,
    validate_messages,
)
from contextengine.tokens import REPLY_PRIMING_TOKENS, count_tokens, message_tokens
from contextengine.window import count_schemas

__all__ = ["ENGINES", "big_output", "long_session", "main", "run"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "Bounded resources"
NAME = "resources"
# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

Message = dict[str, Any]

ENGINES = ("compressor", "lcm")
MODEL = "gpt-4o"
CONTEXT = 128_000
OUTPUT_MB = 10
QUICK_OUTPUT_MB = 1
MESSAGES = 100_000
QUICK_MESSAGES = 5_000
#: Requests timed at the start and at the end of the long session.
SAMPLE = 500
#: Wall seconds a long session may run before it stops (full mode; quick: 120).
BUDGET_S = 1_500.0
NEEDLE = "zq7needle4242"
WINDOW_MARKER = "were cut to fit the context window"

BASH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command in the repository and return its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}

_LEVELS = ("INFO", "INFO", "DEBUG", "WARN", "ERROR")


def log_lines(count: int, rng: random.Random, start: int = 0) -> list[str]:
    """``count`` realistic service log lines."""
    return [
        f"2026-12-01T{(start + n) // 3600 % 24:02d}:{(start + n) // 60 % 60:02d}:"
        f"{(start + n) % 60:02d}.{rng.randrange(1000):03d}Z {rng.choice(_LEVELS)} "
        f"worker-{rng.randrange(16)} req={rng.getrandbits(32):08x} "
        f"path=/api/v2/orders/{rng.randrange(10**7)} "
        f"status={rng.choice((200, 200, 201, 404, 500))} "
        f"latency_ms={rng.randrange(1, 9000)} user=u{rng.randrange(10**5)}"
        for n in range(count)
    ]


def log_text(size_bytes: int, *, needle: str = NEEDLE, seed: int = 7) -> str:
    """About ``size_bytes`` of log lines, the line in the middle carrying ``needle``."""
    rng = random.Random(seed)
    lines: list[str] = []
    size = 0
    while size < size_bytes:
        batch = log_lines(1_000, rng, start=len(lines))
        lines.extend(batch)
        size += sum(len(line) + 1 for line in batch)
    middle = len(lines) // 2
    lines[middle] = (
        f"2026-12-01T12:00:00.000Z ERROR worker-3 payment declined trace={needle} retry=false"
    )
    return "\n".join(lines)[:size_bytes]


# ---------------------------------------------------------------- the child's helpers


def _maxrss_kib() -> int:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _rss_kib() -> int:
    """The current resident set (VmRSS), in KiB; 0 off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _baseline() -> int:
    """Reset the high-water mark to the current RSS and return it (KiB).

    Loading the vocabulary peaks well above the RSS it leaves (the parse's
    temporaries), so without a reset ``ru_maxrss`` would hide everything the
    case uses below that transient. Writing 5 to ``/proc/self/clear_refs``
    resets the peak (Linux 4.0+); where that is refused the figure is
    ``ru_maxrss`` so far, and growth below it reads as 0. Freed memory is
    handed back to the system first (``gc.collect``, glibc's ``malloc_trim``):
    memory the process holds but no longer uses would otherwise absorb the
    case's first allocations unseen.
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return _maxrss_kib()
    return max(_rss_kib(), 1)


def _archive_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def _engine(name: str, directory: Path) -> Any:
    options: dict[str, Any] = {"store": str(directory / "archive.db")} if name == "lcm" else {}
    return load_engine(
        name,
        context_length=CONTEXT,
        model=MODEL,
        summarizer=DeterministicSummarizer(),
        **options,
    )


def _close(engine: Any) -> None:
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def _tokens(request: Sequence[Message]) -> int:
    return sum(message_tokens(m, MODEL) for m in request) + REPLY_PRIMING_TOKENS


def _call(call_id: str, command: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})},
            }
        ],
    }


def _how_fit(request: Sequence[Message], size: int) -> str:
    """How the huge output went out: whole, as the window's excerpt, or lcm's reference."""
    for message in request:
        if message.get("role") != "tool":
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content)
        if len(text) >= size:
            return "whole"
        if WINDOW_MARKER in text:
            return f"excerpt with marker ({len(text):,} chars)"
        return f"replaced by a reference ({len(text):,} chars)"
    return "left out"


def big_output(engine_name: str, size_bytes: int) -> dict[str, Any]:
    """The huge-tool-output case (run in a fresh child); its figures as a dict."""
    with tempfile.TemporaryDirectory(prefix=f"ce-resources-{engine_name}-") as tmp:
        directory = Path(tmp)
        engine = _engine(engine_name, directory)
        host = ContextHost(engine, model=MODEL, context_length=CONTEXT)
        count_tokens("warm up the vocabulary", MODEL)
        host.start_session("resources-big")
        tools = [BASH_SCHEMA, *host.tool_schemas()]
        tools_tokens = count_schemas(tools, MODEL)
        history: list[Message] = [
            {"role": "system", "content": "You are an operations agent. Investigate incidents."},
            {"role": "user", "content": "Why did the payment for order 4242 fail? Check the log."},
        ]
        # The first request, so the engine has seen the session before the output comes.
        host.prepare_request(history, tools=tools)
        history = host.history
        host.record_response({"prompt_tokens": 200, "completion_tokens": 20})
        history.append(_call("call_log", "cat /var/log/payments/app.log"))
        baseline = _baseline()
        text = log_text(size_bytes)
        history.append({"role": "tool", "tool_call_id": "call_log", "content": text})
        wall, cpu = time.perf_counter(), time.process_time()
        history = host.after_tool_calls(history)
        request = host.prepare_request(history, tools=tools)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        validate_messages(request)
        tokens = _tokens(request) + tools_tokens
        how = _how_fit(request, len(text))
        request_peak = _maxrss_kib()
        grep: dict[str, Any] = {}
        if engine_name == "lcm":
            g_wall, g_cpu = time.perf_counter(), time.process_time()
            answer = host.handle_tool_call("lcm_grep", {"query": NEEDLE})
            g_wall, g_cpu = time.perf_counter() - g_wall, time.process_time() - g_cpu
            found = NEEDLE in answer and '"results": []' not in answer
            grep = {"grep_wall_s": g_wall, "grep_cpu_s": g_cpu, "grep_found": found}
        _close(engine)
    return {
        "engine": engine_name,
        "output_bytes": len(text.encode()),
        "baseline_kib": baseline,
        "request_peak_kib": request_peak,
        "peak_kib": _maxrss_kib(),
        "wall_s": wall,
        "cpu_s": cpu,
        "request_tokens": tokens,
        "fits": tokens <= CONTEXT,
        "how": how,
        **grep,
    }


def _turn(n: int, rng: random.Random) -> tuple[Message, Message, Message, Message]:
    """One turn of the long session: question, call, its result, answer."""
    user = {
        "role": "user",
        "content": f"Turn {n}: the nightly job for shard {rng.randrange(64)} failed again; "
        f"look at run {rng.getrandbits(40):010x} and tell me what changed since yesterday.",
    }
    call = _call(f"call_{n}", f"journalctl -u nightly@{n % 64} --since yesterday | tail -20")
    result = {
        "role": "tool",
        "tool_call_id": f"call_{n}",
        "content": "\n".join(log_lines(20, rng, start=n * 20)),
    }
    answer = {
        "role": "assistant",
        "content": f"Run {n}: {rng.randrange(3, 40)} requests failed with status 500 on "
        f"worker-{rng.randrange(16)}; the retry budget was exhausted after "
        f"{rng.randrange(2, 9)} attempts. Next I would check the connection pool limits.",
    }
    return user, call, result, answer


def long_session(engine_name: str, messages: int, budget_s: float) -> dict[str, Any]:
    """The long-session case (run in a fresh child); its figures as a dict."""
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix=f"ce-resources-{engine_name}-") as tmp:
        directory = Path(tmp)
        engine = _engine(engine_name, directory)
        compactions = [0]

        def observe(event: Any) -> None:
            if isinstance(event, CompactionEvent) and not event.aborted:
                compactions[0] += 1

        host = ContextHost(engine, model=MODEL, context_length=CONTEXT, observers=[observe])
        count_tokens("warm up the vocabulary", MODEL)
        host.start_session("resources-long")
        tools = [BASH_SCHEMA, *host.tool_schemas()]
        tools_tokens = count_schemas(tools, MODEL)
        history: list[Message] = [
            {"role": "system", "content": "You are an operations agent. Investigate incidents."}
        ]
        baseline = _baseline()
        timings: list[tuple[float, float]] = []
        over_window = 0
        started = time.perf_counter()
        fed = 1
        input_bytes = 0
        stopped = False
        n = 0

        def request(reply: Message) -> None:
            nonlocal history, over_window
            wall, cpu = time.perf_counter(), time.process_time()
            sent = host.prepare_request(history, tools=tools)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            history = host.history
            # The provider's count, not timed.
            prompt = _tokens(sent) + tools_tokens
            over_window += prompt > CONTEXT
            usage = {"prompt_tokens": prompt, "completion_tokens": 60, "total_tokens": prompt + 60}
            w2, c2 = time.perf_counter(), time.process_time()
            host.record_response(usage)
            history.append(reply)
            if not reply.get("tool_calls"):
                host.end_turn(history, usage)
            timings.append((wall + time.perf_counter() - w2, cpu + time.process_time() - c2))

        while fed < messages:
            user, call, result, answer = _turn(n, rng)
            input_bytes += sum(len(json.dumps(m)) for m in (user, call, result, answer))
            n += 1
            history.append(user)
            request(call)
            history.append(result)
            wall, cpu = time.perf_counter(), time.process_time()
            history = host.after_tool_calls(history)
            # after_tool_calls belongs to the next request, as in benchmarks/host.py.
            carry = (time.perf_counter() - wall, time.process_time() - cpu)
            request(answer)
            timings[-1] = (timings[-1][0] + carry[0], timings[-1][1] + carry[1])
            fed += 4
            if time.perf_counter() - started > budget_s:
                stopped = True
                break
        seconds = time.perf_counter() - started
        host.end_session(history)
        _close(engine)
        archive = _archive_bytes(directory) if engine_name == "lcm" else 0
    first, last = timings[:SAMPLE], timings[-SAMPLE:]
    return {
        "engine": engine_name,
        "messages": fed,
        "input_bytes": input_bytes,
        "stopped": stopped,
        "seconds": seconds,
        "requests": len(timings),
        "baseline_kib": baseline,
        "peak_kib": _maxrss_kib(),
        "first_wall_ms": statistics.median(t[0] for t in first) * 1e3,
        "first_cpu_ms": statistics.median(t[1] for t in first) * 1e3,
        "last_wall_ms": statistics.median(t[0] for t in last) * 1e3,
        "last_cpu_ms": statistics.median(t[1] for t in last) * 1e3,
        "compactions": compactions[0],
        "over_window": over_window,
        "archive_bytes": archive,
    }


# ---------------------------------------------------------------- the parent

# Linux starts a child's ru_maxrss at the RSS of the process that spawned it (the
# high-water mark survives exec), so a child of this process would report this
# process's memory as its own. A tiny interpreter in between spawns the real one.
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def spawn(case: str, engine_name: str, size: int, budget_s: float) -> dict[str, Any]:
    """Run one case in a fresh interpreter; its JSON result."""
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
        case,
        "--engine",
        engine_name,
        "--size",
        str(size),
        "--budget",
        str(budget_s),
    ]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=budget_s + 900, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"resources child {case}/{engine_name} exited {done.returncode}: "
            + done.stderr.strip()[-2000:]
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _mib(kib: float) -> str:
    return f"{kib / 1024:,.1f}"


def _big_table(results: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| engine | output MB | fits the window | request tokens | how it fit | peak RSS over"
        " baseline MiB (request / all) | peak ÷ output | request wall s | request CPU s"
        " | lcm_grep wall s | lcm_grep CPU s | lcm_grep found it |",
        "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        grown = r["peak_kib"] - r["baseline_kib"]
        grown_request = r["request_peak_kib"] - r["baseline_kib"]
        ratio = grown * 1024 / r["output_bytes"]
        grep = "– | – | no tool"
        if "grep_found" in r:
            found = "yes" if r["grep_found"] else "**no**"
            grep = f"{r['grep_wall_s']:.3f} | {r['grep_cpu_s']:.3f} | {found}"
        lines.append(
            f"| {r['engine']} | {r['output_bytes'] / 1e6:,.1f} | {'yes' if r['fits'] else '**no**'}"
            f" | {r['request_tokens']:,} | {r['how']} | {_mib(grown_request)} / {_mib(grown)}"
            f" | {ratio:.1f}× | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {grep} |"
        )
    return lines


def _long_table(results: Sequence[dict[str, Any]], budget_s: float) -> list[str]:
    lines = [
        "| engine | messages | input MB | requests | wall s | peak RSS over baseline MiB"
        " | request ms,"
        f" first {SAMPLE} (wall / CPU) | request ms, last {SAMPLE} (wall / CPU)"
        " | compactions | requests over the window | archive MB on disk |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        messages = f"{r['messages']:,}" + (
            f" (stopped by the {budget_s:,.0f} s budget)" if r["stopped"] else ""
        )
        archive = f"{r['archive_bytes'] / 1e6:,.1f}" if r["archive_bytes"] else "– (no archive)"
        lines.append(
            f"| {r['engine']} | {messages} | {r['input_bytes'] / 1e6:,.1f} | {r['requests']:,}"
            f" | {r['seconds']:,.0f}"
            f" | {_mib(r['peak_kib'] - r['baseline_kib'])}"
            f" | {r['first_wall_ms']:.2f} / {r['first_cpu_ms']:.2f}"
            f" | {r['last_wall_ms']:.2f} / {r['last_cpu_ms']:.2f}"
            f" | {r['compactions']:,} | {r['over_window']:,} | {archive} |"
        )
    return lines


def measure(
    *,
    quick: bool = False,
    output_mb: float | None = None,
    messages: int | None = None,
    budget_s: float | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """Every case for every engine, each in a fresh child; (big, long, budget)."""
    size = int((output_mb or (QUICK_OUTPUT_MB if quick else OUTPUT_MB)) * 1_000_000)
    count = messages or (QUICK_MESSAGES if quick else MESSAGES)
    budget = budget_s or (120.0 if quick else BUDGET_S)
    big = [spawn("big", name, size, budget) for name in ENGINES]
    long = [spawn("long", name, count, budget) for name in ENGINES]
    return big, long, budget


def failures(big: Sequence[dict[str, Any]], long: Sequence[dict[str, Any]]) -> list[str]:
    """What broke a promise: a request over the window, a grep that missed."""
    out = [
        f"{r['engine']}: the huge output's request is over the window" for r in big if not r["fits"]
    ]
    out += [f"{r['engine']}: lcm_grep missed the word" for r in big if r.get("grep_found") is False]
    out += [
        f"{r['engine']}: {r['over_window']} long-session requests over the window"
        for r in long
        if r["over_window"]
    ]
    return out


def render(
    big: Sequence[dict[str, Any]], long: Sequence[dict[str, Any]], budget_s: float, *, quick: bool
) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    command = "PYTHONPATH=src python benchmarks/reliability/resources.py" + (
        " --quick" if quick else ""
    )
    lines = [
        f"Generated by `{command}` on {now} UTC ({_page.machine_line()}).",
        "",
        "#### One huge tool output, in the protected tail, at a 128,000-token window",
        "",
        *_big_table(big),
        "",
        "One fresh interpreter per row. Request: `after_tool_calls` then `prepare_request`"
        " once the output is appended (wall and CPU seconds). Request tokens: the exact"
        " tokens of what was sent plus the tool schemas'. Peak RSS over baseline:"
        " `ru_maxrss` after the request, and after everything (`lcm_grep` included), minus"
        " the baseline taken before the output was built (the RSS once the imports, the"
        " vocabulary, the engine and the host are loaded, freed memory returned and the"
        " peak reset); it includes the output itself, held by the agent's history."
        " lcm_grep: one `lcm_grep` text search for the word on the line in the middle of"
        " the output, through `host.handle_tool_call`.",
        "",
        "#### A long session, grown turn by turn through the host, at a 128,000-token window",
        "",
        *_long_table(long, budget_s),
        "",
        "One fresh interpreter per row; each turn is a question, a `bash` call, its result"
        " (20 log lines) and an answer, two requests; messages count the system prompt, input"
        " MB is the JSON of every message fed. Request ms: the median over the first"
        f" and the last {SAMPLE} requests of every hook of a request (`after_tool_calls`"
        " charged to the next request, `prepare_request`, `record_response`, `end_turn`)."
        " Peak RSS over baseline: `ru_maxrss` at the end minus the baseline taken before the"
        " first message, as above."
        " Archive: the SQLite file, its WAL and shared-memory files at the end.",
    ]
    return "\n".join(lines)


def run(*, quick: bool = False) -> str:
    """Every case; the markdown figures."""
    big, long, budget = measure(quick=quick)
    return render(big, long, budget, quick=quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=None, help="docs/reliability.md")
    parser.add_argument("--child", choices=("big", "long"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="compressor", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=float, default=None)
    args = parser.parse_args(argv)
    if args.child == "big":
        print(json.dumps(big_output(args.engine, args.size)))
        return 0
    if args.child == "long":
        print(json.dumps(long_session(args.engine, args.size, args.budget or BUDGET_S)))
        return 0
    big, long, budget = measure(quick=args.quick, budget_s=args.budget)
    figures = render(big, long, budget, quick=args.quick)
    if args.output:
        _page.write_figures(args.output, NAME, SECTION, _page.between_markers(NAME, figures))
    else:
        print(figures)
    broken = failures(big, long)
    for line in broken:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
