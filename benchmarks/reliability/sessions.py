"""Generated sessions: hypothesis drives whole agent sessions through ContextHost, both engines.

Each generated session is a system prompt, a context length and a list of
turns. A turn is a user message followed by the model's replies: plain text,
thinking-only messages (``content: None`` with ``reasoning_content``), and
tool calls (one to three in parallel) whose results come back in any order,
some of them large log outputs, some lost (a call never answered), sometimes
followed by an orphan result (a result answering no call). Texts mix words,
paths, arbitrary unicode (emoji, CJK, combining marks, control characters; no
lone surrogates: see "Not covered" in docs/reliability.md), and empty strings. The
context lengths (1,500 to 32,000 tokens) are small enough that both engines
compact and the window guarantee cuts; now and then a user message is larger
than the window on its own, so the host must refuse with
``ContextOverflowError``.

Every session runs through both engines, ``compressor`` and ``lcm`` on an
SQLite ``:memory:`` store (an invariant check, not a speed benchmark), with
the offline ``DeterministicSummarizer``, driven as an agent loop drives the
host: ``prepare_request(history, tools=...)`` before each reply,
``record_response`` with the usage the provider would report (the prompt's
exact tokens), ``after_tool_calls`` once the results are appended,
``end_turn`` when a reply calls no tool, ``end_session`` at the end. The
tools offered are a ``bash`` schema plus the engine's own
(``host.tool_schemas()``: lcm's ``lcm_grep``...), counted in the window.

Invariants, checked on every request the host returns:

- **valid**: ``validate_messages(request)`` passes;
- **pairs**: every tool call is answered right after its message and every
  result answers a call;
- **system**: ``request[0]`` is the caller's system message, its content
  byte-identical (UTF-8) to the caller's;
- **latest user**: the latest user message the caller appended is in the
  request, whole;
- **window**: the request's tokens (exact, the model's tokenizer, plus reply
  priming) plus the tool schemas' are within the context length;
- **overflow cause**: ``ContextOverflowError`` is raised only when the system
  prompt, the tool schemas and the latest user message alone exceed the
  window (computed here independently from the caller's messages); the agent
  then ends the session, as nothing can be sent;
- **no other exception** from any host call (``prepare_request``,
  ``record_response``, ``after_tool_calls``, ``end_turn``, ``start_session``,
  ``end_session``): the host documents ``ContextOverflowError`` only.

Hypothesis generates only (no shrinking, no example database, no deadline);
sessions are drawn in chunks of ``--chunk``, chunk ``k`` seeded with
``seed + k``, so a run is reproducible from the seed printed with the table.
A violation is counted, the first example of each kind kept (printed below the
table), and the script exits 1.

Run: ``PYTHONPATH=src python benchmarks/reliability/sessions.py [--quick]
[--sessions 100000] [--seed 20261201] [--budget SECONDS] [--output
docs/reliability.md]`` (``--output`` rewrites the figures between the markers
of that page's "Generated sessions (hypothesis)" section). ``--budget`` stops
at the end of the chunk that passes it; the table says how many sessions ran.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from contextengine import (
    CompactionEvent,
    ContextHost,
    ContextOverflowError,
    DeterministicSummarizer,
    HostEvent,
    load_engine,
    validate_messages,
)
from contextengine.messages import message_text
from contextengine.tokens import REPLY_PRIMING_TOKENS, message_tokens
from contextengine.window import count_schemas

__all__ = [
    "ENGINES",
    "INVARIANTS",
    "GeneratedSession",
    "Stats",
    "main",
    "run",
    "run_session",
    "sessions",
    "tool_pairs_intact",
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "Generated sessions (hypothesis)"
NAME = "sessions"
# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

Message = dict[str, Any]

ENGINES = ("compressor", "lcm")
MODEL = "gpt-4o"
INVARIANTS = ("valid", "pairs", "system", "latest user", "window", "overflow cause", "exception")
SESSIONS = 100_000
QUICK_SESSIONS = 200
CHUNK = 500
SEED = 20261201
CONTEXT_LENGTHS = (1_500, 3_000, 6_000, 12_000, 32_000)

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


# ---------------------------------------------------------------- the generated session


@dataclass(frozen=True)
class Call:
    """One tool call of a reply and what becomes of its result."""

    name: str
    arguments: str
    output: str
    #: False when the result is lost: the call is never answered.
    answered: bool


@dataclass(frozen=True)
class Reply:
    """One model reply: text, thinking only, or tool calls (then the turn goes on)."""

    kind: str  # "text", "thinking" or "calls"
    text: str | None = None
    reasoning: str = ""
    calls: tuple[Call, ...] = ()
    #: Results are appended in this order (indices into ``calls``).
    order: tuple[int, ...] = ()
    #: An orphan result appended after the group (answers no call), or None.
    orphan: str | None = None


@dataclass(frozen=True)
class Turn:
    """A user message and the replies to it; only the last reply calls no tool."""

    user: str | list[dict[str, Any]]
    replies: tuple[Reply, ...]


@dataclass(frozen=True)
class GeneratedSession:
    system: str
    context_length: int
    turns: tuple[Turn, ...]


_WORDS = (
    "fix",
    "the",
    "build",
    "src/app.py",
    "tests/test_api.py",
    "Traceback",
    "ERR_42",
    "pytest",
    "0xdeadbeef",
    "ok",
    "retry",
    "config/pool.yaml",
    "résumé",
    "日本語",
    "🙂",
    "null",
    "{}",
    '"quoted"',
    "\\n",
    "def",
)
_words = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=120).map(" ".join)
# Any unicode but lone surrogates (out of scope: docs/reliability.md, "Not covered").
_unicode = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
_short = st.one_of(_words, _words, _words, _unicode, st.just(""))

_LOG_LEVELS = ("INFO", "DEBUG", "WARN", "ERROR")


def log_text(chars: int, salt: int) -> str:
    """``chars`` characters of realistic log lines, deterministic in ``salt``."""
    rng = random.Random(salt)
    lines: list[str] = []
    size = 0
    n = 0
    while size < chars:
        n += 1
        line = (
            f"2026-12-01T13:{n // 60 % 60:02d}:{n % 60:02d}.{rng.randrange(1000):03d}Z "
            f"{rng.choice(_LOG_LEVELS)} worker-{rng.randrange(8)} "
            f"req={rng.getrandbits(32):08x} path=/api/v2/items/{rng.randrange(10**6)} "
            f"status={rng.choice((200, 200, 200, 404, 500, 503))} "
            f"latency_ms={rng.randrange(1, 5000)}"
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:chars]


_LOG_POOL_CHARS = 400_000
_log_pool: list[str] = []


def log_slice(chars: int, offset: int) -> str:
    """``chars`` characters of one shared log, from line ``offset`` on (fast to draw)."""
    if not _log_pool:
        _log_pool.append(log_text(_LOG_POOL_CHARS, 0))
    pool = _log_pool[0]
    start = pool.find("\n", offset % (_LOG_POOL_CHARS - chars)) + 1
    return pool[start : start + chars]


@st.composite
def _tool_output(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 3)) == 0:
        # Large: up to ~20k tokens, often over the whole window at small lengths.
        return log_slice(draw(st.integers(2_000, 80_000)), draw(st.integers(0, 2**31)))
    return draw(_short)


@st.composite
def _reply(draw: st.DrawFn, *, last: bool) -> Reply:
    kind = draw(st.sampled_from(("text", "text", "thinking"))) if last else "calls"
    if kind == "text":
        return Reply("text", text=draw(_short), reasoning=draw(st.sampled_from(("", "hmm"))))
    if kind == "thinking":
        return Reply("thinking", reasoning=draw(_words))
    count = draw(st.integers(1, 3))
    calls = tuple(
        Call(
            name=draw(st.sampled_from(("bash", "read_file"))),
            arguments=json.dumps({"command": draw(_short)}, ensure_ascii=False),
            output=draw(_tool_output()),
            answered=draw(st.integers(0, 7)) > 0,
        )
        for _ in range(count)
    )
    order = tuple(draw(st.permutations(range(count))))
    orphan = draw(_short) if draw(st.integers(0, 9)) == 0 else None
    return Reply(
        "calls", text=draw(st.one_of(st.none(), _short)), calls=calls, order=order, orphan=orphan
    )


@st.composite
def _turn(draw: st.DrawFn, context_length: int) -> Turn:
    pick = draw(st.integers(0, 39))
    user: str | list[dict[str, Any]]
    # A middle value: hypothesis draws the ends of a range far more often than 1 in 40.
    if pick == 20:
        # Larger than the window on its own: the host must refuse (documented).
        user = log_slice(context_length * 5, draw(st.integers(0, 2**31)))
    elif pick <= 2:
        user = [{"type": "text", "text": draw(_short)}]
    else:
        user = draw(_short)
    calls = draw(st.integers(0, 4))
    replies = (*(draw(_reply(last=False)) for _ in range(calls)), draw(_reply(last=True)))
    return Turn(user, replies)


@st.composite
def sessions(draw: st.DrawFn, context_lengths: Sequence[int] = CONTEXT_LENGTHS) -> GeneratedSession:
    """A whole agent session; see the module docstring for what it holds."""
    context_length = draw(st.sampled_from(tuple(context_lengths)))
    system = draw(st.one_of(_words, _unicode, st.just("You are a coding agent. Work in /srv/app.")))
    turns = tuple(draw(_turn(context_length)) for _ in range(draw(st.integers(1, 8))))
    return GeneratedSession(system=system, context_length=context_length, turns=turns)


def features(session: GeneratedSession) -> set[str]:
    """What a session holds, for the coverage line of the figures."""
    found: set[str] = set()
    for turn in session.turns:
        if isinstance(turn.user, list):
            found.add("user text parts")
        elif len(turn.user) > session.context_length * 3:
            found.add("user message over the window")
        elif turn.user == "":
            found.add("empty user message")
        elif not turn.user.isascii():
            found.add("non-ASCII user text")
        for reply in turn.replies:
            if reply.kind == "thinking":
                found.add("thinking-only reply")
            if len(reply.calls) > 1:
                found.add("parallel calls")
            if any(not call.answered for call in reply.calls):
                found.add("lost result")
            if reply.orphan is not None:
                found.add("orphan result")
            if any(len(call.output) >= 2_000 for call in reply.calls):
                found.add("large tool output")
            if reply.order != tuple(sorted(reply.order)):
                found.add("results out of order")
    return found


FEATURES = (
    "parallel calls",
    "results out of order",
    "lost result",
    "orphan result",
    "large tool output",
    "thinking-only reply",
    "user text parts",
    "empty user message",
    "non-ASCII user text",
    "user message over the window",
)


# ---------------------------------------------------------------- the invariants


def tool_pairs_intact(messages: Sequence[Message]) -> bool:
    """Every tool call is answered right after its message, every result answers a call."""
    pending: set[str] = set()
    for msg in messages:
        if msg.get("role") == "tool":
            if msg.get("tool_call_id") not in pending:
                return False
            pending.discard(str(msg.get("tool_call_id")))
            continue
        if pending:
            return False
        for tool_call in msg.get("tool_calls") or []:
            pending.add(str(tool_call["id"]))
    return not pending


_schemas_counted: dict[str, int] = {}


def _schema_tokens(tools: list[dict[str, Any]]) -> int:
    """Tokens of the tool schemas; the same few lists come back every session."""
    key = json.dumps(tools, sort_keys=True)
    if key not in _schemas_counted:
        _schemas_counted[key] = count_schemas(tools, MODEL)
    return _schemas_counted[key]


def _request_tokens(request: Sequence[Message]) -> int:
    return sum(message_tokens(m, MODEL) for m in request) + REPLY_PRIMING_TOKENS


@dataclass
class Stats:
    """What one engine did over all sessions."""

    engine: str
    sessions: int = 0
    requests: int = 0
    compactions: int = 0
    window_cuts: int = 0
    overflows: int = 0
    hook_failures: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    #: The first example of each violated invariant: what went wrong, and the seed.
    examples: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def violate(self, invariant: str, detail: str) -> None:
        self.violations[invariant] += 1
        self.examples.setdefault(invariant, detail[:2_000])


_HOOK_FAILURES = ("hook_failed", "select_context_failed")


def _check(
    stats: Stats,
    request: list[Message],
    *,
    system: Message,
    latest_user: Message,
    budget: int,
    tools_tokens: int,
    where: str,
) -> None:
    try:
        validate_messages(request)
    except Exception as exc:
        stats.violate("valid", f"{where}: {type(exc).__name__}: {exc}")
    if not tool_pairs_intact(request):
        stats.violate("pairs", f"{where}: roles {[m.get('role') for m in request]}")
    first = request[0] if request else {}
    same = (
        first.get("role") == "system"
        and isinstance(first.get("content"), str)
        and first["content"].encode("utf-8", "surrogatepass")
        == system["content"].encode("utf-8", "surrogatepass")
    )
    if not same:
        stats.violate("system", f"{where}: first message {json.dumps(first)[:300]}")
    # Exact, or merged: the compressor may put its summary ahead of the user's own
    # text in that message (summary.py ``place_summary``); the text stays whole.
    text = message_text(latest_user)
    if not any(m.get("role") == "user" and message_text(m).endswith(text) for m in request):
        stats.violate("latest user", f"{where}: {json.dumps(latest_user)[:300]}")
    tokens = _request_tokens(request) + tools_tokens
    if tokens > budget:
        stats.violate("window", f"{where}: {tokens:,} tokens > {budget:,}")


# ---------------------------------------------------------------- the agent loop


def _engine(name: str, context_length: int) -> Any:
    options: dict[str, Any] = {"store": ":memory:"} if name == "lcm" else {}
    return load_engine(
        name,
        context_length=context_length,
        model=MODEL,
        summarizer=DeterministicSummarizer(),
        **options,
    )


def _reply_message(reply: Reply, turn: int, step: int) -> Message:
    if reply.kind == "thinking":
        return {"role": "assistant", "content": None, "reasoning_content": reply.reasoning}
    message: Message = {"role": "assistant", "content": reply.text}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.kind == "calls":
        message["tool_calls"] = [
            {
                "id": f"call_{turn}_{step}_{k}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for k, call in enumerate(reply.calls)
        ]
    elif message["content"] is None:
        message["content"] = ""
    return message


def _results(reply: Reply, turn: int, step: int) -> list[Message]:
    out: list[Message] = []
    for k in reply.order:
        call = reply.calls[k]
        if call.answered:
            out.append(
                {"role": "tool", "tool_call_id": f"call_{turn}_{step}_{k}", "content": call.output}
            )
    if reply.orphan is not None:
        out.append(
            {"role": "tool", "tool_call_id": f"ghost_{turn}_{step}", "content": reply.orphan}
        )
    return out


def run_session(session: GeneratedSession, engine_name: str, stats: Stats, label: str) -> None:
    """Drive ``session`` through a ContextHost on ``engine_name``, checking every request."""
    started = time.process_time()
    engine = _engine(engine_name, session.context_length)
    compactions = 0

    def observe(event: Any) -> None:
        nonlocal compactions
        if isinstance(event, CompactionEvent) and not event.aborted and event.tokens_after:
            compactions += 1
        elif isinstance(event, HostEvent) and event.kind == "window_cut":
            stats.window_cuts += 1
        elif isinstance(event, HostEvent) and event.kind in _HOOK_FAILURES:
            # Swallowed by the host as documented, but an engine raising is worth seeing.
            stats.hook_failures += 1
            stats.examples.setdefault(f"hook failure ({event.kind})", str(event.message)[:2_000])

    budget = session.context_length
    system: Message = {"role": "system", "content": session.system}
    host = ContextHost(engine, model=MODEL, context_length=budget, observers=[observe])
    where = f"{label} {engine_name}"

    def guarded(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ContextOverflowError:
            raise
        except Exception as exc:
            stats.violate("exception", f"{where} {what}: {type(exc).__name__}: {exc}")
            raise _Stop from exc

    try:
        guarded("start_session", host.start_session, f"gen-{label}")
        tools = [BASH_SCHEMA, *host.tool_schemas()]
        tools_tokens = _schema_tokens(tools)
        history: list[Message] = [system]
        for t, turn in enumerate(session.turns):
            latest_user: Message = {"role": "user", "content": turn.user}
            history.append(latest_user)
            for s, reply in enumerate(turn.replies):
                at = f"{where} turn {t} reply {s}"
                try:
                    request = guarded("prepare_request", host.prepare_request, history, tools=tools)
                except ContextOverflowError as exc:
                    stats.overflows += 1
                    floor = message_tokens(system, MODEL) + message_tokens(latest_user, MODEL)
                    if floor + REPLY_PRIMING_TOKENS + tools_tokens <= budget:
                        stats.violate("overflow cause", f"{at}: {exc} (floor {floor:,})")
                    raise _Stop from exc
                stats.requests += 1
                _check(
                    stats,
                    request,
                    system=system,
                    latest_user=latest_user,
                    budget=budget,
                    tools_tokens=tools_tokens,
                    where=at,
                )
                history = host.history
                prompt = _request_tokens(request) + tools_tokens
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": 20,
                    "total_tokens": prompt + 20,
                }
                guarded("record_response", host.record_response, usage)
                message = _reply_message(reply, t, s)
                history.append(message)
                if reply.kind == "calls":
                    history.extend(_results(reply, t, s))
                    history = guarded("after_tool_calls", host.after_tool_calls, history)
                else:
                    guarded("end_turn", host.end_turn, history, usage)
        guarded("end_session", host.end_session, history)
    except _Stop:
        pass
    finally:
        close = getattr(engine, "close", None)
        if callable(close):
            close()
    stats.sessions += 1
    stats.compactions += compactions
    stats.seconds += time.process_time() - started


class _Stop(Exception):
    """Ends a session early: nothing can be sent, or the host raised."""


# ---------------------------------------------------------------- the run


@dataclass
class RunResult:
    stats: dict[str, Stats]
    sessions: int
    seed: int
    chunks: int
    chunk: int
    seconds: float
    #: Sessions holding each feature (see :func:`features`) and each context length.
    coverage: Counter[str] = field(default_factory=Counter)

    @property
    def violations(self) -> int:
        return sum(sum(s.violations.values()) for s in self.stats.values())


def run_sessions(
    total: int,
    *,
    base_seed: int = SEED,
    chunk: int = CHUNK,
    budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    partial: Callable[[RunResult], None] | None = None,
) -> RunResult:
    """Generate up to ``total`` sessions (fewer when ``budget_s`` runs out) and check them."""
    stats = {name: Stats(name) for name in ENGINES}
    coverage: Counter[str] = Counter()
    started = time.perf_counter()
    # The host warns (by design) on every repair and cut; at this count that is noise.
    # Its events are counted instead.
    logger = logging.getLogger("contextengine")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return _run_chunks(
            stats, coverage, total, base_seed, chunk, budget_s, progress, partial, started
        )
    finally:
        logger.setLevel(level)


def _chunk_test(
    stats: dict[str, Stats], size: int, chunk_seed: int, counter: list[int], coverage: Counter[str]
) -> Callable[[], None]:
    """A hypothesis test that runs ``size`` generated sessions through every engine."""

    @seed(chunk_seed)
    @settings(
        max_examples=size,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(session=sessions())
    def check_chunk(session: GeneratedSession) -> None:
        counter[0] += 1
        coverage.update(features(session))
        coverage["context " + f"{session.context_length:,}"] += 1
        label = f"seed {chunk_seed} #{counter[0]}"
        for name in ENGINES:
            run_session(session, name, stats[name], label)

    return check_chunk


def _run_chunks(
    stats: dict[str, Stats],
    coverage: Counter[str],
    total: int,
    base_seed: int,
    chunk: int,
    budget_s: float | None,
    progress: Callable[[str], None] | None,
    partial: Callable[[RunResult], None] | None,
    started: float,
) -> RunResult:
    done = 0
    chunks = 0
    while done < total:
        size = min(chunk, total - done)
        chunk_seed = base_seed + chunks
        counter = [0]
        check_chunk = _chunk_test(stats, size, chunk_seed, counter, coverage)
        check_chunk()
        done += counter[0]
        chunks += 1
        if progress:
            progress(f"{done:,} sessions, {time.perf_counter() - started:,.0f} s")
        if partial:
            partial(
                RunResult(
                    stats, done, base_seed, chunks, chunk, time.perf_counter() - started, coverage
                )
            )
        if counter[0] == 0 or (budget_s is not None and time.perf_counter() - started > budget_s):
            break
    return RunResult(stats, done, base_seed, chunks, chunk, time.perf_counter() - started, coverage)


def render(result: RunResult, *, command: str, asked: int | None = None) -> str:
    """The markdown figures of a run."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    lines = [
        f"Generated by `{command}` on {now} UTC ({_page.machine_line()}).",
        "",
        f"{result.sessions:,} generated sessions"
        + (
            f" (of {asked:,} asked; the time budget ran out)"
            if asked and asked > result.sessions
            else ""
        )
        + f", each through both engines; hypothesis seed"
        f" {result.seed} (chunks of {result.chunk:,}, chunk k seeded {result.seed} + k,"
        f" {result.chunks:,} chunk(s)); {result.seconds:,.0f} s in all.",
        "",
        "| engine | sessions | requests checked | compactions | window cuts | overflow errors"
        " (documented) | hook failures (swallowed) | "
        + " | ".join(f"{name} violations" for name in INVARIANTS)
        + " | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(INVARIANTS) + "---:|",
    ]
    for name in ENGINES:
        s = result.stats[name]
        cells = " | ".join(str(s.violations[i]) for i in INVARIANTS)
        lines.append(
            f"| {name} | {s.sessions:,} | {s.requests:,} | {s.compactions:,} | {s.window_cuts:,}"
            f" | {s.overflows:,} | {s.hook_failures:,} | {cells} | {s.seconds:,.0f} |"
        )
    lines += [
        "",
        "A request is one `prepare_request` that returned; each is checked for every"
        " invariant. Compactions: `CompactionEvent`s that were not aborted and left a"
        " context (preflight, after tool calls). Window cuts: requests the window guarantee"
        " cut (`window_cut` host events, reported at most once per turn). Overflow errors:"
        " `ContextOverflowError` raised with its documented cause (the session then ends);"
        " one raised without that cause is an `overflow cause` violation. Hook failures: an"
        " engine hook that raised and that the host swallowed, as it documents (a"
        " `hook_failed` or `select_context_failed` event; not a violation, listed below)."
        " CPU s: the CPU time of the engines and the host (and of the checks), session"
        " generation excluded; the machine was shared with other jobs, so CPU time says"
        " more than wall time.",
    ]
    n = max(1, result.sessions)
    held = ", ".join(f"{what} {result.coverage[what] / n:.0%}" for what in FEATURES)
    lengths = ", ".join(
        f"{length:,} {result.coverage[f'context {length:,}'] / n:.0%}" for length in CONTEXT_LENGTHS
    )
    lines += [
        "",
        f"Sessions holding each feature at least once: {held}. Context lengths: {lengths}.",
    ]
    examples = [
        (name, invariant, text)
        for name in ENGINES
        for invariant, text in result.stats[name].examples.items()
    ]
    if examples:
        lines += ["", "First example of each violation and hook failure:", ""]
        # A backtick inside an example would end its code span early.
        lines += [
            f"- {name}, {invariant}: `{text.replace('`', chr(39))}`"
            for name, invariant, text in examples
        ]
    return "\n".join(lines)


def run(
    *,
    quick: bool = False,
    sessions_count: int | None = None,
    base_seed: int = SEED,
    budget_s: float | None = None,
    progress: Callable[[str], None] | None = None,
    partial: Path | None = None,
) -> tuple[str, RunResult]:
    """Run the check; the markdown figures and the raw result.

    ``partial`` is a file rewritten with the figures so far after every chunk,
    so a run stopped from outside still leaves its figures.
    """
    total = sessions_count or (QUICK_SESSIONS if quick else SESSIONS)
    command = "PYTHONPATH=src python benchmarks/reliability/sessions.py" + (
        " --quick" if quick else f" --sessions {total}"
    )
    if budget_s is not None:
        command += f" --budget {budget_s:.0f}"

    def write_partial(result: RunResult) -> None:
        if partial is not None:
            partial.write_text(render(result, command=command, asked=total) + "\n")

    result = run_sessions(
        total, base_seed=base_seed, budget_s=budget_s, progress=progress, partial=write_partial
    )
    return render(result, command=command, asked=total), result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SESSIONS} sessions")
    parser.add_argument("--sessions", type=int, default=None, help=f"default {SESSIONS:,}")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--budget", type=float, default=None, help="stop after this many s")
    parser.add_argument("--output", type=Path, default=None, help="docs/reliability.md")
    parser.add_argument("--partial", type=Path, default=None, help="figures so far, per chunk")
    args = parser.parse_args(argv)
    figures, result = run(
        quick=args.quick,
        sessions_count=args.sessions,
        base_seed=args.seed,
        budget_s=args.budget,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        partial=args.partial,
    )
    if args.output:
        _page.write_figures(args.output, NAME, SECTION, _page.between_markers(NAME, figures))
    else:
        print(figures)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
