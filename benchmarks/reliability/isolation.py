"""Isolation between conversations: an attack set run from one conversation against another.

One store (an SQLite file; a PostgreSQL schema when a server answers) holds
two conversations written by two :class:`~contextengine.LosslessEngine`
sharing it:

- the **victim**, whose every place holds a secret *canary* (``zvic`` + 10
  hex digits, one per place): user text, assistant text, tool-call arguments,
  tool outputs, large tool outputs stored out of line (``lc_`` ids), and the
  summaries a forced compaction wrote from them;
- the **attacker**, built the same way with its own canaries (``zatk`` ...)
  and the same ordinary vocabulary, so that any query that escaped its
  conversation would find the victim's rows.

The attacker acts only through what a model or an agent can reach:

- ``tool``: ``engine.handle_tool_call(name, args)`` of the attacker's engine
  (``lcm_grep``, ``lcm_describe``, ``lcm_expand``) with arbitrary arguments;
- ``host``: ``ContextHost.handle_tool_call(name, raw)``, the host's tool
  routing, with raw arguments as a model sends them (JSON text, not JSON,
  lists, numbers, null);
- ``store``: the store's public read API (``search``, ``get_message``,
  ``get_messages``, ``get_summary``, ``get_large_content``,
  ``parent_summary``) called with the attacker's conversation id, and in the
  SQL family with that id carrying SQL.

Attack families (:data:`FAMILIES`), each generated from hand-written
templates crossed with the victim's and the attacker's ids and words: ``ids``,
``fts syntax`` (FTS5 and tsquery operators), ``sql metacharacters``, ``regex
bombs``, ``cursors`` (replayed from the victim's searches, tampered, forged,
malformed), ``limits``, ``wrong types`` and ``long inputs`` (1 MB).

A case is judged on everything the attacker gets back: the tool result text,
the store's return value (its ``repr``) or the exception raised. It **leaks**
when it holds a victim secret (a canary, a victim message / summary /
large-content id, the victim's conversation id or search token) that the
attacker's own input did not contain (an error may quote the input back). An
error is **clear** when it is one line without traceback text: for tools a
JSON ``{"error": "..."}``, for the store a ``StoreError``, ``ValueError`` or
``TypeError``. Each family holds **controls**: cases that must reach the
attacker's own rows (an attacker canary or item id not in the input), so
that a family finding nothing of the victim is not a family finding nothing
at all. After the attacks, the victim must still find each of its canaries.

Run: ``PYTHONPATH=src python benchmarks/reliability/isolation.py [--quick]
[--pg-url URL | --no-pg] [--output docs/reliability.md]``. The PostgreSQL
store runs in a schema of its own, dropped afterwards (``--pg-url``, default
``$CONTEXTENGINE_TEST_PG_URL`` or ``postgresql://postgres@127.0.0.1:5432/test``;
skipped with a note when no server answers). ``--output`` rewrites the
figures between the markers of that page's "Isolation between conversations"
section. Exits 1 on any leak, unclear error, missed control or a victim that
lost a canary.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contextengine import ContextHost, LosslessEngine, SQLiteStore, Store, StoreError
from contextengine.store.ids import large_content_id_for, search_token_for
from contextengine.store.search import encode_cursor

__all__ = ["FAMILIES", "Case", "Outcome", "World", "attacks", "build_world", "main", "run"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SECTION = "Isolation between conversations"

NAME = "isolation"


# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

PG_URL = os.environ.get("CONTEXTENGINE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

Message = dict[str, Any]
Surface = Literal["tool", "host", "store"]

FAMILIES = (
    "ids",
    "fts syntax",
    "sql metacharacters",
    "regex bombs",
    "cursors",
    "limits",
    "wrong types",
    "long inputs",
)
TOOLS = ("lcm_grep", "lcm_describe", "lcm_expand")
CONTEXT_LENGTH = 4_000
#: A tool output above this many tokens is stored out of line (a large content).
LARGE_CONTENT_TOKENS = 400
#: Words both conversations use, so an escaped query would find the other side.
SHARED = ("deploy", "launch", "code", "vault", "password", "manifest", "migration")
#: Where a canary is planted in each turn.
PLACES = ("user", "assistant", "arguments", "output")


def canary(who: str, place: str, turn: int) -> str:
    """A secret word unique to one place of one turn: ``zvic``/``zatk`` + 10 hex digits."""
    digest = hashlib.sha256(f"{who}/{place}/{turn}".encode()).hexdigest()[:10]
    return {"victim": "zvic", "attacker": "zatk"}[who] + digest


def conversation(who: str, turns: int) -> tuple[list[Message], list[str]]:
    """A coding session with a canary in every place of every turn, and its canaries.

    The last turn's tool output is large (stored out of line) and carries three
    more canaries: at its head, its middle and its end. One message is a run of
    ``a`` ending in ``!``, the subject a catastrophic regex backtracks on.
    """
    canaries: list[str] = []
    filler = " ".join(SHARED) + " the pipeline retries the job and the staging host answers."
    messages: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        words = {place: canary(who, place, turn) for place in PLACES}
        canaries += words.values()
        call_id = f"call_{who}_{turn}"
        messages += [
            {"role": "user", "content": f"Turn {turn}: {filler} The code is {words['user']}."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"cat {words['arguments']}.txt"}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"{filler}\nvault entry {words['output']}\n{filler}",
            },
            {
                "role": "assistant",
                "content": f"Found {words['assistant']} in the {SHARED[turn % 7]}.",
            },
        ]
    big = [canary(who, f"large-{part}", 0) for part in ("head", "middle", "tail")]
    canaries += big
    body = "\n".join(f"line {i}: {filler}" for i in range(120))
    half = len(body) // 2
    large = f"{big[0]}\n{body[:half]}\n{big[1]}\n{body[half:]}\n{big[2]}"
    messages += [
        {"role": "user", "content": "Paste the whole manifest " + "a" * 3_000 + "!"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"big_{who}",
                    "type": "function",
                    "function": {"name": "cat", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"big_{who}", "content": large},
        {"role": "user", "content": f"Now the {SHARED[1]} checklist, please."},
    ]
    return messages, canaries


# ---------------------------------------------------------------- the world


@dataclass
class Side:
    """One conversation of the world: its engine and everything secret (or own) in it."""

    who: str
    engine: LosslessEngine
    conversation_id: str
    canaries: list[str]
    message_ids: list[str]
    summary_ids: list[str]
    large_ids: list[str]
    search_token: str
    #: Canaries that made it into a summary.
    summarised: list[str] = field(default_factory=list)

    @property
    def secrets(self) -> list[str]:
        """What must never reach the other side, unless the other side typed it."""
        return [
            *self.canaries,
            *self.message_ids,
            *self.summary_ids,
            *self.large_ids,
            self.conversation_id,
            self.search_token,
        ]


@dataclass
class World:
    """A store holding the victim and the attacker, and the attacker's host."""

    store: Store
    kind: str
    victim: Side
    attacker: Side
    host: ContextHost


def _side(store: Store, who: str, turns: int) -> Side:
    engine = LosslessEngine(
        context_length=CONTEXT_LENGTH, store=store, large_content_tokens=LARGE_CONTENT_TOKENS
    )
    engine.on_session_start(f"isolation-{who}")
    history, canaries = conversation(who, turns)
    engine.select_context(history, conversation_messages=history)
    engine.compress(history, force=True)
    cid = engine.conversation_id
    assert cid is not None
    messages = store.get_messages(cid)
    large_ids = [
        large_content_id_for(cid, m.id)
        for m in messages
        if m.role == "tool" and store.get_large_content(cid, large_content_id_for(cid, m.id))
    ]
    summaries = [r.id for r in store.get_context(cid) if r.kind == "summary"]
    # Walk down the summary DAG so condensed summaries' sources count too.
    seen: list[str] = []
    while summaries:
        sid = summaries.pop()
        record = store.get_summary(cid, sid)
        if record is None or sid in seen:
            continue
        seen.append(sid)
        if record.kind == "condensed":
            summaries += record.source_ids
    summarised = []
    for sid in seen:
        record = store.get_summary(cid, sid)
        assert record is not None
        summarised += [c for c in canaries if c in record.content and c not in summarised]
    return Side(
        who=who,
        engine=engine,
        conversation_id=cid,
        canaries=canaries,
        message_ids=[m.id for m in messages],
        summary_ids=seen,
        large_ids=large_ids,
        search_token=search_token_for(cid),
        summarised=summarised,
    )


def build_world(store: Store, kind: str, *, turns: int = 6) -> World:
    """Write the victim, then the attacker, into ``store``; check each owns what it should."""
    victim = _side(store, "victim", turns)
    attacker = _side(store, "attacker", turns)
    for side in (victim, attacker):
        if not (side.summary_ids and side.large_ids and side.summarised):
            raise RuntimeError(
                f"{side.who}: the setup needs summaries ({len(side.summary_ids)}), large "
                f"contents ({len(side.large_ids)}) and canaries in summaries "
                f"({len(side.summarised)})"
            )
    host = ContextHost(attacker.engine, model="gpt-4o", context_length=CONTEXT_LENGTH)
    return World(store=store, kind=kind, victim=victim, attacker=attacker, host=host)


def owner_finds_everything(side: Side) -> list[str]:
    """The canaries the side's own ``lcm_grep`` (or ``lcm_expand`` of a large content) misses."""
    found = " ".join(
        json.dumps(json.loads(side.engine.handle_tool_call("lcm_expand", {"id": lc})))
        for lc in side.large_ids
    )
    missed = []
    for word in side.canaries:
        if word in found:
            continue
        result = side.engine.handle_tool_call("lcm_grep", {"query": word, "scope": "messages"})
        if word not in result:
            missed.append(word)
    return missed


# ---------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """One attack: a surface, a tool or store method, its arguments.

    For ``store`` cases ``args`` is ``(positional, keywords)`` after the
    conversation id, which is the attacker's unless ``conversation`` says
    otherwise. A ``control`` must reach the attacker's own rows.
    """

    family: str
    label: str
    surface: Surface
    name: str
    args: Any
    control: bool = False
    conversation: str | None = None


def _tool(family: str, label: str, name: str, args: Any, *, control: bool = False) -> Case:
    return Case(family, label, "tool", name, args, control)


def _host(family: str, label: str, name: str, raw: Any, *, control: bool = False) -> Case:
    return Case(family, label, "host", name, raw, control)


def _store(
    family: str,
    label: str,
    name: str,
    *args: Any,
    control: bool = False,
    conversation: str | None = None,
    **kwargs: Any,
) -> Case:
    return Case(family, label, "store", name, (args, kwargs), control, conversation)


def _b64(payload: Any) -> str:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _id_cases(world: World) -> Iterator[Case]:
    f = "ids"
    v, a = world.victim, world.attacker
    victim_ids = [*v.message_ids, *v.summary_ids, *v.large_ids]
    for item in victim_ids:
        for name in ("lcm_describe", "lcm_expand"):
            yield _tool(f, "victim id", name, {"id": item})
        yield _store(f, "victim id", "get_message", item)
        yield _store(f, "victim id", "get_summary", item)
        yield _store(f, "victim id", "get_large_content", item)
        yield _store(f, "victim id", "parent_summary", item)
    sample = [v.message_ids[1], v.summary_ids[0], v.large_ids[0]]
    variants: list[tuple[str, Callable[[str], str]]] = [
        ("padded", lambda i: f"  {i}\n"),
        ("upper", str.upper),
        ("truncated", lambda i: i[:-4]),
        ("wildcard %", lambda i: i[:8] + "%"),
        ("wildcard *", lambda i: i[:8] + "*"),
        ("glob", lambda i: i[:8] + "[0-9a-f]*"),
        ("conversation prefix /", lambda i: f"{v.conversation_id}/{i}"),
        ("conversation prefix :", lambda i: f"{v.conversation_id}:{i}"),
        ("attacker conversation prefix", lambda i: f"{a.conversation_id}/{i}"),
        ("sql or", lambda i: f"{i}' OR '1'='1"),
        ("sql union", lambda i: f"x' UNION SELECT json FROM messages WHERE id='{i}' --"),
        ("homoglyph", lambda i: i.replace("_", "\uff3f")),
        ("zero-width", lambda i: i[:4] + "\u200b" + i[4:]),
        ("NUL", lambda i: i + "\x00"),
        ("url-encoded", lambda i: i.replace("_", "%5F")),
    ]
    for item in sample:
        for label, change in variants:
            forged = change(item)
            yield _tool(f, label, "lcm_expand", {"id": forged})
            yield _tool(f, label, "lcm_describe", {"id": forged})
            yield _store(f, label, "get_message", forged)
    guessed = [
        *(f"msg_{n:016x}" for n in (0, 1, 2, 255, 2**63)),
        *(f"sum_{n:016x}" for n in (0, 1)),
        *(f"lc_{n:016x}" for n in (0, 1)),
        "0",
        "1",
        "-1",
        "2",
        str(2**63),
        str(-(2**63)),
        "9" * 40,
        "msg_",
        "sum_",
        "lc_",
        "%",
        "*",
        "_",
        v.conversation_id,
        v.search_token,
        "conv_0000000000000000",
    ]
    for item in guessed:
        yield _tool(f, "guessed", "lcm_expand", {"id": item})
        yield _tool(f, "guessed", "lcm_describe", {"id": item})
        yield _store(f, "guessed", "get_summary", item)
    for number in (0, 1, -1, 2**31, 2**63, -(2**70), 10**30):
        yield _tool(f, "integer id", "lcm_expand", {"id": number})
        yield _host(f, "integer id", "lcm_describe", json.dumps({"id": number}))
    # Controls: the attacker's own ids open, through every surface.
    for item in [a.message_ids[1], a.summary_ids[0], a.large_ids[0]]:
        yield _tool(f, "own id", "lcm_expand", {"id": item}, control=True)
        yield _host(f, "own id", "lcm_expand", json.dumps({"id": item}), control=True)
    yield _store(f, "own id", "get_message", a.message_ids[1], control=True)
    yield _store(f, "own id", "get_large_content", a.large_ids[0], control=True)


_FTS_TEMPLATES = (
    "{w}",
    '"{w}"',
    "{w}*",
    "^{w}",
    "NEAR({w} {x})",
    "NEAR({w} {x}, 50)",
    "{w} NEAR/3 {x}",
    "content: {w}",
    "body: {w}",
    "ctx: {w}",
    "{{body ctx}}: {w}",
    "- {w}",
    "conv: {w}",
    "{w} OR {x}",
    "{w} AND {x}",
    "{w} NOT {x}",
    "({w}) OR ({x})",
    "{w}) OR (conv: *",
    '"{w}" OR "*"',
    '{w}" OR conv:"',
    "* OR {w}",
    "{w} & {x}",
    "{w} | {x}",
    "!{w}",
    "{w}:*",
    "{w} <-> {x}",
    "{w} <2> {x}",
    "{w}:A",
    "'{w}' | '{x}'",
    "!!{w} & !({x})",
)


def _fts_cases(world: World) -> Iterator[Case]:
    f = "fts syntax"
    v, a = world.victim, world.attacker
    targets = [
        ("shared word", SHARED[0], SHARED[2]),
        ("victim canary", v.canaries[0], v.canaries[5]),
        ("victim canary prefix", v.canaries[0][:4], "zvic"),
        ("victim search token", v.search_token, v.search_token),
    ]
    for label, w, x in targets:
        for template in _FTS_TEMPLATES:
            query = template.format(w=w, x=x)
            yield _tool(f, label, "lcm_grep", {"query": query, "limit": 50})
            yield _store(f, label, "search", query, limit=100)
    for template in ("conv: {t}", 'conv : "{t}"', "{t} OR *", "conv:{t} OR conv:*"):
        query = template.format(t=v.search_token)
        for scope in ("messages", "summaries"):
            yield _tool(f, "victim token, scoped", "lcm_grep", {"query": query, "scope": scope})
    # Controls: the attacker's own canary, wrapped in each operator, is found.
    own = a.canaries[0]
    for template in _FTS_TEMPLATES:
        # Negations, and quotes that make a required phrase of other words, rightly find nothing.
        if "!" in template or "NOT" in template or 'conv:"' in template:
            continue
        query = template.format(w=own, x=SHARED[1])
        yield _tool(f, "own canary", "lcm_grep", {"query": query, "limit": 50}, control=True)


_SQL_PIECES = (
    "'",
    "''",
    '"',
    ";",
    "--",
    "/*",
    "*/",
    "%",
    "_",
    "\\",
    "\x00",
    "' OR '1'='1",
    "' OR 1=1 --",
    '" OR ""="',
    "'; DROP TABLE messages; --",
    "'; DELETE FROM conversations; --",
    "') UNION SELECT json FROM messages --",
    "' UNION SELECT content FROM large_contents --",
    "%' OR conversation_id LIKE '%",
    "\\'; SELECT pg_sleep(1); --",
    "$$; SELECT 1; $$",
    "E'\\x00'",
    "%_%",
    "\\%",
    "*/ OR /*",
)


def _sql_cases(world: World) -> Iterator[Case]:
    f = "sql metacharacters"
    v, a = world.victim, world.attacker
    for piece in _SQL_PIECES:
        for query in (piece, f"{SHARED[0]}{piece}", f"{piece} {SHARED[3]} {piece}"):
            yield _tool(f, "query", "lcm_grep", {"query": query, "limit": 50})
            yield _tool(f, "regex", "lcm_grep", {"query": query, "mode": "regex", "limit": 50})
            yield _store(f, "query", "search", query, limit=100)
        yield _tool(f, "id", "lcm_expand", {"id": f"{v.message_ids[0]}{piece}"})
        yield _tool(f, "id", "lcm_describe", {"id": piece})
        yield _tool(f, "scope", "lcm_grep", {"query": SHARED[0], "scope": f"all{piece}"})
        yield _store(f, "mode", "search", SHARED[0], mode=f"text{piece}")
        yield _store(f, "id", "get_large_content", f"{v.large_ids[0]}{piece}")
        # The conversation id itself carrying SQL: the store must answer nothing or refuse.
        forged = f"{a.conversation_id}{piece}"
        yield _store(f, "conversation id", "get_messages", conversation=forged)
        yield _store(f, "conversation id", "search", SHARED[0], conversation=forged)
        yield _store(f, "conversation id", "get_message", v.message_ids[0], conversation=forged)
    for piece in _SQL_PIECES[:12]:
        query = f"{a.canaries[1]}{piece}"
        yield _tool(f, "own canary", "lcm_grep", {"query": query}, control=True)
        yield _store(f, "own canary", "search", query, control=True)


_BOMBS = (
    r"(a+)+$",
    r"(a+)+!x",
    r"(a|a)*$",
    r"(a|aa)+$",
    r"(a*)*b",
    r"(.*a){25}",
    r"((a+)+)+c",
    r"(x+x+)+y",
    r"^(\w+\s?)*$",
    r"(a|b|ab)*c",
    r"(?:a+){1000}",
    r"a{1000}{1000}",
    r"(a{1,1000}){1,1000}z",
    r"(.*){1,32000}[bc]",
    r"(\1?a)+$",
    r"(?=(a+))*+b",
    r"(?<!x)(a+)+$",
    r"[\s\S]*[\s\S]*[\s\S]*[\s\S]*z",
)


def _regex_cases(world: World) -> Iterator[Case]:
    f = "regex bombs"
    v = world.victim
    for bomb in _BOMBS:
        for scope in ("messages", "all"):
            yield _tool(f, "bomb", "lcm_grep", {"query": bomb, "mode": "regex", "scope": scope})
        yield _store(f, "bomb", "search", bomb, mode="regex")
        yield _tool(f, "bomb as text", "lcm_grep", {"query": bomb})
    reach = (
        r"zvic[0-9a-f]+",
        r"zvic",
        r"(?i)ZVIC",
        r"z.ic[0-9a-f]{10}",
        r".",
        r"(?s).*",
        r"[\s\S]",
        r"^",
        r"$",
        r"\w+",
        v.canaries[0],
        r"" + v.conversation_id,
        r"msg_[0-9a-f]{16}",
        r"lc_[0-9a-f]{16}",
        r"sum_[0-9a-f]{16}",
        r"(?P<x>zvic)(?P=x)?",
        r"\bzvic",
        r"zv(?#comment)ic",
        r"z\x76ic",
        r"z\u0076ic",
        r"z[v]ic",
        r"(?x) z v i c",
    )
    for pattern in reach:
        for scope in ("messages", "summaries", "all"):
            yield _tool(f, "reach", "lcm_grep", {"query": pattern, "mode": "regex", "scope": scope})
        yield _store(f, "reach", "search", pattern, mode="regex", limit=100)
    for pattern in (r"zatk[0-9a-f]+", r"(?i)ZATK", r"z\x61tk", r"(a+)+$|zatk", r"zat(?#c)k"):
        yield _tool(f, "own canary", "lcm_grep", {"query": pattern, "mode": "regex"}, control=True)
        yield _store(f, "own canary", "search", pattern, mode="regex", control=True)


def _cursor_cases(world: World) -> Iterator[Case]:
    f = "cursors"
    v, a = world.victim, world.attacker
    stolen: list[tuple[str, str, str, str]] = []
    for query, mode in ((SHARED[0], "text"), (SHARED[4], "text"), (r"\w+", "regex")):
        for scope in ("messages", "all"):
            page = world.store.search(v.conversation_id, query, mode=mode, scope=scope, limit=1)
            if page.next_cursor:
                stolen.append((query, mode, scope, page.next_cursor))
    for query, mode, scope, cursor in stolen:
        args = {"query": query, "mode": mode, "scope": scope, "cursor": cursor}
        yield _tool(f, "victim's cursor", "lcm_grep", args)
        yield _store(f, "victim's cursor", "search", query, mode=mode, scope=scope, cursor=cursor)
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        for offset in (0, 1, 2, 50, 4_999, 10**6, -1, 2**61, 2**62 + 1, 2**63, 1.5, "1"):
            tampered = _b64({**raw, "o": offset})
            yield _tool(f, "victim's, offset changed", "lcm_grep", {**args, "cursor": tampered})
        yield _tool(f, "victim's, cut", "lcm_grep", {**args, "cursor": cursor[:-3]})
        yield _tool(f, "victim's, padded", "lcm_grep", {**args, "cursor": cursor + "=="})
    # Forged with the attacker's own query hash (taken from its own cursor) and any offset.
    for query, mode in ((SHARED[0], "text"), (r"\w+", "regex"), (SHARED[4], "text")):
        for scope in ("messages", "summaries", "all"):
            own = encode_cursor(a.conversation_id, mode, scope, query, 0)
            digest = json.loads(base64.urlsafe_b64decode(own + "=" * (-len(own) % 4)))["q"]
            for offset in (1, 7, 5_000, 5_001, 49_999, 10**9, 1 << 61, (1 << 62) | 5, 2**63 - 1):
                forged = _b64({"o": offset, "q": digest})
                yield _tool(
                    f,
                    "forged, own hash",
                    "lcm_grep",
                    {"query": query, "mode": mode, "scope": scope, "cursor": forged},
                )
                yield _store(
                    f, "forged, own hash", "search", query, mode=mode, scope=scope, cursor=forged
                )
    v_hash = hashlib.sha256(
        json.dumps([v.conversation_id, "text", "all", SHARED[0]]).encode()
    ).hexdigest()[:16]
    malformed = [
        "",
        "=",
        "!!!",
        "e30",
        _b64([]),
        _b64(None),
        _b64({"o": 0}),
        _b64({"q": v_hash}),
        _b64({"o": 0, "q": v_hash}),
        _b64({"o": 0, "q": None}),
        _b64({"o": None, "q": v_hash}),
        _b64({"o": {"$gt": 0}, "q": v_hash}),
        _b64(b"\xff\xfe\x00"),
        _b64(b'{"o": 1, "q": "x"'),
        "A" * 10_000,
        "\x00",
        "é",
        "%",
        "' OR 1=1 --",
        v.conversation_id,
        v.search_token,
    ]
    for cursor in malformed:
        yield _tool(f, "malformed", "lcm_grep", {"query": SHARED[0], "cursor": cursor})
        yield _store(f, "malformed", "search", SHARED[0], cursor=cursor)
    # Controls: the attacker's real next page.
    for query, mode in ((SHARED[0], "text"), (r"zatk\w+", "regex")):
        page = world.store.search(a.conversation_id, query, mode=mode, limit=2)
        assert page.next_cursor, "the attacker's own search must have a second page"
        args = {"query": query, "mode": mode, "limit": 2, "cursor": page.next_cursor}
        yield _tool(f, "own next page", "lcm_grep", args, control=True)
        yield _store(
            f,
            "own next page",
            "search",
            query,
            mode=mode,
            limit=2,
            cursor=page.next_cursor,
            control=True,
        )


_NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    -(10**18),
    10**18,
    2**63,
    2**64 + 1,
    1.5,
    1e308,
    "10",
    " 7 ",
    "ten",
    "1e3",
    "0x10",
    "-0",
    "NaN",
    True,
    False,
    None,
    [],
    {},
    [5],
)


def _limit_cases(world: World) -> Iterator[Case]:
    f = "limits"
    v, a = world.victim, world.attacker
    for number in _NUMBERS:
        yield _tool(f, "grep limit", "lcm_grep", {"query": SHARED[1], "limit": number})
        yield _tool(f, "expand limit", "lcm_expand", {"id": v.large_ids[0], "limit": number})
        yield _tool(f, "expand offset", "lcm_expand", {"id": v.summary_ids[0], "offset": number})
        yield _tool(f, "own expand offset", "lcm_expand", {"id": a.large_ids[0], "offset": number})
        if isinstance(number, int) and not isinstance(number, bool):
            yield _store(f, "search limit", "search", SHARED[1], limit=number)
            yield _store(f, "get_messages range", "get_messages", number)
            yield _store(f, "get_messages range", "get_messages", 0, number)
            yield _store(f, "get_messages range", "get_messages", -number, number)
    for number in (1, "3", 50, 10**9):
        yield _tool(
            f, "own canary", "lcm_grep", {"query": a.canaries[2], "limit": number}, control=True
        )
    for offset in (0, "1", 100):
        yield _tool(
            f,
            "own large content",
            "lcm_expand",
            {"id": a.large_ids[0], "offset": offset},
            control=True,
        )
    yield _store(f, "own messages", "get_messages", -(10**18), 10**18, control=True)


_WRONG: tuple[Any, ...] = (
    None,
    True,
    0,
    -1.5,
    [],
    ["lcm"],
    {},
    {"$ne": None},
    {"id": "x"},
    [[["deep"]]],
)


def _type_cases(world: World) -> Iterator[Case]:
    f = "wrong types"
    v, a = world.victim, world.attacker
    base = {
        "lcm_grep": {"query": SHARED[0]},
        "lcm_describe": {"id": v.message_ids[0]},
        "lcm_expand": {"id": v.large_ids[0]},
    }
    arguments = {
        "lcm_grep": ("query", "mode", "scope", "limit", "cursor"),
        "lcm_describe": ("id",),
        "lcm_expand": ("id", "offset", "limit"),
    }
    for name, names in arguments.items():
        for arg in names:
            for value in _WRONG:
                yield _tool(f, f"{arg}", name, {**base[name], arg: value})
        # Arguments the schema does not have, among them the other side's conversation.
        for extra in (
            {"conversation_id": v.conversation_id},
            {"conversation": v.conversation_id},
            {"session_key": "isolation-victim"},
            {"store": ":memory:"},
            {"__class__": "x"},
        ):
            yield _tool(f, "extra argument", name, {**base[name], **extra})
        for raw in (
            "",
            "null",
            "[]",
            "[1, 2]",
            '[["query", "deploy"]]',
            "1",
            '"deploy"',
            "true",
            "{",
            "{'query': 'deploy'}",
            '{"query": "deploy",}',
            json.dumps(base[name]) + "garbage",
            "\x00",
            json.dumps([base[name]]),
        ):
            yield _host(f, "raw arguments", name, raw)
        for raw in (None, 7, 1.5, ["a"], ("id",), b"{}"):
            yield _tool(f, "arguments not an object", name, raw)
    for name in ("lcm_grep ", "LCM_GREP", "../lcm_grep", "lcm_grep\x00", "", "grep", None, 5):
        yield _tool(f, "tool name", name, {"query": SHARED[0]})  # type: ignore[arg-type]
    for value in (None, 5, ["x"], {"a": 1}, b"deploy"):
        yield _store(f, "search query", "search", value)
        yield _store(f, "get_message id", "get_message", value)
        yield _store(f, "search scope", "search", SHARED[0], scope=value)
        yield _store(f, "search cursor", "search", SHARED[0], cursor=value)
    for value in ("1", None, 1.5, [0]):
        yield _store(f, "get_messages seq", "get_messages", value)
    # Controls: numbers as strings, JSON text through the host, a list of pairs.
    own = a.canaries[3]
    yield _host(f, "own, JSON text", "lcm_grep", json.dumps({"query": own}), control=True)
    yield _host(
        f, "own, limit as text", "lcm_grep", json.dumps({"query": own, "limit": "2"}), control=True
    )
    yield _host(f, "list of pairs", "lcm_grep", [["query", own]])
    yield _tool(
        f, "own, JSON string", "lcm_expand", json.dumps({"id": a.large_ids[0]}), control=True
    )


def _long_cases(world: World, *, megabytes: float) -> Iterator[Case]:
    f = "long inputs"
    v, a = world.victim, world.attacker
    size = int(megabytes * 1_000_000)
    words = " ".join(f"w{i}" for i in range(size // 7))[:size]
    long_texts = {
        "1 MB of one letter": "a" * size,
        "1 MB of distinct words": words,
        "1 MB quoted phrase": f'"{words}"',
        "1 MB of quotes": '"' * size,
        "1 MB of operators": "NEAR( OR * " * (size // 11),
        "1 MB of NUL": "\x00" * size,
        "1 MB of the victim's words": (" ".join(v.canaries) + " ") * (size // 300),
    }
    for label, text in long_texts.items():
        yield _tool(f, label, "lcm_grep", {"query": text})
        yield _tool(f, label, "lcm_grep", {"query": text, "mode": "regex"})
        yield _tool(f, label, "lcm_expand", {"id": text})
        yield _tool(f, label, "lcm_grep", {"query": SHARED[0], "cursor": text})
        yield _host(f, label, "lcm_describe", json.dumps({"id": text}))
        yield _store(f, label, "search", text)
        yield _store(f, label, "get_message", text)
    own = a.canaries[6]
    for label, text in (
        ("100 kB of filler, then the own canary", "filler " * 14_000 + own),
        ("own canary, then 100 kB of filler", own + " filler" * 14_000),
    ):
        yield _tool(f, label, "lcm_grep", {"query": text}, control=True)
        yield _store(f, label, "search", text, control=True)


def attacks(world: World, *, megabytes: float = 1.0) -> list[Case]:
    """Every case of every family, in a fixed order."""
    return [
        *_id_cases(world),
        *_fts_cases(world),
        *_sql_cases(world),
        *_regex_cases(world),
        *_cursor_cases(world),
        *_limit_cases(world),
        *_type_cases(world),
        *_long_cases(world, megabytes=megabytes),
    ]


def quick_sample(cases: Sequence[Case], per_family: int = 12) -> list[Case]:
    """About ``per_family`` cases of each family, spread over it, with at least two controls."""
    out: list[Case] = []
    for family in FAMILIES:
        own = [c for c in cases if c.family == family]
        attacks_ = [c for c in own if not c.control]
        controls = [c for c in own if c.control]
        step = max(1, len(attacks_) // max(1, per_family - 2))
        out += attacks_[::step][: per_family - 2]
        out += controls[:: max(1, len(controls) // 2)][:2]
    return out


# ---------------------------------------------------------------- judging


@dataclass(frozen=True)
class Outcome:
    """What one case gave the attacker, judged."""

    case: Case
    text: str
    seconds: float
    leaked: tuple[str, ...]
    error: str | None
    clear: bool
    found_own: bool


def _input_text(case: Case, conversation: str) -> str:
    return f"{case.name!r} {case.args!r} {conversation} " + json.dumps(
        case.args, ensure_ascii=False, default=repr
    )


def _error_of_tool_result(text: str) -> tuple[str | None, bool]:
    """(error message, clear) of a tool result; a result that is not JSON is an unclear error."""
    try:
        result = json.loads(text)
    except ValueError:
        return f"not JSON: {text[:200]}", False
    if not isinstance(result, dict):
        return f"not a JSON object: {text[:200]}", False
    error = result.get("error")
    if error is None:
        return None, True
    message = str(error)
    return message, isinstance(error, str) and _one_line(message)


#: A tool error naming one of Python's own exceptions: an internal failure the
#: model cannot act on ("lcm_grep failed: RecursionError: ..."), not a clear error.
_INTERNAL = re.compile(
    r"\b(?:TypeError|AttributeError|KeyError|IndexError|NameError|RecursionError|"
    r"OverflowError|ZeroDivisionError|AssertionError|UnicodeError|MemoryError|"
    r"OperationalError|ProgrammingError|DataError|InternalError)\b"
)


def _one_line(message: str) -> bool:
    """A clear tool error: one line, no traceback, no internal Python exception."""
    return (
        "\n" not in message
        and "Traceback" not in message
        and 'File "' not in message
        and not _INTERNAL.search(message)
    )


def attempt(world: World, case: Case) -> Outcome:
    """Run ``case`` as the attacker and judge what came back."""
    conversation = case.conversation or world.attacker.conversation_id
    error: str | None
    start = time.perf_counter()
    if case.surface == "tool":
        text = world.attacker.engine.handle_tool_call(case.name, case.args)
        seconds = time.perf_counter() - start
        error, clear = _error_of_tool_result(text)
    elif case.surface == "host":
        text = world.host.handle_tool_call(case.name, case.args)
        seconds = time.perf_counter() - start
        error, clear = _error_of_tool_result(text)
    else:
        positional, keywords = case.args
        try:
            value = getattr(world.store, case.name)(conversation, *positional, **keywords)
            seconds = time.perf_counter() - start
            text, error, clear = repr(value), None, True
        except (StoreError, ValueError, TypeError) as exc:
            # The Python API's documented errors; a database's own message may
            # span lines (PostgreSQL's LINE/HINT) and is still the caller's to read.
            seconds = time.perf_counter() - start
            error = f"{type(exc).__name__}: {exc}"
            text, clear = error, "Traceback" not in str(exc)
        except Exception as exc:  # a raw driver error is a finding, not a crash of the script
            seconds = time.perf_counter() - start
            error = f"{type(exc).__name__}: {exc}"
            text, clear = error + "\n" + traceback.format_exc(), False
    typed = _input_text(case, conversation)
    leaked = tuple(s for s in world.victim.secrets if s in text and s not in typed)
    found_own = any(s in text and s not in typed for s in world.attacker.secrets)
    return Outcome(case, text, seconds, leaked, error, clear, found_own)


# ---------------------------------------------------------------- the report


@dataclass
class StoreReport:
    """One store's outcomes and the checks around them."""

    kind: str
    outcomes: list[Outcome]
    setup: str
    victim_missed: list[str]
    attacker_missed: list[str]

    def failures(self) -> list[str]:
        """Every broken invariant, one line each (empty when the store kept isolation)."""
        out = []
        for o in self.outcomes:
            where = f"{self.kind} {o.case.family} / {o.case.label} ({o.case.surface} {o.case.name})"
            if o.leaked:
                out.append(f"LEAK {where}: {', '.join(o.leaked[:3])}")
            if o.error is not None and not o.clear:
                out.append(f"UNCLEAR ERROR {where}: {o.error[:200]!r}")
            if o.case.control and not o.found_own:
                out.append(f"MISSED CONTROL {where}: {o.text[:200]!r}")
        if self.victim_missed:
            out.append(f"{self.kind}: the victim lost canaries {self.victim_missed[:3]}")
        if self.attacker_missed:
            out.append(
                f"{self.kind}: the attacker's own canaries not found {self.attacker_missed[:3]}"
            )
        return out


def attack_store(store: Store, kind: str, *, quick: bool) -> StoreReport:
    """Build the world in ``store``, run the attack set (a sample when ``quick``), judge it."""
    world = build_world(store, kind, turns=4 if quick else 6)
    try:
        attacker_missed = owner_finds_everything(world.attacker)
        cases = attacks(world, megabytes=0.1 if quick else 1.0)
        if quick:
            cases = quick_sample(cases)
        outcomes = [attempt(world, case) for case in cases]
        victim_missed = owner_finds_everything(world.victim)
        v = world.victim
        setup = (
            f"the victim holds {len(v.canaries)} canaries in {len(v.message_ids)} messages"
            f" (large contents: {len(v.large_ids)}), {len(v.summarised)} of them also in its"
            f" summaries ({len(v.summary_ids)})"
        )
        return StoreReport(kind, outcomes, setup, victim_missed, attacker_missed)
    finally:
        world.victim.engine.close()
        world.attacker.engine.close()


def _table(report: StoreReport) -> list[str]:
    lines = [
        "| attack family | cases | leaks | errors (clear) | controls found | max ms per case"
        " | largest result (chars) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for family in [*FAMILIES, None]:
        rows = [o for o in report.outcomes if family is None or o.case.family == family]
        if not rows:
            continue
        errors = [o for o in rows if o.error is not None]
        controls = [o for o in rows if o.case.control]
        name = family or "**all**"
        lines.append(
            f"| {name} | {len(rows):,} | {sum(bool(o.leaked) for o in rows)} |"
            f" {len(errors):,} ({sum(o.clear for o in errors):,}) |"
            f" {sum(o.found_own for o in controls)} / {len(controls)} |"
            f" {max(o.seconds for o in rows) * 1000:,.0f} |"
            f" {max(len(o.text) for o in rows):,} |"
        )
    return lines


def _surfaces(report: StoreReport) -> str:
    counts = Counter(o.case.surface for o in report.outcomes)
    return ", ".join(f"{counts[s]:,} through the {s}" for s in ("tool", "host", "store"))


def run(
    quick: bool = False,
    stores: Sequence[tuple[str, Callable[[], contextlib.AbstractContextManager[Store]]]] = (),
) -> tuple[str, list[str]]:
    """The tables of every store as markdown, and the broken invariants (empty: all kept)."""
    started = time.perf_counter()
    lines: list[str] = []
    failures: list[str] = []
    for kind, opener in stores:
        with opener() as store:
            report = attack_store(store, kind, quick=quick)
        failures += report.failures()
        lines += [
            f"#### {kind}",
            "",
            f"{len(report.outcomes):,} cases ({_surfaces(report)}); {report.setup}. After the"
            f" attacks the victim's own `lcm_grep` / `lcm_expand` still found"
            f" {'NOT ' if report.victim_missed else ''}every canary.",
            "",
            *_table(report),
            "",
        ]
    lines.append(f"_{time.perf_counter() - started:.1f} s in all._")
    return "\n".join(lines), failures


@contextlib.contextmanager
def sqlite_file_store() -> Iterator[Store]:
    """An SQLite archive in a temporary file, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="ce-isolation-") as tmp:
        store = SQLiteStore(Path(tmp) / "archive.db")
        try:
            yield store
        finally:
            store.close()


def postgres_store(url: str) -> Callable[[], contextlib.AbstractContextManager[Store]]:
    """A ``PostgresStore`` opener in a schema of its own, dropped afterwards."""

    @contextlib.contextmanager
    def opener() -> Iterator[Store]:
        import psycopg
        from psycopg import sql

        from contextengine.store.postgres import PostgresStore

        schema = f"ce_isolation_{os.getpid()}_{time.monotonic_ns() % 10**9}"
        store = PostgresStore(url, schema=schema, regex_timeout_ms=1_000)
        try:
            yield store
        finally:
            store.close()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )

    return opener


def pg_unreachable(url: str) -> str | None:
    """Why no PostgreSQL server answers at ``url``, or None when one does."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no server at {url} ({str(exc).strip().splitlines()[0]})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 100 cases per store")
    parser.add_argument("--pg-url", default=PG_URL, help="PostgreSQL server to attack too")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--output", default="-", help="page whose figures to rewrite ('-': print)")
    args = parser.parse_args(argv)
    stores: list[tuple[str, Callable[[], contextlib.AbstractContextManager[Store]]]] = [
        ("SQLite (file)", sqlite_file_store)
    ]
    note = ""
    if not args.no_pg:
        reason = pg_unreachable(args.pg_url)
        if reason is None:
            stores.append(("PostgreSQL", postgres_store(args.pg_url)))
        else:
            note = f"\n\nPostgreSQL skipped: {reason}."
    body, failures = run(quick=args.quick, stores=stores)
    body += note
    if args.output == "-":
        print(_page.figures(NAME, " --quick" if args.quick else "", body))
    else:
        figures = _page.figures(NAME, " --quick" if args.quick else "", body)
        _page.write_figures(Path(args.output), NAME, SECTION, figures)
        print(f"wrote the isolation figures of {args.output}", file=sys.stderr)
    for line in failures[:50]:
        print(line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
