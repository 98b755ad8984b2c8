"""Load on ``contextengine serve``: what the proxy adds to each request, over loopback only.

What runs, all on 127.0.0.1 and nothing else:

* **the upstream**: :class:`~contextengine.testing.ScriptedOpenAIServer` in
  a process of its own (a thread per connection; in the load generator's
  process it would compete with the clients for the GIL), answering every chat completion
  with one short sentence and a usage counted on the request it got (an
  offline token count of the whole request: the upstream's own CPU work,
  the same in both phases).
* **the proxy**: ``python -m contextengine serve`` as a separate process
  (its memory is its own), once per engine of ``--engines``: ``lcm`` on a
  fresh SQLite archive file in a temporary directory (every session's writes
  go to that one file, as they would in a user's proxy), ``compressor``
  without an archive; ``--context-length`` 4,000 tokens by default so that
  sessions compact during the run.
* **the clients**: ``--sessions`` concurrent conversations (asyncio tasks,
  one httpx connection pool), each ``--turns`` turns long, each turn one
  non-streamed request carrying the whole history (a new ~100-token user
  message per turn and the previous answers), as a client does.
* **direct**: the same load straight to the upstream first: the baseline.
  Through the proxy, the same again with a session header per conversation.

Figures: per-request latency (wall time from sending to the parsed answer)
p50 / p99 direct and through the proxy, their difference (what the proxy
adds: its HTTP hop, the session lock, ingest, compaction, the engine's view,
and the re-serialisation), throughput (requests per second of the phase's
wall time), errors (any non-200 or exception: must be 0), the proxy
process's CPU time per request (user + system, from ``/proc``: what the proxy
costs whatever else runs on the machine), the engine's wall time per
request (``contextengine_serve_engine_seconds`` from ``/metrics``, waits for
worker threads and the archive included), compactions, and the proxy
process's peak RSS (``VmHWM``).

**Engine-tool rounds** (``--tool-share``, default 0.1): that share of the
turns (spread evenly, the same turns in both phases) ask about an earlier
step, and the scripted model calls ``lcm_grep`` first whenever the request
offers it (through the proxy with lcm; the proxy answers the call and asks
again) and answers directly otherwise (direct, or the compressor, which has
no tools). Their latencies are reported apart: through the proxy a recall
turn costs two upstream calls and a search of the archive, so its added
latency over direct includes a whole second upstream round trip (on
loopback, with an upstream that answers at once: a real model's time would
come on top). A recall turn whose answer reaches the client with a tool
call in it counts as an error.

The latencies are wall times on whatever machine runs it: on a shared machine
they include waiting for a CPU (the load average and nice level are printed
with them); the CPU times per request do not.

Bounded: ``--timeout`` seconds per phase (default 900); a phase that runs
out stops and is reported as such.

Run: ``PYTHONPATH=src python benchmarks/serve.py [--sessions 50] [--turns 40]
[--context-length 4000] [--engines lcm,compressor] [--tool-share 0.1]``.
``benchmarks/run_all.py`` runs it at 50 sessions × 40 turns (``--quick``:
10 × 10), then each engine with one session alone (no queue in the proxy).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

SYSTEM = "You are a coding assistant. Answer in one sentence."
ANSWER = "Understood; I will keep that in mind for the next step of the task."
#: What a recall turn adds to its user message (the upstream calls lcm_grep on seeing it).
RECALL = " [recall] Which test failed two steps ago, and what did it expect?"


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    #: What went wrong, by kind ("status 502", "ReadTimeout"...).
    kinds: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0
    timed_out: bool = False
    #: CPU seconds the upstream process spent during the phase.
    upstream_cpu: float = 0.0
    #: Latencies of the recall turns only (also in ``latencies``).
    recall_latencies: list[float] = field(default_factory=list)

    def pct(self, q: float, *, recall: bool = False) -> float:
        values = self.recall_latencies if recall else self.latencies
        if not values:
            return float("nan")
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def is_recall(turn: int, share: float) -> bool:
    """Whether ``turn`` is a recall turn: ``share`` of the turns, spread evenly, never the first."""
    return share > 0 and int((turn + 1) * share) != int(turn * share)


def user_text(session: int, turn: int) -> str:
    return (
        f"Session {session}, step {turn}: look at src/module_{turn % 17}.py line {turn * 7}, "
        f"the failing test test_case_{session}_{turn} says AssertionError: expected {turn} "
        f"got {turn + 1}; change the loop bound and rerun the suite, then report the result "
        "and anything else that looks wrong in the surrounding function."
    )


async def _session(
    client: httpx.AsyncClient,
    url: str,
    session: int,
    turns: int,
    phase: Phase,
    proxied: bool,
    tool_share: float,
) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    headers = {"authorization": "Bearer sk-bench"}
    if proxied:
        headers["x-context-session"] = f"bench-{session}"
    for turn in range(turns):
        recall = is_recall(turn, tool_share)
        text = user_text(session, turn) + (RECALL if recall else "")
        history.append({"role": "user", "content": text})
        start = time.perf_counter()
        kind = ""
        try:
            response = await client.post(
                url, json={"model": "gpt-4o", "messages": history}, headers=headers
            )
            ok = response.status_code == 200
            kind = "" if ok else f"status {response.status_code}: {response.text[:120]}"
            message = response.json()["choices"][0]["message"] if ok else None
            if message is not None and message.get("tool_calls"):
                ok, kind = False, "a tool call reached the client"
        except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            ok, message, kind = False, None, type(exc).__name__
        phase.latencies.append(time.perf_counter() - start)
        if recall:
            phase.recall_latencies.append(phase.latencies[-1])
        if not ok or message is None:
            phase.errors += 1
            phase.kinds[kind] = phase.kinds.get(kind, 0) + 1
            message = {"role": "assistant", "content": ANSWER}
        history.append({"role": "assistant", "content": message.get("content") or ""})


async def run_phase(
    name: str, url: str, sessions: int, turns: int, timeout: float, tool_share: float = 0.0
) -> Phase:
    phase = Phase(name)
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions * 2)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:
        start = time.perf_counter()
        tasks = [
            asyncio.create_task(
                _session(client, url, s, turns, phase, name != "direct", tool_share)
            )
            for s in range(sessions)
        ]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        phase.timed_out = bool(pending)
        for task in done:
            if task.exception() is not None:
                phase.errors += 1
        phase.wall = time.perf_counter() - start
    return phase


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _metric(text: str, prefix: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix) and not line.startswith("#")
    )


_UPSTREAM = """
import sys
from contextengine.testing import ScriptedOpenAIServer

def respond(body):
    # A recall turn: call lcm_grep when offered, answer once its result is in.
    messages = body.get("messages") or [{}]
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    last = messages[-1]
    if last.get("role") == "user" and "[recall]" in str(last.get("content")):
        if "lcm_grep" in offered and body.get("tool_choice") != "none":
            return {"tool_calls": [{"name": "lcm_grep", "arguments": {"query": "failing test"}}]}
    return {"content": sys.argv[1]}

with ScriptedOpenAIServer(responder=respond) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()  # serve until the benchmark closes our stdin
"""


def start_upstream() -> tuple[Any, str]:
    """The scripted upstream in its own process; returns it and its base URL."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    process = subprocess.Popen(
        [sys.executable, "-c", _UPSTREAM, ANSWER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def start_proxy(
    upstream: str, engine: str, context_length: int, store: str, log: Path | None = None
) -> tuple[Any, str]:
    """``contextengine serve`` in a process of its own; its log goes to ``log`` (a file, never
    a pipe nobody reads: a full pipe would block the proxy mid-request)."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    # The child keeps its own descriptor of the log; ours is closed once it started.
    with log.open("w") if log is not None else open(os.devnull, "w") as err:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "contextengine", "serve", "--upstream", upstream,
                "--port", str(port), "--engine", engine, "--context-length", str(context_length),
                "--log-level", "warning", "--max-sessions", "1000",
                *(["--store", store] if store else []),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = log.read_text()[-2000:] if log is not None else "(no log)"
            raise RuntimeError(f"the proxy exited: {said}")
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the proxy did not start within 60 s")


def measure(
    sessions: int = 50,
    turns: int = 40,
    *,
    context_length: int = 4_000,
    engines: tuple[str, ...] = ("lcm",),
    timeout: float = 900.0,
    tool_share: float = 0.1,
) -> list[dict[str, Any]]:
    """The direct phase, then one proxy phase per engine; the figures of each (no printing)."""
    results = []
    load = os.getloadavg()
    server, upstream = start_upstream()
    try:
        before = _cpu_seconds(server.pid)
        direct = asyncio.run(
            run_phase(
                "direct", upstream + "/chat/completions", sessions, turns, timeout, tool_share
            )
        )
        direct.upstream_cpu = _cpu_seconds(server.pid) - before
        for engine in engines:
            with tempfile.TemporaryDirectory() as tmp:
                results.append(
                    _proxied(
                        (server.pid, upstream),
                        direct,
                        engine,
                        sessions,
                        turns,
                        context_length,
                        timeout,
                        tmp,
                        tool_share,
                    )
                )
    finally:
        server.communicate("", timeout=60)  # closing its stdin stops it
    for figures in results:
        figures["load"] = load
    return results


def _proxied(
    upstream_server: tuple[int, str],
    direct: Phase,
    engine: str,
    sessions: int,
    turns: int,
    context_length: int,
    timeout: float,
    tmp: str,
    tool_share: float = 0.0,
) -> dict[str, Any]:
    # lcm archives to a file as a user's would; the compressor runs without an archive.
    store = str(Path(tmp) / "archive.db") if engine == "lcm" else ""
    upstream_pid, upstream = upstream_server
    log = Path(tmp) / "proxy.log"
    process, url = start_proxy(upstream, engine, context_length, store, log)
    try:
        cpu_before = _cpu_seconds(process.pid)
        upstream_before = _cpu_seconds(upstream_pid)
        proxied = asyncio.run(
            run_phase("proxy", url + "/v1/chat/completions", sessions, turns, timeout, tool_share)
        )
        cpu = _cpu_seconds(process.pid) - cpu_before
        proxied.upstream_cpu = _cpu_seconds(upstream_pid) - upstream_before
        metrics = httpx.get(url + "/metrics").text
        rss = _peak_rss_mib(process.pid)
    finally:
        process.terminate()
        process.communicate(timeout=60)
    # What the proxy said, when a request failed: the first place to look.
    said = log.read_text(errors="replace").strip().splitlines() if proxied.errors else []
    count = _metric(metrics, "contextengine_serve_engine_seconds_count")
    return {
        "direct": direct,
        "proxy": proxied,
        "engine_ms": 1000
        * _metric(metrics, "contextengine_serve_engine_seconds_sum")
        / max(1, count),
        "compactions": _metric(metrics, "contextengine_serve_compactions_total"),
        "engine_tool_calls": _metric(metrics, "contextengine_serve_engine_tool_calls_total"),
        "tool_share": tool_share,
        "tokens_received": _metric(metrics, "contextengine_serve_prompt_tokens_received_total"),
        "tokens_sent": _metric(metrics, "contextengine_serve_prompt_tokens_sent_total"),
        "rss_mib": rss,
        "proxy_log": said[-12:],
        "cpu_ms": 1000 * cpu / max(1, len(proxied.latencies)),
        "sessions": sessions,
        "turns": turns,
        "context_length": context_length,
        "engine": engine,
    }


def table(figures: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    direct: Phase = figures["direct"]
    proxy: Phase = figures["proxy"]
    rows = [
        ("requests", f"{len(direct.latencies):,}", f"{len(proxy.latencies):,}"),
        ("latency p50 (ms)", f"{direct.pct(0.5):.1f}", f"{proxy.pct(0.5):.1f}"),
        ("latency p99 (ms)", f"{direct.pct(0.99):.1f}", f"{proxy.pct(0.99):.1f}"),
        ("mean (ms)", f"{statistics.fmean(direct.latencies) * 1000:.1f}",
         f"{statistics.fmean(proxy.latencies) * 1000:.1f}"),
        ("throughput (req/s)", f"{len(direct.latencies) / direct.wall:.1f}",
         f"{len(proxy.latencies) / proxy.wall:.1f}"),
        ("upstream CPU per request (ms)",
         f"{1000 * direct.upstream_cpu / max(1, len(direct.latencies)):.2f}",
         f"{1000 * proxy.upstream_cpu / max(1, len(proxy.latencies)):.2f}"),
        ("errors", str(direct.errors), str(proxy.errors)),
        ("timed out", str(direct.timed_out), str(proxy.timed_out)),
    ]  # fmt: skip
    lines = [
        f"{figures['sessions']} concurrent sessions × {figures['turns']} turns, "
        f"engine {figures['engine']}, {figures['context_length']:,}-token window",
        "",
        "| | direct | through the proxy |",
        "|---|---:|---:|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        f"- added latency: p50 {proxy.pct(0.5) - direct.pct(0.5):+.1f} ms, "
        f"p99 {proxy.pct(0.99) - direct.pct(0.99):+.1f} ms",
        f"- proxy CPU per request (user + system, whole process): {figures['cpu_ms']:.2f} ms",
        f"- engine time per request (host + engine, from /metrics): {figures['engine_ms']:.2f} ms",
        f"- compactions: {figures['compactions']:.0f}; prompt tokens received "
        f"{figures['tokens_received']:,.0f}, sent upstream {figures['tokens_sent']:,.0f}",
        *_recall_lines(figures),
        f"- proxy peak RSS (VmHWM): {figures['rss_mib']:.0f} MiB",
        *(f"- error: {n} × {kind}" for kind, n in {**direct.kinds, **proxy.kinds}.items()),
        *(f"- proxy log: `{line[:300]}`" for line in figures.get("proxy_log", [])),
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, load average "
        f"{figures['load'][0]:.1f} at the start and {os.getloadavg()[0]:.1f} at the end, "
        f"nice {os.nice(0)} (every process of the benchmark inherits it)",
    ]
    return "\n".join(lines)


def _recall_lines(figures: dict[str, Any]) -> list[str]:
    direct: Phase = figures["direct"]
    proxy: Phase = figures["proxy"]
    if not proxy.recall_latencies:
        return ["- recall turns: none (--tool-share 0)"]
    share = figures["tool_share"]
    calls = figures["engine_tool_calls"]
    lines = [
        f"- recall turns ({len(proxy.recall_latencies):,}, {share:.0%} of the turns; "
        f"{calls:.0f} lcm_grep calls answered by the proxy): through the proxy p50 "
        f"{proxy.pct(0.5, recall=True):.1f} ms, p99 {proxy.pct(0.99, recall=True):.1f} ms; "
        f"direct p50 {direct.pct(0.5, recall=True):.1f} ms, p99 {direct.pct(0.99, recall=True):.1f}"
        " ms",
    ]
    if calls:
        lines.append(
            f"- added latency of a recall turn (the engine round: a second upstream call and "
            f"the search): p50 {proxy.pct(0.5, recall=True) - direct.pct(0.5, recall=True):+.1f}"
            f" ms, p99 {proxy.pct(0.99, recall=True) - direct.pct(0.99, recall=True):+.1f} ms"
        )
    else:
        lines.append("- this engine offers no tool: recall turns are answered directly")
    return lines


def run(
    sessions: int = 50,
    turns: int = 40,
    *,
    context_length: int = 4_000,
    engines: tuple[str, ...] = ("lcm", "compressor"),
    timeout: float = 900.0,
    tool_share: float = 0.1,
) -> str:
    """The benchmark's tables (``benchmarks/run_all.py`` calls it); raises when anything erred."""
    results = measure(
        sessions,
        turns,
        context_length=context_length,
        engines=engines,
        timeout=timeout,
        tool_share=tool_share,
    )
    # One session alone: what the proxy adds to a request when nothing queues behind it.
    alone = measure(
        1, turns, context_length=context_length, engines=engines, timeout=timeout, tool_share=0.0
    )
    text = "\n\n".join([*(table(figures) for figures in results), _alone_table(alone), _INCLUDES])
    if _failed(results) or _failed(alone):
        raise RuntimeError("the serve benchmark had errors or timed out:\n" + text)
    return text


_INCLUDES = (
    "What the figures include: a latency is the wall time from sending a request to the "
    "parsed answer, over loopback, with an upstream that answers at once (a real model's "
    "seconds come on top, and make the proxy's share smaller). Added latency is through "
    "the proxy minus direct: the extra HTTP hop, the session lock, ingest, compaction, the "
    "engine's view and re-serialisation, and under load the time a request waits behind the "
    "others in the proxy's one process (at 50 concurrent sessions that queue is most of it: "
    "the proxy's CPU per request times the requests ahead). The proxy's CPU per request is "
    "the cost that does not depend on the load. Recall turns add a second upstream call and "
    "an archive search. No streaming in this load."
)


def _alone_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "One session alone (1 × the same turns, no recall turns): no queue in the proxy.",
        "",
        "| engine | direct p50 / p99 ms | proxy p50 / p99 ms | added p50 / p99 ms "
        "| proxy CPU per request ms | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for figures in results:
        direct: Phase = figures["direct"]
        proxy: Phase = figures["proxy"]
        added = (proxy.pct(0.5) - direct.pct(0.5), proxy.pct(0.99) - direct.pct(0.99))
        lines.append(
            f"| {figures['engine']} | {direct.pct(0.5):.1f} / {direct.pct(0.99):.1f} "
            f"| {proxy.pct(0.5):.1f} / {proxy.pct(0.99):.1f} "
            f"| {added[0]:+.1f} / {added[1]:+.1f} "
            f"| {figures['cpu_ms']:.2f} | {direct.errors + proxy.errors} |"
        )
    return "\n".join(lines)


def _failed(results: list[dict[str, Any]]) -> bool:
    return any(f["proxy"].errors or f["direct"].errors or f["proxy"].timed_out for f in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--context-length", type=int, default=4_000)
    parser.add_argument("--engines", default="lcm,compressor", help="comma-separated")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase")
    parser.add_argument(
        "--tool-share", type=float, default=0.1, help="share of turns that call lcm_grep first"
    )
    args = parser.parse_args(argv)
    results = measure(
        args.sessions,
        args.turns,
        context_length=args.context_length,
        engines=tuple(e.strip() for e in args.engines.split(",") if e.strip()),
        timeout=args.timeout,
        tool_share=args.tool_share,
    )
    print("\n\n".join(table(figures) for figures in results))
    return 1 if _failed(results) else 0


if __name__ == "__main__":
    sys.exit(main())
