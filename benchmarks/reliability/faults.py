"""The summariser fault matrix: every way a summary model fails, through both engines.

Issue 11 measured what an always-failing summariser cost an agent: lcm made 93
HTTP requests in 12 turns where the compressor made 3, slept on
``Retry-After`` 62 times (434 s blocked), and a summariser that timed out cost
49 s against 1.6 s. Both engines now share
:mod:`contextengine.failure_policy` (the cooldown ladder, the wait cap), and
this script checks what that gives, fault by fault.

For each *fault* (:data:`FAULTS`: a healthy baseline, 401, 403, a 429 that
says the quota is spent, a 429 with a short ``Retry-After``, a 429 with a
``Retry-After`` beyond the wait cap, 500, 503, a timeout, a dropped
connection, malformed JSON, an empty answer, a summary longer than its input,
every other request failing, a slow summariser within the cap) and each
engine (``compressor``; ``lcm`` on a temporary SQLite file), one session of
``turns`` agent turns runs through a real :class:`~contextengine.ContextHost`
at a small context window, so that compaction is due every few turns. The
summariser is a real :class:`~contextengine.OpenAICompatibleSummarizer`
talking HTTP to a real :class:`~contextengine.testing.ScriptedOpenAIServer`
on 127.0.0.1, whose script serves the fault to every request (the
intermittent fault: to every other one). The agent's own model is played by
the loop: its usage is the exact token count of the request the host built.

Per row: HTTP requests the summariser made; compactions (with the model's
summary, degraded by a failure, attempted but unchanged) and skipped ones; the events by
level and reason; wall seconds spent inside the host's calls, also beyond the
healthy row of the same engine, and the longest single call; turns whose
requests the window guarantee had to cut, and the messages it left out
(unsummarised messages a request did not carry); requests over the window;
messages lost; and events that report a failure as a success. A message is *lost* when

- (both engines) the latest user message is not verbatim in a request;
- (compressor) one of the last ``protect_last_n`` (6) messages handed to the
  host, the tail it promises to keep, is not in a request (its marker word;
  an excerpt made by the window guarantee counts as present). Older user
  messages are summarised by design, not lost;
- (lcm) a message of the session is not in the archive at the end.

An event *misreports* when a compaction that fell back, changed nothing, or
whose last summariser request was served a fault has level ``info`` or no
``reason``, when an ``auth`` event is not at level ``error``, or when a
``reason`` is none of the documented causes (a false alarm).

Time: the client timeout is :data:`CLIENT_TIMEOUT_S` and the engines'
``max_summary_wait_s`` :data:`MAX_WAIT_S` (defaults 60 s and 60 s, scaled down
so the matrix runs in minutes). Cooldowns (60, 300, 900 s) are timed by the
engines' ``clock``, here monotonic time plus :data:`TURN_S` seconds per
turn: the time a real turn spends in its model and tools, which this loop
does not spend, so a 30-turn session spans 15 minutes of agent time and the
ladder is exercised honestly.

Run: ``PYTHONPATH=src python benchmarks/reliability/faults.py [--quick]
[--turns N] [--output docs/reliability.md]`` (``--output`` rewrites the
figures between the markers of that page's "Summariser faults" section; without
it they are printed). Exits 1 when a message is lost, a request is over the
window, or a failure is reported as a success.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine import ContextHost, OpenAICompatibleSummarizer, SQLiteStore, load_engine
from contextengine.engine import ContextEngine
from contextengine.events import CompactionEvent, Event, HostEvent
from contextengine.failure_policy import FAILURE_CAUSES
from contextengine.testing import ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens

__all__ = ["ENGINES", "FAULTS", "QUICK_FAULTS", "Fault", "Row", "main", "run", "run_row"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "Summariser faults"

NAME = "faults"


# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

Message = dict[str, Any]

ENGINES = ("compressor", "lcm")
MODEL = "gpt-4o"
CONTEXT_LENGTH = 4_000
#: The summariser's per-request timeout (default 60 s).
CLIENT_TIMEOUT_S = 1.0
#: ``max_summary_wait_s`` of both engines: one compaction's wait, retries included.
MAX_WAIT_S = 3.0
#: Agent time a turn stands for on the engines' cooldown clock.
TURN_S = 30.0
#: The compressor's ``protect_last_n``: the tail it promises to keep verbatim.
PROTECTED_TAIL = 6
#: Requests scripted per row; a row that makes more is reported, never hidden.
SCRIPTED = 400

#: The reasons a CompactionEvent may give (events.py).
_CAUSES = frozenset((*FAILURE_CAUSES, "engine_error"))

_SUMMARY = (
    "## Goal\nReview the reports one by one.\n## Progress\nSeveral reports were read and "
    "found fine.\n## Next\nContinue with the next report."
)


@dataclass(frozen=True)
class Fault:
    """One way the summary model fails: what the server serves to request ``k``."""

    name: str
    #: What the row shows, for the table.
    what: str
    #: Queues what request ``k`` gets on ``server``; returns True when that is a usable summary.
    serve: Callable[[ScriptedOpenAIServer, int], bool]


def _error(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    def serve(server: ScriptedOpenAIServer, k: int) -> bool:
        server.add_error(status, body, headers)
        return False

    return serve


def _reply(content: str | None, *, delay: float = 0.0, good: bool = True) -> Any:
    def serve(server: ScriptedOpenAIServer, k: int) -> bool:
        if delay:
            server.add_delay(delay)
        server.add_reply(content)
        return good

    return serve


def _drop(server: ScriptedOpenAIServer, k: int) -> bool:
    server.add_drop()
    return False


def _malformed(server: ScriptedOpenAIServer, k: int) -> bool:
    server.add_malformed('{"id": "chatcmpl-1", "choices": [{"message": {"content": "## Go')
    return False


def _every_other(server: ScriptedOpenAIServer, k: int) -> bool:
    if k % 2 == 0:
        server.add_error(503)
        return False
    server.add_reply(_SUMMARY)
    return True


_QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "code": "insufficient_quota",
    }
}

FAULTS: tuple[Fault, ...] = (
    Fault("healthy", "every request answered with a short summary", _reply(_SUMMARY)),
    Fault("401", "401 invalid API key", _error(401)),
    Fault("403", "403 permission denied", _error(403)),
    Fault("429 quota", "429 `insufficient_quota` (billing)", _error(429, _QUOTA)),
    Fault("429 short", "429, `Retry-After: 1`", _error(429, headers={"Retry-After": "1"})),
    Fault(
        "429 long",
        "429, `Retry-After: 600` (beyond the cap)",
        _error(429, None, {"Retry-After": "600"}),
    ),
    Fault("500", "500 internal error", _error(500)),
    Fault("503", "503 unavailable", _error(503)),
    Fault(
        "timeout",
        "answers after 10 s (client timeout 1 s)",
        _reply(_SUMMARY, delay=10.0, good=False),
    ),
    Fault("drop", "connection closed without an answer", _drop),
    Fault("malformed", "200 with truncated JSON", _malformed),
    Fault("empty", '200 with `"content": ""`', _reply("", good=False)),
    Fault("over budget", "a 6,000-word summary", _reply("summary " * 6_000, good=False)),
    Fault("intermittent", "every other request 503", _every_other),
    Fault("slow", "answers after 0.6 s (within timeout and cap)", _reply(_SUMMARY, delay=0.6)),
)
#: The CI subset: the baseline, auth, a rate limit beyond the cap, a timeout and a drop.
QUICK_FAULTS = ("healthy", "401", "429 long", "timeout", "drop")


# ---------------------------------------------------------------- the session


def turn(i: int) -> list[Message]:
    """Turn ``i``: a user request, a tool call, its result and the answer, each with a marker."""
    call = f"call_{i}"
    return [
        {
            "role": "user",
            "content": f"[u{i}] Please read report R-{i} and check section {i % 7} for "
            f"regressions in module m{i}; " + f"note finding {i}-" * 30,
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": f'{{"path": "r{i}.txt"}}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call,
            "content": f"[t{i}] report R-{i}\n"
            + "".join(f"line {n}: metric m{i}.{n} = {n * i % 97}\n" for n in range(30)),
        },
        {"role": "assistant", "content": f"[a{i}] Report R-{i} is fine; section {i % 7} holds."},
    ]


def _marker(message: Message) -> str:
    """The word that identifies a message of :func:`turn` (or the system prompt) in a request."""
    content = message.get("content")
    if isinstance(content, str) and content.startswith("["):
        return content[: content.index("]") + 1]
    calls = message.get("tool_calls") or []
    if calls and str(calls[0].get("id", "")).startswith("call_"):
        return f"r{calls[0]['id'].split('_')[1]}.txt"  # the call's arguments
    return ""  # a summary or another message the engine wrote


def _text(messages: Sequence[Message]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        for call in message.get("tool_calls") or []:
            parts.append(str(call["function"]["arguments"]))
    return "\n".join(parts)


class _Clock:
    """Monotonic time plus the agent time of the turns played so far."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@dataclass
class Row:
    """What one fault did to one engine over one session."""

    fault: str
    engine: str
    turns: int
    requests: int = 0
    request_turns: list[int] = field(default_factory=list)
    compacted: int = 0
    degraded: int = 0
    unchanged: int = 0
    skipped: int = 0
    events: Counter[tuple[str, str]] = field(default_factory=Counter)
    hook_s: float = 0.0
    max_call_s: float = 0.0
    window_cuts: int = 0
    left_out: int = 0
    over_window: int = 0
    lost: int = 0
    misreported: int = 0
    status: str = ""
    problems: list[str] = field(default_factory=list)


def _engine(name: str, summarizer: OpenAICompatibleSummarizer, clock: _Clock, store: Path) -> Any:
    options: dict[str, Any] = {
        "context_length": CONTEXT_LENGTH,
        "summarizer": summarizer,
        "clock": clock,
        "max_summary_wait_s": MAX_WAIT_S,
    }
    if name == "lcm":
        options["store"] = str(store)
    return load_engine(name, strict=True, **options)


def _judge_event(event: CompactionEvent, last_request_good: bool | None) -> str | None:
    """Why ``event`` misreports a failure as a success, or None when it tells the truth."""
    failed = event.fallback_used or event.aborted or last_request_good is False
    if failed and (not event.reason or event.level == "info"):
        return f"{event.phase} event at level {event.level!r}, reason {event.reason!r}"
    if event.reason == "auth" and event.level != "error":
        return f"auth event at level {event.level!r}"
    if event.reason and event.reason not in _CAUSES:
        return f"{event.phase} event with the undocumented reason {event.reason!r}"
    return None


def run_row(fault: Fault, engine_name: str, turns: int) -> Row:
    """One session of ``turns`` turns with ``fault`` served to ``engine_name``'s summariser."""
    row = Row(fault.name, engine_name, turns)
    good: list[bool] = []
    clock = _Clock()
    with (
        tempfile.TemporaryDirectory() as tmp,
        ScriptedOpenAIServer(responder=lambda body: {"content": _SUMMARY}) as server,
    ):
        if fault.name != "healthy":
            good = [fault.serve(server, k) for k in range(SCRIPTED)]
        summarizer = OpenAICompatibleSummarizer(
            base_url=server.base_url, api_key="sk-test", model=MODEL, timeout=CLIENT_TIMEOUT_S
        )
        store = Path(tmp) / "archive.db"
        engine: ContextEngine = _engine(engine_name, summarizer, clock, store)
        seen = 0  # requests already attributed to an earlier compaction

        def observe(event: Event) -> None:
            nonlocal seen
            if isinstance(event, HostEvent):
                row.window_cuts += event.kind == "window_cut"
                return
            row.events[(event.level, event.reason or "ok")] += 1
            if event.aborted and not event.passes:
                row.skipped += 1
            elif event.aborted:
                row.unchanged += 1
            elif event.fallback_used or event.reason:
                row.degraded += 1
            else:
                row.compacted += 1
            now = len(server.requests)
            last_good = None
            if now > seen:
                last_good = good[now - 1] if now - 1 < len(good) else True
            seen = now
            problem = _judge_event(event, last_good)
            if problem:
                row.misreported += 1
                row.problems.append(problem)

        host = ContextHost(engine, model=MODEL, context_length=CONTEXT_LENGTH, observers=[observe])

        def timed(fn: Callable[..., Any], *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent = time.perf_counter() - started
                row.hook_s += spent
                row.max_call_s = max(row.max_call_s, spent)

        usage: dict[str, int] = {}
        left_out: set[str] = set()

        def send(history: list[Message], latest_user: Message) -> None:
            request = timed(host.prepare_request, history)
            if count_message_tokens(request, MODEL) > CONTEXT_LENGTH:
                row.over_window += 1
            text = _text(request)
            for message in host.history:
                marker = _marker(message)
                if marker and marker not in text:
                    left_out.add(marker)
            if str(latest_user["content"]) not in text:
                row.lost += 1
                row.problems.append(f"latest user message {_marker(latest_user)} not sent")
            if engine_name == "compressor":
                for message in history[-PROTECTED_TAIL:]:
                    if _marker(message) not in text:
                        row.lost += 1
                        row.problems.append(f"tail message {_marker(message)} not sent")
            usage.update(prompt_tokens=count_message_tokens(request, MODEL), completion_tokens=20)
            timed(host.record_response, dict(usage))

        session = f"faults-{fault.name}-{engine_name}"
        all_messages: list[Message] = []
        try:
            timed(host.start_session, session)
            history: list[Message] = [{"role": "system", "content": "[s] You review reports."}]
            for i in range(turns):
                before = len(server.requests)
                user, call, result, answer = turn(i)
                all_messages += [user, call, result, answer]
                history = [*history, user]
                send(history, user)
                history = [*host.history, call, result]
                history = timed(host.after_tool_calls, history)
                send(history, user)
                history = [*host.history, answer]
                timed(host.end_turn, history, dict(usage))
                if len(server.requests) > before:
                    row.request_turns.append(i + 1)
                clock.offset += TURN_S
            timed(host.end_session, history)
            status = engine.get_status()
            state = status.get("automatic_compaction", "?")
            cause = status.get("last_failure_cause")
            resumes = status.get("automatic_compaction_resumes_in_s")
            row.status = f"{state}" + (f", last: {cause}" if cause else "")
            row.status += f", resumes in {resumes:.0f} s" if resumes else ""
        finally:
            row.requests = len(server.requests)
            row.left_out = len(left_out)
            summarizer.close()
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        if engine_name == "lcm":
            row.lost += _missing_from_archive(store, session, all_messages, row.problems)
    if row.requests >= SCRIPTED:
        row.problems.append(f"{row.requests} requests: more than the {SCRIPTED} scripted")
    return row


def _missing_from_archive(
    path: Path, session: str, messages: list[Message], problems: list[str]
) -> int:
    """Messages of the session absent from the lcm archive, read back by a new store."""
    store = SQLiteStore(path)
    try:
        conversation = store.open_conversation(session)
        archived = _text([stored.message for stored in store.get_messages(conversation)])
    finally:
        store.close()
    missing = 0
    for message in messages:
        content = message.get("content")
        expected = content if isinstance(content, str) else _marker(message)
        if expected not in archived:
            missing += 1
            problems.append(f"{_marker(message)} missing from the archive")
    return missing


# ---------------------------------------------------------------- the report


def _events(counts: Counter[tuple[str, str]]) -> str:
    parts = []
    for level in ("error", "warning", "info"):
        reasons = sorted((reason, n) for (lv, reason), n in counts.items() if lv == level)
        if reasons:
            parts.append(f"{level}: " + ", ".join(f"{reason} {n}" for reason, n in reasons))
    return "; ".join(parts) or "–"


def _turns(turns: list[int]) -> str:
    return ", ".join(map(str, turns)) if turns else "–"


def table(rows: Sequence[Row]) -> list[str]:
    """The matrix as markdown lines."""
    baseline = {r.engine: r.hook_s for r in rows if r.fault == "healthy"}
    what = {f.name: f.what for f in FAULTS}
    lines = [
        "| fault | engine | HTTP requests | at turns"
        " | compactions ok / degraded / unchanged / skipped | events (level: reason n)"
        " | s in host calls | beyond healthy | longest call s"
        " | window cuts | left out | over window | lost | misreported | status at the end |",
        "|---|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        extra = r.hook_s - baseline[r.engine] if r.engine in baseline else float("nan")
        lines.append(
            f"| {r.fault}: {what[r.fault]} | {r.engine} | {r.requests} | {_turns(r.request_turns)}"
            f" | {r.compacted} / {r.degraded} / {r.unchanged} / {r.skipped} | {_events(r.events)}"
            f" | {r.hook_s:.2f} | {extra:+.2f} | {r.max_call_s:.2f} | {r.window_cuts}"
            f" | {r.left_out} | {r.over_window} | {r.lost} | {r.misreported} | {r.status} |"
        )
    return lines


def failed(rows: Iterable[Row]) -> bool:
    """True when an invariant broke: a message lost, a request over the window, a misreport."""
    return any(r.lost or r.over_window or r.misreported for r in rows)


def run(
    quick: bool = False,
    turns: int | None = None,
    faults: Sequence[str] | None = None,
    engines: Sequence[str] = ENGINES,
) -> tuple[str, list[Row]]:
    """The matrix as markdown, and its rows."""
    started = time.perf_counter()
    turns = turns or (8 if quick else 30)
    names = list(faults or (QUICK_FAULTS if quick else [f.name for f in FAULTS]))
    chosen = [f for f in FAULTS if f.name in names]
    rows = [run_row(fault, engine, turns) for fault in chosen for engine in engines]
    totals = Counter({"lost": 0, "over": 0, "mis": 0})
    for r in rows:
        totals.update({"lost": r.lost, "over": r.over_window, "mis": r.misreported})
    lines = [
        f"#### {len(chosen)} faults × {len(engines)} engines, {turns} turns each",
        "",
        f"{totals['lost']} messages lost, {totals['over']} requests over the window,"
        f" {totals['mis']} failures reported as successes. Context {CONTEXT_LENGTH:,} tokens"
        f" (threshold 75%), client timeout {CLIENT_TIMEOUT_S:g} s, `max_retries` 2,"
        f" `max_summary_wait_s` {MAX_WAIT_S:g} s, {TURN_S:g} s of agent time per turn on the"
        f" cooldown clock ({turns * TURN_S / 60:g} min in all).",
        "",
        *table(rows),
        "",
        "What each column counts: *HTTP requests*, every request the summariser's server"
        " received, retries included, and *at turns* the turns (1-based) that made them;"
        " compactions *ok*, those that used the model's summary; *degraded*, those that changed"
        " the context with a failure reason (the offline fallback summary; for lcm after an"
        " auth failure, a view cut to the threshold with nothing summarised, the archive"
        " keeping every message); *unchanged*, attempts that left the history as it was"
        " (compressor auth aborts); *skipped*, compactions due but declined (cooldown,"
        " anti-thrash), reported once per turn; *events*, every `CompactionEvent` by level"
        " and `reason` (`ok`: none); *s in host calls*, wall seconds inside `prepare_request`,"
        " `record_response`, `after_tool_calls`, `end_turn` and the session hooks, and"
        " *beyond healthy* the same minus the healthy row's; *longest call*, the longest single"
        " host call (the wait cap bounds what a compaction waits on the summariser); *window"
        " cuts*, turns in which the window guarantee cut or left out messages of a request"
        " (automatic compaction paused by a cooldown); *left out*, distinct messages still"
        " in the host's history (not summarised) that a request did not carry at all, whole"
        " or as an excerpt; *lost* and *misreported* as defined"
        " above; *status*, `get_status()` after the session (`resumes in` counts agent time).",
    ]
    problems = [f"{r.fault}/{r.engine}: {p}" for r in rows for p in r.problems]
    if problems:
        lines += ["", "Problems:", "", *(f"- {p}" for p in problems[:40])]
    lines += ["", f"_{time.perf_counter() - started:.1f} s in all._"]
    return "\n".join(lines), rows


def _figures(body: str, quick: bool, turns: int | None) -> str:
    flags = (" --quick" if quick else "") + (f" --turns {turns}" if turns else "")
    return _page.figures(NAME, flags, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 turns, 5 faults")
    parser.add_argument("--turns", type=int, default=None, help="turns per session")
    parser.add_argument("--output", default="-", help="page whose figures to rewrite ('-': print)")
    args = parser.parse_args(argv)
    body, rows = run(quick=args.quick, turns=args.turns)
    if args.output == "-":
        print(_figures(body, args.quick, args.turns))
    else:
        figures = _figures(body, args.quick, args.turns)
        _page.write_figures(Path(args.output), NAME, SECTION, figures)
        print(f"wrote the fault figures of {args.output}", file=sys.stderr)
    return 1 if failed(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
