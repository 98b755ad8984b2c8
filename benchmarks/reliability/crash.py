"""The crash harness: ``kill -9`` the lossless engine's archive writer, then check what it left.

A child process (forked from the harness, see :func:`kill_once`) runs the real user path: a
:class:`~contextengine.ContextHost` around ``load_engine("lcm",
store=<SQLite file or PostgreSQL URL>, context_length=3,000)`` with the
offline ``DeterministicSummarizer``, one coding session of turns (a user
message; an assistant tool call and its result; a final answer; every 7th tool
output large enough to leave the view for ``large_contents``). The small
context makes the engine compact every few turns. After every call that
returned (``prepare_request``, ``end_turn``, ``import_messages``) the worker
writes the markers of the messages that call stored (one unique word per
message) to its stdout pipe with a single ``write``: once ``write`` returns
the line is in the kernel's pipe buffer and survives the writer's death, so
the parent knows exactly which messages were **acknowledged**. Then it saves
its own state (the history to continue with, the next step) atomically, as an
agent persists its conversation; a kill between the two makes the next run
send the acknowledged message again, which must not store it twice.

The parent kills the worker with SIGKILL at a random moment, in one of three
phases:

- **turns**: at a random delay after the worker resumed (one kill in ten at a
  random delay after the process started, so some land in start-up: import,
  store open, migrations, resume);
- **compaction**: at a random delay after the summariser was called (the
  worker's summariser wraps the offline one and says "compaction started"
  first; the window is 1.5 times the median compaction time seen so far), so the
  kill lands in the summariser or in the store's ``commit_compaction``;
- **bulk**: at a random delay after ``store.import_messages`` of a batch of
  500 messages into a conversation of its own started (an importer's path).

After every kill the parent first **resumes** in-process, timed: a new engine
and host on the same store, the session resumed from the worker's saved
state, one ``prepare_request`` that must pass ``validate_messages`` and hold
the latest user message (that call is acknowledged too; the next worker sends
the same message again). Then it **verifies** the archive with its own
queries: ``PRAGMA integrity_check``, ``PRAGMA foreign_key_check`` and the FTS5
``integrity-check`` (SQLite); every acknowledged message present exactly once
in its conversation (**lost**, **duplicated**: every marker, acknowledged or
not, is counted); **orphan edges**, every reference the schema holds without
a foreign key (``summary_sources`` to messages and summaries, ``context_items``
to messages and summaries, ``large_contents`` to messages, ``index_pending``
and ``search_index`` rowids to messages and summaries, PostgreSQL's
``search_segments`` to their owners); and **other damage**: ``seq`` gaps,
summaries without sources, an item twice in an active context, messages
neither indexed nor waiting to be, and messages of a conversation that no
active-context item reaches (directly or through summaries). The same archive
goes on across the kills of a chain, so damage accumulates.

Run: ``PYTHONPATH=src nice -n 15 python benchmarks/reliability/crash.py
[--quick] [--pg-url postgresql://postgres@127.0.0.1:5432/test | --no-pg]
[--output docs/reliability.md]`` (``--output`` rewrites the figures between
the markers of that page's "Crashes (kill -9)" section; without it they are
printed). Full: 1,000 kills on SQLite, 200 on PostgreSQL; ``--quick``: 10 and
4. Exits 1 when any invariant fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import select
import signal
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PHASES", "PhaseStats", "main", "measure", "report", "run"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "Crashes (kill -9)"

NAME = "crash"


# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

Message = dict[str, Any]

PHASES = ("turns", "compaction", "bulk")
MODEL = "gpt-4o"
CONTEXT_LENGTH = 3_000
BULK_MESSAGES = 500
#: Kills per archive: each chain starts a fresh archive and keeps it across its kills.
CHAIN_KILLS = 25
#: Kills per store and phase: (full, quick).
COUNTS: dict[str, dict[str, tuple[int, int]]] = {
    "SQLite": {"turns": (400, 4), "compaction": (400, 4), "bulk": (200, 2)},
    "PostgreSQL": {"turns": (80, 2), "compaction": (80, 1), "bulk": (40, 1)},
}
#: A worker that never reaches its target (no compaction, no import) is killed after this.
GIVE_UP_S = 20.0

_FILLER = (
    "The integration suite of the payments service fails on the pool settings in "
    "config/pool.yaml and the retry policy in src/retry.py; the log shows timeouts. "
)
TURN_MARK = re.compile(r"\bCM(\d+)x(\d+)([UATF])\b")
BULK_MARK = re.compile(r"\bCB(\d+)x(\d+)x(\d+)\b")


# ---------------------------------------------------------------- the conversation


def session_key(chain: int) -> str:
    return f"crash-{chain}"


def bulk_key(chain: int, batch: int) -> str:
    return f"bulk-{chain}-{batch}"


def turn_marker(chain: int, turn: int, part: str) -> str:
    return f"CM{chain}x{turn}{part}"


def turn_messages(chain: int, turn: int) -> list[Message]:
    """Turn ``turn`` of chain ``chain``: user, assistant tool call, tool result, final answer.

    Deterministic, so a worker that lost its state after an acknowledgement
    sends exactly the message it sent before; each carries one marker only.
    """
    call_id = f"call_{turn}"
    output = f"{turn_marker(chain, turn, 'T')} collected 12 items\nFAILED case{turn}\n"
    # Every 7th output is larger than a quarter of the context: it leaves the
    # view for large_contents, one more table a crash could leave inconsistent.
    output += _FILLER * (40 if turn % 7 == 3 else 2)
    return [
        {
            "role": "user",
            "content": f"{turn_marker(chain, turn, 'U')} Turn {turn}: keep going. " + _FILLER * 2,
        },
        {
            "role": "assistant",
            "content": f"{turn_marker(chain, turn, 'A')} Running the suite.",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "bash",
                        "arguments": json.dumps({"command": f"pytest -k case{turn}"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
        {
            "role": "assistant",
            "content": f"{turn_marker(chain, turn, 'F')} Step {turn} done. " + _FILLER,
        },
    ]


def bulk_messages(chain: int, batch: int) -> list[Message]:
    """An imported session of BULK_MESSAGES short messages, one marker each."""
    roles = ("user", "assistant")
    return [
        {
            "role": roles[i % 2],
            "content": f"CB{chain}x{batch}x{i} imported line {i} of an old session. "
            + _FILLER[: 40 + i % 60],
        }
        for i in range(BULK_MESSAGES)
    ]


def _markers_of_batch(chain: int, batch: int) -> list[str]:
    return [f"CB{chain}x{batch}x{i}" for i in range(BULK_MESSAGES)]


def initial_state() -> dict[str, Any]:
    return {
        "history": [{"role": "system", "content": "You are a coding agent. Work in /srv/app."}],
        "turn": 0,
        "step": 0,
        "batch": 0,
    }


def load_state(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return state


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the agent's saved state atomically (a kill leaves the old or the new file).

    No fsync: a killed process loses nothing the kernel already has; only a
    power cut would, and this harness does not simulate one.
    """
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state), encoding="utf-8")
    os.replace(tmp, path)


def _latest_user(messages: Sequence[Message]) -> Message:
    return next(m for m in reversed(messages) if m.get("role") == "user")


def check_request(request: list[Message], latest_user: Message) -> None:
    """Raise unless ``request`` is valid and carries the latest user message."""
    from contextengine import validate_messages

    validate_messages(request)
    if not any(m.get("content") == latest_user["content"] for m in request):
        raise AssertionError("the request lost the latest user message")


def advance(host: Any, state: dict[str, Any], chain: int) -> tuple[list[str], list[Message]]:
    """Run the next step of the session; return the markers it stored and its request.

    Step 0 sends the user message (``prepare_request``), step 1 the tool call
    and its result (``after_tool_calls``, ``prepare_request``), step 2 the
    final answer (``end_turn``). ``state`` is updated, not saved.
    """
    turn, step = int(state["turn"]), int(state["step"])
    messages = turn_messages(chain, turn)
    history: list[Message] = list(state["history"])
    request: list[Message] = []
    if step == 0:
        history.append(messages[0])
        request = host.prepare_request(history)
        check_request(request, messages[0])
        stored = [turn_marker(chain, turn, "U")]
    elif step == 1:
        host.record_response({"prompt_tokens": CONTEXT_LENGTH // 2, "completion_tokens": 40})
        history = host.after_tool_calls([*history, messages[1], messages[2]])
        request = host.prepare_request(history)
        check_request(request, _latest_user(history))
        stored = [turn_marker(chain, turn, "A"), turn_marker(chain, turn, "T")]
    else:
        usage = {"prompt_tokens": CONTEXT_LENGTH // 2, "completion_tokens": 40}
        host.record_response(usage)
        host.end_turn([*history, messages[3]], usage)
        stored = [turn_marker(chain, turn, "F")]
    state["history"] = host.history
    state["turn"], state["step"] = (turn + 1, 0) if step == 2 else (turn, step + 1)
    return stored, request


# ---------------------------------------------------------------- the worker


class SignallingSummarizer:
    """The offline summariser, announcing each call on the pipe first (the parent's cue)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        from contextengine import DeterministicSummarizer

        self.inner = DeterministicSummarizer()
        self.say = say
        #: When the first call of the compaction under way started (None: none under way).
        self.since: float | None = None

    def summarize(self, request: Any) -> str:
        if self.since is None:
            self.since = time.perf_counter()
        self.say("C")
        return str(self.inner.summarize(request))


def _open_host(store: str, summarizer: Any = None, observers: Iterable[Any] = ()) -> Any:
    from contextengine import ContextHost, load_engine

    engine = load_engine("lcm", context_length=CONTEXT_LENGTH, store=store, summarizer=summarizer)
    return ContextHost(
        engine, model=MODEL, context_length=CONTEXT_LENGTH, observers=list(observers)
    )


def worker(store: str, state_path: Path, phase: str, chain: int, out: int) -> int:
    """The child: drive the session (or the imports) until killed; lines go to ``out``."""

    def say(line: str) -> None:
        # One write per line: a line shorter than PIPE_BUF is never cut by a kill.
        os.write(out, (line + "\n").encode())

    from contextengine import CompactionEvent

    def observe(event: Any) -> None:
        # Only attempts that called the summariser (the others did no work to crash in).
        if isinstance(event, CompactionEvent) and summarizer.since is not None:
            say(f"D {time.perf_counter() - summarizer.since:.6f}")
            summarizer.since = None

    summarizer = SignallingSummarizer(say)
    state = load_state(state_path)
    host = _open_host(store, summarizer, [observe])
    host.start_session(session_key(chain))
    say("R")
    deadline = time.monotonic() + 4 * GIVE_UP_S
    while time.monotonic() < deadline:
        if phase == "bulk":
            from contextengine.store import Store

            archive: Store = host.engine.store
            batch = int(state["batch"])
            conversation = archive.open_conversation(bulk_key(chain, batch))
            say("I")
            started = time.perf_counter()
            archive.import_messages(conversation, bulk_messages(chain, batch))
            say(f"J {batch} {time.perf_counter() - started:.6f}")
            state["batch"] = batch + 1
        else:
            say("S")
            stored, _ = advance(host, state, chain)
            say("A " + " ".join(stored))
        save_state(state_path, state)
    return 0


# ---------------------------------------------------------------- one kill


@dataclass
class KillOutcome:
    phase: str
    #: Marker -> the session key of the conversation it must be in.
    acked: dict[str, str]
    #: The kill landed inside the phase's target (a library call, a compaction, an import).
    inside: bool
    #: A compaction (or import) duration the worker reported, for the next windows.
    durations: list[float]
    #: Summariser calls the worker announced (compactions under way).
    summarizer_calls: int = 0
    #: The worker died of something other than our SIGKILL (its stderr).
    error: str = ""


def _child(store: str, state_path: Path, phase: str, chain: int, pipe: int, errors: int) -> None:
    """The forked worker's whole life: never returns, never runs the parent's cleanup.

    The pipe and the error file are passed as descriptors, not through
    ``sys.stdout``/``sys.stderr``: under pytest those are capture objects.
    """
    code = 1
    try:
        code = worker(store, state_path, phase, chain, pipe)
    except BaseException:
        os.write(errors, traceback.format_exc().encode())
    finally:
        os._exit(code)


def kill_once(
    store: str,
    state_path: Path,
    phase: str,
    chain: int,
    rng: random.Random,
    window: float,
) -> KillOutcome:
    """Fork a worker, SIGKILL it at a random moment of ``phase``, read what it acknowledged.

    Forked from this process, which has contextengine imported already: a
    cold ``python`` start costs 0.3-3 s on the measured machine, and the
    child is a process of its own all the same (its own connections, opened
    after the fork; the parent holds none open while it forks).
    """
    _single_threaded()
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as errors:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child ends in os._exit
            os.close(read_fd)
            _child(store, state_path, phase, chain, write_fd, errors.fileno())
        os.close(write_fd)
        lines = _watch(read_fd, phase, rng, window)
        if lines is not None:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        # Whatever the worker wrote before it died is still in the pipe.
        rest = b""
        while chunk := os.read(read_fd, 65536):
            rest += chunk
        os.close(read_fd)
        errors.seek(0)
        error = errors.read().decode(errors="replace").strip()
    text = (lines or b"") + rest
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        error = ""  # what a killed worker printed is no finding
    else:
        error = error or f"worker ended by itself (status {status})"
    return _read_lines(phase, chain, text.decode().split("\n")[:-1], error)


def _single_threaded(wait_s: float = 2.0) -> None:
    """Wait until this process runs one thread, so a fork copies no lock another holds.

    A closed PostgreSQL pool's threads may take a moment to finish.
    """
    until = time.monotonic() + wait_s
    while threading.active_count() > 1 and time.monotonic() < until:
        time.sleep(0.01)


def _watch(fd: int, phase: str, rng: random.Random, window: float) -> bytes | None:
    """Read the worker's lines until the moment to kill it; None when it ended first.

    turns: a random delay after it resumed (one time in ten after its start,
    so some kills land in store open and resume); compaction: a random delay
    (up to ``window``) after the first summariser call past a random arming
    delay; bulk: the same after an import started.
    """
    started = time.monotonic()
    deadline: float | None = None
    if phase == "turns" and rng.random() < 0.1:
        deadline = started + rng.uniform(0.0, 0.3)
    armed_at: float | None = None
    give_up = started + GIVE_UP_S
    data = b""
    seen = 0
    while True:
        now = time.monotonic()
        limit = deadline if deadline is not None else give_up
        if now >= limit:
            return data
        ready, _, _ = select.select([fd], [], [], limit - now)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
        complete = data[: data.rfind(b"\n") + 1]
        for raw in complete[seen:].split(b"\n")[:-1]:
            line = raw.decode()
            now = time.monotonic()
            if deadline is not None:
                break
            if line == "R":
                if phase == "turns":
                    deadline = now + rng.uniform(0.0, 0.5)
                else:
                    armed_at = now + rng.uniform(0.0, 0.3)
            elif _is_cue(phase, line, now, armed_at):
                deadline = now + rng.uniform(0.0, window)
        seen = len(complete)


def _is_cue(phase: str, line: str, now: float, armed_at: float | None) -> bool:
    """Whether ``line`` starts the target the kill aims at: a compaction, an import."""
    if armed_at is None or now < armed_at:
        return False
    return line == ("C" if phase == "compaction" else "I")


def _read_lines(phase: str, chain: int, lines: list[str], error: str) -> KillOutcome:
    acked: dict[str, str] = {}
    durations: list[float] = []
    open_call = open_compaction = open_import = False
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "S":
            open_call = True
        elif kind == "A":
            open_call = False
            acked.update(dict.fromkeys(rest.split(), session_key(chain)))
        elif kind == "C":
            open_compaction = True
        elif kind == "D":
            open_compaction = False
            durations.append(float(rest))
        elif kind == "I":
            open_import = True
        elif kind == "J":
            open_import = False
            batch, seconds = rest.split()
            durations.append(float(seconds))
            key = bulk_key(chain, int(batch))
            acked.update(dict.fromkeys(_markers_of_batch(chain, int(batch)), key))
    inside = {"turns": open_call, "compaction": open_compaction, "bulk": open_import}[phase]
    calls = sum(line == "C" for line in lines)
    return KillOutcome(phase, acked, inside, durations, calls, error)


# ---------------------------------------------------------------- resume


@dataclass
class Resume:
    ok: bool
    seconds: float
    acked: dict[str, str]
    error: str = ""


def resume(store: str, state_path: Path, chain: int) -> Resume:
    """Reopen the archive as a restarted agent does and send one request, timed.

    The agent's saved state gives the history; when the next step is a new
    turn its user message is sent, else the history is sent again (the agent
    retries the request the crash interrupted). The state is not saved: the
    next worker sends the same message again.
    """
    started = time.perf_counter()
    host = None
    try:
        state = load_state(state_path)
        host = _open_host(store)
        host.start_session(session_key(chain))
        history: list[Message] = list(state["history"])
        acked: dict[str, str] = {}
        if int(state["step"]) == 0:
            user = turn_messages(chain, int(state["turn"]))[0]
            history.append(user)
            acked[turn_marker(chain, int(state["turn"]), "U")] = session_key(chain)
        request = host.prepare_request(history)
        seconds = time.perf_counter() - started
        check_request(request, _latest_user(history))
        return Resume(True, seconds, acked)
    except Exception as exc:  # a failed resume is a finding, reported in the table
        return Resume(False, time.perf_counter() - started, {}, f"{type(exc).__name__}: {exc}")
    finally:
        if host is not None:
            host.engine.close()


# ---------------------------------------------------------------- verification


@dataclass
class Damage:
    """What one verification found; sets of keys, so a finding is counted once per chain."""

    integrity: list[str] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)
    duplicated: set[str] = field(default_factory=set)
    orphans: set[str] = field(default_factory=set)
    other: set[str] = field(default_factory=set)


def _markers_by_conversation(rows: Iterable[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """(session key, marker) -> how many stored messages hold the marker."""
    counts: Counter[tuple[str, str]] = Counter()
    for key, text in rows:
        found = {"CM{}x{}{}".format(*m) for m in TURN_MARK.findall(text)}
        found |= {"CB{}x{}x{}".format(*m) for m in BULK_MARK.findall(text)}
        for marker in found:
            counts[(key, marker)] += 1
    return counts


def _lost_and_duplicated(
    counts: Counter[tuple[str, str]], acked: dict[str, str], damage: Damage
) -> None:
    per_marker: Counter[str] = Counter()
    for (_, marker), n in counts.items():
        per_marker[marker] += n
    damage.duplicated |= {marker for marker, n in per_marker.items() if n > 1}
    damage.lost |= {marker for marker, key in acked.items() if counts[(key, marker)] == 0}


def _unreachable(
    messages: Iterable[tuple[str, str, int, str]],
    context: Iterable[tuple[str, str, str]],
    sources: Iterable[tuple[str, str, str]],
) -> set[str]:
    """Messages of conversations with an active context that no context item reaches.

    ``messages`` are (conversation, id, seq, role); ``context`` (conversation,
    kind, ref); ``sources`` (summary, kind, source). A message is reached when
    it is in the context or a source, at any depth, of a summary that is; the
    system prompt at seq 0 is kept apart by the engine and skipped.
    """
    edges: dict[str, list[str]] = defaultdict(list)
    for summary, _, source in sources:
        edges[summary].append(source)
    reached: set[str] = set()
    with_context: set[str] = set()
    todo: list[str] = []
    for conversation, _, ref in context:
        with_context.add(conversation)
        todo.append(ref)
    while todo:
        ref = todo.pop()
        if ref not in reached:
            reached.add(ref)
            todo.extend(edges.get(ref, ()))
    return {
        f"unreachable {mid}"
        for conversation, mid, seq, role in messages
        if conversation in with_context
        and mid not in reached
        and not (seq == 0 and role == "system")
    }


def _seq_gaps(rows: Iterable[tuple[str, int, int, int]]) -> set[str]:
    return {
        f"seq gap in {conversation}"
        for conversation, count, low, high in rows
        if low != 0 or high != count - 1
    }


#: References without a foreign key, as (name, query counting the rows that break them).
#: The queries run as they are on both stores (PostgreSQL on the archive's schema).
_EDGE_CHECKS: tuple[tuple[str, str], ...] = (
    (
        "summary_sources.summary_id",
        "SELECT s.summary_id || '/' || s.position FROM summary_sources s WHERE NOT EXISTS"
        " (SELECT 1 FROM summaries x WHERE x.id = s.summary_id"
        " AND x.conversation_id = s.conversation_id)",
    ),
    (
        "summary_sources -> messages",
        "SELECT s.summary_id || '/' || s.position FROM summary_sources s"
        " WHERE s.source_kind = 'message' AND NOT EXISTS"
        " (SELECT 1 FROM messages m WHERE m.id = s.source_id"
        " AND m.conversation_id = s.conversation_id)",
    ),
    (
        "summary_sources -> summaries",
        "SELECT s.summary_id || '/' || s.position FROM summary_sources s"
        " WHERE s.source_kind = 'summary' AND NOT EXISTS"
        " (SELECT 1 FROM summaries x WHERE x.id = s.source_id"
        " AND x.conversation_id = s.conversation_id)",
    ),
    (
        "context_items -> messages",
        "SELECT c.conversation_id || '/' || c.position FROM context_items c"
        " WHERE c.kind = 'message' AND NOT EXISTS"
        " (SELECT 1 FROM messages m WHERE m.id = c.ref_id"
        " AND m.conversation_id = c.conversation_id)",
    ),
    (
        "context_items -> summaries",
        "SELECT c.conversation_id || '/' || c.position FROM context_items c"
        " WHERE c.kind = 'summary' AND NOT EXISTS"
        " (SELECT 1 FROM summaries x WHERE x.id = c.ref_id"
        " AND x.conversation_id = c.conversation_id)",
    ),
    (
        "large_contents -> messages",
        "SELECT l.id FROM large_contents l WHERE NOT EXISTS"
        " (SELECT 1 FROM messages m WHERE m.id = l.message_id"
        " AND m.conversation_id = l.conversation_id)",
    ),
)

_OTHER_CHECKS: tuple[tuple[str, str], ...] = (
    (
        "summary without sources",
        "SELECT x.id FROM summaries x WHERE NOT EXISTS"
        " (SELECT 1 FROM summary_sources s WHERE s.summary_id = x.id)",
    ),
    (
        "item twice in a context",
        "SELECT conversation_id || '/' || ref_id FROM context_items"
        " GROUP BY conversation_id, ref_id HAVING COUNT(*) > 1",
    ),
)

_MESSAGES = (
    "SELECT c.session_key, m.json FROM messages m JOIN conversations c ON c.id = m.conversation_id"
)
_SEQS = (
    "SELECT conversation_id, COUNT(*), MIN(seq), MAX(seq) FROM messages GROUP BY conversation_id"
)
_REACH = (
    "SELECT conversation_id, id, seq, role FROM messages",
    "SELECT conversation_id, kind, ref_id FROM context_items",
    "SELECT summary_id, source_kind, source_id FROM summary_sources",
)


def _common_checks(execute: Callable[[str], list[Any]], acked: dict[str, str]) -> Damage:
    damage = Damage()
    for name, query in _EDGE_CHECKS:
        damage.orphans |= {f"{name} {row[0]}" for row in execute(query)}
    for name, query in _OTHER_CHECKS:
        damage.other |= {f"{name} {row[0]}" for row in execute(query)}
    damage.other |= _seq_gaps(execute(_SEQS))
    damage.other |= _unreachable(*(execute(query) for query in _REACH))
    _lost_and_duplicated(_markers_by_conversation(execute(_MESSAGES)), acked, damage)
    return damage


def verify_sqlite(path: str, acked: dict[str, str]) -> Damage:
    """Check the SQLite archive at ``path`` (nothing else has it open)."""
    db = sqlite3.connect(path)
    try:
        verdict = [str(row[0]) for row in db.execute("PRAGMA integrity_check").fetchall()]
        damage = _sqlite_checks(db, acked)
        if verdict != ["ok"]:
            damage.integrity.append("integrity_check: " + "; ".join(verdict[:3]))
        return damage
    except sqlite3.DatabaseError as exc:
        # A file too damaged to query ("database disk image is malformed").
        return Damage(integrity=[f"{type(exc).__name__}: {exc}"])
    finally:
        db.close()


def _sqlite_checks(db: sqlite3.Connection, acked: dict[str, str]) -> Damage:
    from contextengine.store.segments import split_rowid

    def execute(query: str) -> list[Any]:
        return db.execute(query).fetchall()

    damage = _common_checks(execute, acked)
    for row in execute("PRAGMA foreign_key_check"):
        damage.orphans.add(f"foreign key {row}")
    try:
        # Reads only: compares the FTS5 index with its own content.
        db.execute("INSERT INTO search_index(search_index) VALUES ('integrity-check')")
    except sqlite3.DatabaseError as exc:
        damage.integrity.append(f"fts5 integrity-check: {exc}")
    messages = dict(
        execute(
            "SELECT m.rowid, c.search_token FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id"
        )
    )
    summaries = dict(
        execute(
            "SELECT x.rowid, c.search_token FROM summaries x"
            " JOIN conversations c ON c.id = x.conversation_id"
        )
    )
    indexed: set[int] = set()
    indexed_summaries: set[int] = set()
    for rowid, conv in execute("SELECT rowid, conv FROM search_index"):
        owner, segment = split_rowid(int(rowid))
        # An index row must name an existing owner, in that owner's conversation.
        owners = messages if owner > 0 else summaries
        if owners.get(abs(owner)) != conv:
            damage.orphans.add(f"search_index {rowid}")
        elif segment == 0:
            (indexed if owner > 0 else indexed_summaries).add(abs(owner))
    pending = {int(r[0]) for r in execute("SELECT rowid FROM index_pending")}
    damage.orphans |= {f"index_pending {r}" for r in pending - messages.keys()}
    damage.other |= {f"unindexed message {r}" for r in messages.keys() - indexed - pending}
    damage.other |= {f"unindexed summary {r}" for r in summaries.keys() - indexed_summaries}
    return damage


def verify_postgres(url: str, schema: str, acked: dict[str, str]) -> Damage:
    """Check the PostgreSQL archive in ``schema``."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

        def execute(query: str) -> list[Any]:
            return conn.execute(query).fetchall()  # type: ignore[arg-type]  # fixed text

        damage = _common_checks(execute, acked)
        segments = (
            "SELECT g.conversation_id || '/' || g.kind || '/' || g.owner || '/' || g.segment"
            " FROM search_segments g WHERE NOT EXISTS"
            " (SELECT 1 FROM messages m WHERE g.kind = 0 AND m.conversation_id = g.conversation_id"
            " AND m.seq = g.owner) AND NOT EXISTS (SELECT 1 FROM summaries x WHERE g.kind = 1"
            " AND x.conversation_id = g.conversation_id AND x.pk = g.owner)"
        )
        damage.orphans |= {f"search_segments {row[0]}" for row in execute(segments)}
        unindexed = (
            "SELECT id FROM messages WHERE tsv IS NULL"
            " UNION ALL SELECT id FROM summaries WHERE tsv IS NULL"
        )
        damage.other |= {f"unindexed {row[0]}" for row in execute(unindexed)}
        return damage


# ---------------------------------------------------------------- the chains


@dataclass
class PhaseStats:
    """One row of the table: the kills of one phase on one store."""

    store: str
    phase: str
    kills: int = 0
    inside: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    integrity_failures: int = 0
    orphans: int = 0
    other: int = 0
    resumes_ok: int = 0
    worker_errors: int = 0
    summarizer_calls: int = 0
    recovery_s: list[float] = field(default_factory=list)
    #: The first few findings, in words, for the report.
    examples: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(
            self.lost
            or self.duplicated
            or self.integrity_failures
            or self.orphans
            or self.other
            or self.worker_errors
            or self.resumes_ok != self.kills
        )

    def note(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text)


@dataclass
class _Seen:
    """Findings already counted in this chain (damage stays; it is counted when first seen)."""

    lost: set[str] = field(default_factory=set)
    duplicated: set[str] = field(default_factory=set)
    orphans: set[str] = field(default_factory=set)
    other: set[str] = field(default_factory=set)


def _record(stats: PhaseStats, damage: Damage, seen: _Seen) -> None:
    for name in ("lost", "duplicated", "orphans", "other"):
        found: set[str] = getattr(damage, name)
        new = found - getattr(seen, name)
        getattr(seen, name).update(new)
        setattr(stats, name, getattr(stats, name) + len(new))
        for item in sorted(new)[:2]:
            stats.note(f"{name}: {item}")
    if damage.integrity:
        stats.integrity_failures += 1
        stats.note(damage.integrity[0])


def schedule(counts: dict[str, int], rng: random.Random) -> list[list[str]]:
    """The kills of one store, shuffled and cut into chains of CHAIN_KILLS (one archive each)."""
    kills = [phase for phase in PHASES for _ in range(counts.get(phase, 0))]
    rng.shuffle(kills)
    return [kills[i : i + CHAIN_KILLS] for i in range(0, len(kills), CHAIN_KILLS)]


def run_chain(
    store_name: str,
    spec: str,
    verify: Callable[[dict[str, str]], Damage],
    chain: int,
    phases: Sequence[str],
    state_path: Path,
    rng: random.Random,
    stats: dict[str, PhaseStats],
    windows: dict[str, list[float]],
) -> None:
    """Kill, resume and verify ``len(phases)`` times on one archive."""
    save_state(state_path, initial_state())
    acked: dict[str, str] = {}
    seen = _Seen()
    for phase in phases:
        row = stats[phase]
        seen_durations = windows[phase][-50:]
        window = 1.5 * statistics.median(seen_durations) if seen_durations else 0.05
        outcome = kill_once(spec, state_path, phase, chain, rng, max(window, 0.002))
        windows[phase].extend(outcome.durations)
        row.kills += 1
        row.inside += outcome.inside
        row.acknowledged += len(outcome.acked)
        row.summarizer_calls += outcome.summarizer_calls
        acked.update(outcome.acked)
        if outcome.error:
            row.worker_errors += 1
            row.note(f"worker error: {outcome.error.splitlines()[-1]}")
        resumed = resume(spec, state_path, chain)
        acked.update(resumed.acked)
        if resumed.ok:
            row.resumes_ok += 1
            row.recovery_s.append(resumed.seconds)
        else:
            row.note(f"resume failed: {resumed.error}")
        _record(row, verify(acked), seen)
    del store_name


def measure(
    quick: bool = False,
    pg_url: str | None = None,
    seed: int = 11,
    stores: Sequence[str] = ("SQLite", "PostgreSQL"),
) -> list[PhaseStats]:
    """Every kill of the run (SQLite, then PostgreSQL when ``pg_url``), one row per phase."""
    rng = random.Random(seed)
    started = time.perf_counter()
    rows: list[PhaseStats] = []
    # Loaded once here, so every forked worker inherits the tokenizer instead of
    # loading it (a second of start-up that no kill would then land in).
    from contextengine.tokens import message_tokens

    message_tokens({"role": "user", "content": "warm up"}, MODEL)
    # The resumes' host events (compaction skipped, below threshold) are not findings.
    logging.getLogger("contextengine").addHandler(logging.NullHandler())
    logging.getLogger("contextengine").propagate = False
    with tempfile.TemporaryDirectory(prefix="crash-") as tmp:
        folder = Path(tmp)
        stores = [s for s in stores if s == "SQLite" or pg_url]
        chain_ids = iter(range(1, 1_000_000))
        for store_name in stores:
            counts = {p: COUNTS[store_name][p][1 if quick else 0] for p in PHASES}
            stats = {p: PhaseStats(store_name, p) for p in PHASES if counts[p]}
            windows: dict[str, list[float]] = defaultdict(list)
            chains = schedule(counts, rng)
            for number, phases in enumerate(chains, 1):
                chain = next(chain_ids)
                print(
                    f"crash: {store_name} chain {number}/{len(chains)}"
                    f" ({time.perf_counter() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
                state = folder / f"state-{chain}.json"
                if store_name == "SQLite":
                    path = str(folder / f"archive-{chain}.db")
                    run_chain(
                        store_name,
                        path,
                        lambda acked, p=path: verify_sqlite(p, acked),
                        chain,
                        phases,
                        state,
                        rng,
                        stats,
                        windows,
                    )
                else:
                    assert pg_url is not None
                    schema = f"ce_crash_{os.getpid()}_{chain}"
                    joiner = "&" if "?" in pg_url else "?"
                    try:
                        run_chain(
                            store_name,
                            f"{pg_url}{joiner}schema={schema}",
                            lambda acked, s=schema: verify_postgres(pg_url, s, acked),
                            chain,
                            phases,
                            state,
                            rng,
                            stats,
                            windows,
                        )
                    finally:
                        _drop_schema(pg_url, schema)
            rows += stats.values()
    return rows


def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def pg_reachable(url: str) -> str | None:
    """Why ``url`` cannot be used (None when a server answers)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


# ---------------------------------------------------------------- the report


_INSIDE = {
    "turns": "inside a library call",
    "compaction": "inside a compaction",
    "bulk": "inside `import_messages`",
}


def _ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):.0f}" if values else "–"


def table(rows: Sequence[PhaseStats]) -> list[str]:
    lines = [
        "| store | phase | kills | landed inside the target | acknowledged messages | lost"
        " | duplicated | integrity failures | orphan edges | other damage | worker errors"
        " | resumes ok | median recovery ms |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        integrity = str(r.integrity_failures) if r.store == "SQLite" else "n/a"
        lines.append(
            f"| {r.store} | {r.phase} | {r.kills:,} | {r.inside:,} ({_INSIDE[r.phase]})"
            f" | {r.acknowledged:,} | {r.lost} | {r.duplicated} | {integrity} | {r.orphans}"
            f" | {r.other} | {r.worker_errors} | {r.resumes_ok:,} | {_ms(r.recovery_s)} |"
        )
    for store in dict.fromkeys(r.store for r in rows):
        mine = [r for r in rows if r.store == store]
        total = PhaseStats(store, "all")
        for r in mine:
            for name in (
                "kills",
                "inside",
                "acknowledged",
                "lost",
                "duplicated",
                "integrity_failures",
                "orphans",
                "other",
                "worker_errors",
                "resumes_ok",
            ):
                setattr(total, name, getattr(total, name) + getattr(r, name))
            total.recovery_s += r.recovery_s
        integrity = str(total.integrity_failures) if store == "SQLite" else "n/a"
        lines.append(
            f"| **{store}** | **all** | **{total.kills:,}** | {total.inside:,}"
            f" | {total.acknowledged:,} | {total.lost} | {total.duplicated} | {integrity}"
            f" | {total.orphans} | {total.other} | {total.worker_errors}"
            f" | {total.resumes_ok:,} | {_ms(total.recovery_s)} |"
        )
    return lines


def run(quick: bool = False, pg_url: str | None = None) -> str:
    """The kills, as a markdown table with what each figure includes."""
    return report(quick=quick, pg_url=pg_url)[0]


def report(quick: bool = False, pg_url: str | None = None) -> tuple[str, list[PhaseStats]]:
    """The markdown of :func:`run` and the rows behind it (PostgreSQL skipped when unreachable)."""
    started = time.perf_counter()
    skipped = ""
    if pg_url is not None:
        reason = pg_reachable(pg_url)
        if reason is not None:
            skipped = f"PostgreSQL skipped: {reason}."
            pg_url = None
    rows = measure(quick=quick, pg_url=pg_url)
    lines = [
        "#### Kills, by store and phase",
        "",
        *table(rows),
        "",
        f"Context {CONTEXT_LENGTH:,} tokens, offline summariser, chains of {CHAIN_KILLS} kills"
        " per archive (a fresh SQLite file or PostgreSQL schema per chain, kept across its"
        " kills). *Landed inside the target*: the worker had announced the start of a library"
        " call (turns), of a summariser call (compaction) or of an import (bulk) and not its"
        " end when it died. *Acknowledged*: messages whose storing call had returned and been"
        " reported to the parent (a bulk batch is 500 messages), plus the message each resume"
        " sent. *Lost*: acknowledged, absent from its conversation; *duplicated*: any marker"
        " (acknowledged or not) in more than one stored message. *Integrity failures*: checks"
        " where `PRAGMA integrity_check` was not `ok` or the FTS5 `integrity-check` failed"
        " (PostgreSQL: not applicable, the server's own recovery). *Orphan edges*: rows of"
        " `summary_sources`, `context_items`, `large_contents`, `index_pending`,"
        " `search_index` / `search_segments` naming a row that does not exist (and"
        " `foreign_key_check`). *Other damage*: `seq` gaps, summaries without sources, an item"
        " twice in an active context, messages neither indexed nor pending, messages no"
        " active-context item reaches. Findings are counted once, after the kill that first"
        " shows them. *Recovery*: a new engine and host opening the archive after the kill,"
        " resuming the session and returning a request that passed `validate_messages` with"
        " the latest user message in it.",
    ]
    examples = [f"{r.store} {r.phase}: {e}" for r in rows for e in r.examples]
    if examples:
        lines += ["", "Findings:", "", *(f"- {e}" for e in examples)]
    if skipped:
        lines += ["", skipped]
    lines += ["", f"_{time.perf_counter() - started:.0f} s in all._"]
    return "\n".join(lines), rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 kills on SQLite, 4 on PostgreSQL")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(
            "CONTEXTENGINE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
        help="PostgreSQL server to crash against (skipped when it does not answer)",
    )
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--output", default="-", help="page whose figures to rewrite ('-': print)")
    args = parser.parse_args(argv)
    body, rows = report(quick=args.quick, pg_url=None if args.no_pg else args.pg_url)
    if args.output == "-":
        print(_page.figures(NAME, " --quick" if args.quick else "", body))
    else:
        figures = _page.figures(NAME, " --quick" if args.quick else "", body)
        _page.write_figures(Path(args.output), NAME, SECTION, figures)
        print(f"wrote the crash figures of {args.output}", file=sys.stderr)
    return 1 if any(row.failed for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
