"""The redaction matrix: every kind of secret, in every place, through both engines.

For each kind of :data:`contextengine.redact.SECRET_KINDS` (one fabricated
example each, never a real key) the secret is planted in one *place* of a
small coding-agent conversation, next to a marker word:

- **user text**: a user message;
- **tool output**: the result of a ``bash`` call;
- **tool arguments**: the JSON arguments of that call;
- **memory context**: ``compress(..., memory_context=...)``.

Each engine, ``load_engine("compressor", ...)`` and ``load_engine("lcm",
store=":memory:", ...)``, then compacts with ``compress(messages, force=True,
memory_context=...)`` and a recording summariser (the offline
``DeterministicSummarizer`` underneath, so the summary is real). A cell is

- ``redacted`` when the marker reached the summariser (so the secret's
  carrier was sent) and the secret's value appears in nothing the summariser
  received (every field of every ``SummaryRequest``: ``messages``, ``prompt``,
  ``previous_summary``, ``memory_context``, ``anchors``, ``focus_topic``,
  ``metadata``) nor in any summary the engine put in the context;
- ``LEAK`` when the value appears in any of them;
- ``not sent`` when the marker never reached the summariser (the check would
  prove nothing).

The edge table runs the same check on places beyond the four (a focus topic,
a secret cut by the bound of a long tool output, an earlier summary found in
the history); the speed table times :func:`~contextengine.redact.redact` on 10 MB;
the real-data table counts what the real sessions in ``../shared/data`` get
redacted, by kind (skipped when absent).

Run: ``PYTHONPATH=src python benchmarks/reliability/redaction.py [--quick]
[--no-real-data] [--output docs/reliability.md]`` (``--output`` rewrites the
figures between the markers of that page's "Redaction" section and keeps the
rest of the page; without it the figures are printed). Exits 1 when the
matrix has a leak.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contextengine import (
    DeterministicSummarizer,
    SummaryRequest,
    is_summary_message,
    load_engine,
    load_sessions,
)
from contextengine.engines.compressor.summary import SUMMARY_END
from contextengine.engines.lossless.assemble import is_reference_message
from contextengine.redact import SECRET_KINDS, redact, redact_with_kinds

__all__ = ["CASES", "ENGINES", "PLACES", "main", "run"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SECTION = "Redaction"

NAME = "redaction"


# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

Message = dict[str, Any]

PLACES = ("user text", "tool output", "tool arguments", "memory context")
ENGINES = ("compressor", "lcm")
CONTEXT_LENGTH = 6_000

_PEM_BODY = "MIIEpAIBAAKCAQEA7bq98Xb1Yz3Jk\nq3Jk+/9Zx0Qw1E2r3T4y5U6i7O8p9A=="
_AWS_SECRET = "Xb9kQ2mNvR7tLw4pZs8eYh1cUj5dFa3gKo6iBn0M"
_SIGV4 = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
_AZURE = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6QUJDRA=="
_PYPI = "pypi-AgEIcHlwaS5vcmcCJGE0YjVmNWI0LTJhZmUtNGY0MC1hYjQyLTU3ZmE2ZDI3NjRlMAACKlszLCJmMjk1"
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


@dataclass(frozen=True)
class Case:
    """One fabricated secret of one kind: the text that carries it and the values to hide."""

    kind: str
    text: str
    secrets: tuple[str, ...]


#: One case per kind of SECRET_KINDS, in that order; every value is fabricated.
#: ``secrets`` are the values (or long enough pieces of them) that must not leave.
CASES: tuple[Case, ...] = (
    Case(
        "pem-private-key",
        f"-----BEGIN RSA PRIVATE KEY-----\n{_PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        tuple(_PEM_BODY.splitlines()),
    ),
    Case("url-password", "psql postgres://app:Hunt3rPw9@db.internal:5432/prod", ("Hunt3rPw9",)),
    Case("cli-password", "curl -u admin:s3cr3tPass9 https://api.example.com", ("s3cr3tPass9",)),
    Case(
        "aws-sigv4-signature",
        f"Authorization: AWS4-HMAC-SHA256 Credential=x/y, Signature={_SIGV4}",
        (_SIGV4,),
    ),
    Case("password", "PGPASSWORD=hunter2pw psql -h db", ("hunter2pw",)),
    Case("passphrase", 'passphrase: "correct horse battery staple"', ("correct horse",)),
    Case("secret", "APP_CLIENT_SECRET=cs_abcdef123456", ("cs_abcdef123456",)),
    Case("authorization", "Authorization: Basic dXNlcjpwYXNzd29yZA==", ("dXNlcjpwYXNzd29yZA",)),
    Case("named-token", "export GITHUB_TOKEN=plainvalue123", ("plainvalue123",)),
    Case("named-key", "X-Api-Key: abcdef123456", ("abcdef123456",)),
    Case(
        "url-query",
        "GET https://api.example.com/v2/export?token=9f8e7d6c5b4a3928&f=csv",
        ("9f8e7d6c5b4a3928",),
    ),
    Case(
        "azure-storage-key",
        f"AccountName=acme;AccountKey={_AZURE};EndpointSuffix=x",
        (_AZURE[:40],),
    ),
    Case(
        "aws-secret-access-key",
        f"aws configure set aws_secret_access_key {_AWS_SECRET}",
        (_AWS_SECRET,),
    ),
    Case(
        "anthropic",
        "key sk-ant-api03-Xq7mP2vL9kR4tW8zB1nC6yF3hJ5dG0sA-aBcDeF",
        ("Xq7mP2vL9kR4tW8zB1nC",),
    ),
    Case(
        "openai",
        "using sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90",
        ("Ab12Cd34Ef56Gh78Ij90",),
    ),
    Case("stripe", "stripe --key sk_live_51HxYzAbCdEfGhIjKlMnOpQrStUv", ("51HxYzAbCdEfGhIjKlMn",)),
    Case(
        "stripe-webhook-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", ("MfKQ9r8GKYqrTwjUPD8I",)
    ),
    Case("aws-access-key-id", "aws id AKIAZ7YV3EXAMPLE7QXP", ("AKIAZ7YV3EXAMPLE7QXP",)),
    Case(
        "github-token",
        "push with ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        ("16C7e42F292c6912E771",),
    ),
    Case(
        "github-fine-grained-pat",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
        ("11ABCDEFG0123456789_abcdef",),
    ),
    Case("gitlab-token", "glpat-xY7zAb3CdE9fGh1IjK2L", ("xY7zAb3CdE9fGh1IjK2L",)),
    Case(
        "slack-token",
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        ("AbCdEfGhIjKlMnOpQrStUvWx",),
    ),
    Case(
        "slack-webhook",
        "https://hooks.slack.com/services/T024BE7LD/B01ABCDEF12/aBcDeFgHiJkLmNoPqRsTuVwX",
        ("aBcDeFgHiJkLmNoPqRsTuVwX",),
    ),
    Case(
        "discord-webhook",
        "https://discord.com/api/webhooks/1234567890123456789/"
        "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-AbCdEf",
        ("AbCdEfGhIjKlMnOpQrStUvWxYz0123",),
    ),
    Case(
        "discord-bot-token",
        "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.G7xKpQ.ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210",
        ("ZyXwVuTsRqPoNmLkJiHgFeDcBa98",),
    ),
    Case("google-api-key", "maps AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI", ("DdI0hCZtE6vySjMm",)),
    Case(
        "google-oauth-client-secret",
        "cs 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",
        ("1a2B3c4D5e6F7g8H9i0J",),
    ),
    Case(
        "huggingface-token",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
        ("AbCdEfGhIjKlMnOpQrStUvWxYz0123",),
    ),
    Case(
        "npm-token",
        "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        ("AbCdEfGhIjKlMnOpQrStUvWxYz0123",),
    ),
    Case("pypi-token", f"twine upload -u __token__ -p {_PYPI}", (_PYPI[5:45],)),
    Case(
        "sendgrid-key",
        "SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012",
        ("wXyZ0123456789aBcDeF",),
    ),
    Case(
        "twilio-api-key",
        "twilio SK0123456789abcdef0123456789abcdef",
        ("0123456789abcdef0123456789abcdef",),
    ),
    Case("shopify-token", "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", ("fedcba9876543210fedcba98",)),
    Case(
        "digitalocean-token",
        "dop_v1_" + "0f1e2d3c4b5a6978" * 4,
        ("0f1e2d3c4b5a69780f1e2d3c",),
    ),
    Case("jwt", f"cookie {_JWT}", ("SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",)),
    Case(
        "bearer",
        "X-Upstream-Auth: Bearer 0a1b2c3d4e5f6a7b8c9d",
        ("0a1b2c3d4e5f6a7b8c9d",),
    ),
)


class RecordingSummarizer:
    """The offline summariser, keeping every request and every summary it wrote."""

    def __init__(self) -> None:
        self.inner = DeterministicSummarizer()
        self.requests: list[SummaryRequest] = []
        self.summaries: list[str] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        text = self.inner.summarize(request)
        self.summaries.append(text)
        return text

    def received(self) -> str:
        """Everything the summariser was given, as one text."""
        return "\n".join(
            json.dumps(asdict(request), ensure_ascii=False, default=str)
            for request in self.requests
        )


# ---------------------------------------------------------------- the conversation

_FILLER = (
    "The build of the payments service fails on the integration suite; the log points at "
    "the connection pool settings in config/pool.yaml and the retry policy in src/retry.py. "
)


def _marker(kind: str, place: str) -> str:
    """A word unique to one cell, never taken for a secret, that travels with the secret."""
    return f"MARK{zlib.crc32(f'{kind}/{place}'.encode()) % 10**8:08d}"


def conversation(text: str, place: str, marker: str, *, turns: int = 8) -> list[Message]:
    """A coding session whose third turn carries ``text`` in ``place``.

    The carrier sits after the compressor's protected head (the system prompt
    and three messages) and long before the tail, so both engines summarise
    it; every turn holds enough prose that pruning tool outputs alone cannot
    reach the target and the compressor has to summarise.
    """
    carried = f"{marker} {text} {marker}"
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent. Work in /srv/app."},
        {"role": "user", "content": "Fix the failing integration tests. " + _FILLER * 3},
        {"role": "assistant", "content": "Looking at the logs first. " + _FILLER * 3},
    ]
    for turn in range(turns):
        call_id = f"call_{turn}"
        user = f"Turn {turn}: keep going. " + _FILLER * 3
        args = {"command": f"pytest tests/integration -k case{turn}"}
        output = f"collected 12 items\nFAILED case{turn}\n" + _FILLER * 2
        if turn == 1:
            if place == "user text":
                user = f"{user}\nAlso: {carried}"
            elif place == "tool arguments":
                args = {"command": f"{carried} && pytest -k case1"}
            elif place == "tool output":
                output = f"{output}\n{carried}\n"
        messages += [
            {"role": "user", "content": user},
            {
                "role": "assistant",
                "content": "Running the suite. " + _FILLER,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps(args)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": output},
            {"role": "assistant", "content": "Next step. " + _FILLER * 2},
        ]
    messages.append({"role": "user", "content": "Now summarise what you changed."})
    return messages


def _engine(name: str, summarizer: RecordingSummarizer, context_length: int) -> Any:
    if name == "lcm":
        return load_engine(
            "lcm", context_length=context_length, store=":memory:", summarizer=summarizer
        )
    return load_engine(name, context_length=context_length, summarizer=summarizer)


def _summaries_in(context: Sequence[Message]) -> str:
    """The messages of ``context`` holding a summary: the compressor's, lcm's reference blocks."""
    return "\n".join(
        json.dumps(message, ensure_ascii=False)
        for message in context
        if is_summary_message(message) or is_reference_message(message)
    )


def _leaked(secrets: Sequence[str], text: str) -> bool:
    # Also the JSON-escaped form: requests and contexts are compared as JSON.
    return any(s in text or json.dumps(s)[1:-1] in text for s in secrets)


@dataclass(frozen=True)
class Cell:
    kind: str
    place: str
    engine: str
    #: "redacted", "LEAK" or "not sent".
    verdict: str
    #: Where a leak was seen: "request", "summary" or both.
    where: str = ""


def check(
    case: Case,
    place: str,
    engine_name: str,
    *,
    messages: list[Message] | None = None,
    focus_topic: str | None = None,
    marker: str | None = None,
    memory_context: str = "",
    context_length: int = CONTEXT_LENGTH,
) -> Cell:
    """Plant ``case`` in ``place`` (or run the given ``messages``), compact, and judge."""
    marker = marker or _marker(case.kind, place)
    if messages is None:
        messages = conversation(case.text, place, marker)
        if place == "memory context":
            memory_context = f"Facts from memory: {marker} {case.text} {marker}"
    summarizer = RecordingSummarizer()
    engine = _engine(engine_name, summarizer, context_length)
    try:
        engine.on_session_start(f"redaction-{case.kind}-{place}")
        context = engine.compress(
            list(messages), force=True, focus_topic=focus_topic, memory_context=memory_context
        )
    finally:
        engine.on_session_end(f"redaction-{case.kind}-{place}", messages)
    received = summarizer.received()
    where = [
        name
        for name, text in (("request", received), ("summary", _summaries_in(context)))
        if _leaked(case.secrets, text)
    ]
    if where:
        return Cell(case.kind, place, engine_name, "LEAK", "+".join(where))
    if marker not in received:
        return Cell(case.kind, place, engine_name, "not sent")
    return Cell(case.kind, place, engine_name, "redacted")


def matrix(cases: Sequence[Case] = CASES) -> list[Cell]:
    return [check(case, place, engine) for case in cases for place in PLACES for engine in ENGINES]


# ---------------------------------------------------------------- places beyond the four


def _output_cut_at_the_bound(case: Case, marker: str, tail_chars: int, turns: int) -> list[Message]:
    """A tool output so long that the engine keeps only its head and its last
    ``tail_chars`` characters, the cut falling inside the secret's name: the
    tail starts with ``WORD=<value>``, which no rule can tell from any other
    assignment."""
    name, _, value = case.text.partition("=")
    cut = len(name) - 4
    tail = f"{name[cut:]}={value} {marker}\n"
    tail += "y" * (tail_chars - len(tail))
    output = f"{marker}\n" + "x" * 9_000 + "\n" + name[:cut] + tail
    messages = conversation("", "none", marker, turns=turns)
    for message in messages:
        if message.get("role") == "tool":
            message["content"] = output
            break
    return messages


def _with_earlier_summary(case: Case, marker: str) -> list[Message]:
    """A compressor history whose summary message carries the secret.

    As a host would hold it after a compaction by another tool or an older
    version: the compressor takes the summary out and sends its text as
    ``previous_summary``.
    """
    first = _engine("compressor", RecordingSummarizer(), CONTEXT_LENGTH).compress(
        conversation("", "none", marker), force=True
    )
    out: list[Message] = []
    for message in first:
        content = message.get("content")
        if is_summary_message(message) and isinstance(content, str):
            planted = f"{marker} {case.text}\n{SUMMARY_END}"
            message = {**message, "content": content.replace(SUMMARY_END, planted, 1)}
        out.append(message)
    return out + conversation("", "none", "", turns=6)[1:]


def edge_cases(engines: Sequence[str] = ENGINES) -> list[tuple[str, str, Cell]]:
    """(place, what it shows, cell) for places beyond the four of the matrix."""
    password = next(case for case in CASES if case.kind == "password")
    github = next(case for case in CASES if case.kind == "github-token")
    rows: list[tuple[str, str, Cell]] = []
    for engine in engines:
        marker = _marker("focus", engine)
        rows.append(
            (
                "focus topic (manual /compress with a topic)",
                "`compress(..., focus_topic=...)`",
                check(
                    github,
                    "focus topic",
                    engine,
                    messages=conversation("", "none", marker),
                    focus_topic=f"{marker} {github.text}",
                    marker=marker,
                ),
            )
        )
    # The compressor keeps the last 1,000 characters of a tool output over
    # 3,000; lcm the last 2,667 of a message over 8,000 (in a context big
    # enough that a 9 kB output is not moved out as large content, and a
    # session long enough that it is not in the fresh tail).
    for engine, tail_chars, context_length, turns in (
        ("compressor", 1_000, CONTEXT_LENGTH, 8),
        ("lcm", 2_667, 32_000, 40),
    ):
        if engine not in engines:
            continue
        marker = _marker("cut", engine)
        rows.append(
            (
                "tool output cut by the bound, inside the secret's name",
                "a 9 kB tool output whose kept tail starts with `WORD=<password>`",
                check(
                    password,
                    "tool output cut",
                    engine,
                    messages=_output_cut_at_the_bound(password, marker, tail_chars, turns),
                    marker=marker,
                    context_length=context_length,
                ),
            )
        )
    marker = _marker("earlier", "compressor")
    rows.append(
        (
            "earlier summary found in the history",
            "a summary message (from an older version, another tool) holding a secret",
            check(
                github,
                "earlier summary",
                "compressor",
                messages=_with_earlier_summary(github, marker),
                marker=marker,
            ),
        )
    )
    return rows


# ---------------------------------------------------------------- speed and real data


def speed(megabytes: int = 10) -> tuple[float, float, int]:
    """(MB, CPU seconds, secrets masked) for ``redact`` on a text mixing every case with prose."""
    unit = "\n".join(f"{_FILLER}{case.text} /srv/app/src/key_store.py:12" for case in CASES)
    text = (unit * (megabytes * 1_000_000 // len(unit) + 1))[: megabytes * 1_000_000]
    start = time.process_time()
    _, kinds = redact_with_kinds(text)
    return len(text) / 1e6, time.process_time() - start, sum(kinds.values())


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


def real_data(root: Path = SHARED_DATA) -> list[tuple[str, int, float, float, Counter[str]]]:
    """(corpus, strings, MB, CPU s, redactions by kind) of every message string of the sessions."""
    sources = {
        "spotter (Claude Code)": sorted((root / "spotter" / "transcripts").rglob("*.jsonl")),
        "mini-swe-agent": sorted((root / "mini-swe-agent" / "trajs").glob("*.json")),
        "tau-bench": sorted((root / "tau-bench" / "historical_trajectories").glob("*.json")),
    }
    rows = []
    for name, files in sources.items():
        texts: list[str] = []
        for file in files:
            for session in load_sessions(file):
                _strings(session.messages, texts)
        rows.append((name, texts))
    locomo = root / "LoCoMo" / "locomo10.json"
    if locomo.is_file():
        samples = json.loads(locomo.read_text())
        texts = []
        for sample in samples:
            for value in sample["conversation"].values():
                if isinstance(value, list):
                    _strings(value, texts)  # text, and image URLs with their query strings
        rows.append(("LoCoMo (turns, image URLs)", texts))
    out = []
    for name, texts in rows:
        counts: Counter[str] = Counter()
        start = time.process_time()
        for text in texts:
            counts.update(redact_with_kinds(text)[1])
        seconds = time.process_time() - start
        out.append((name, len(texts), sum(map(len, texts)) / 1e6, seconds, counts))
    return out


# ---------------------------------------------------------------- the report


def _matrix_table(cells: list[Cell]) -> list[str]:
    by = {(c.kind, c.place, c.engine): c for c in cells}
    kinds = list(dict.fromkeys(c.kind for c in cells))
    head = " | ".join(f"{place}, {engine}" for place in PLACES for engine in ENGINES)
    lines = [
        f"| kind | {head} |",
        "|---|" + "---|" * (len(PLACES) * len(ENGINES)),
    ]
    for kind in kinds:
        row = []
        for place in PLACES:
            for engine in ENGINES:
                cell = by[(kind, place, engine)]
                row.append(cell.verdict if cell.verdict != "LEAK" else f"**LEAK** ({cell.where})")
        lines.append(f"| `{kind}` | " + " | ".join(row) + " |")
    return lines


def run(quick: bool = False, real: bool = True) -> str:
    """The matrix, the edge cases, the speed and the real-data counts, as markdown."""
    started = time.perf_counter()
    cells = matrix()
    verdicts = Counter(c.verdict for c in cells)
    lines = [
        f"#### The matrix: {len(CASES)} kinds × {len(PLACES)} places × {len(ENGINES)} engines",
        "",
        f"{len(cells)} cells: {verdicts['redacted']} redacted, {verdicts['LEAK']} leaks, "
        f"{verdicts['not sent']} not sent. Context {CONTEXT_LENGTH:,} tokens, "
        "`compress(force=True)`, offline summariser; a cell is `redacted` when the carrier of "
        "the secret reached the summariser and the secret's value is in no field of any "
        "`SummaryRequest` and in no summary in the context.",
        "",
        *_matrix_table(cells),
        "",
        "#### Places beyond the four",
        "",
        "| place | how | engine | verdict |",
        "|---|---|---|---|",
    ]
    for place, how, cell in edge_cases():
        verdict = cell.verdict if cell.verdict != "LEAK" else f"**LEAK** ({cell.where})"
        lines.append(f"| {place} | {how} | {cell.engine} | {verdict} |")
    megabytes, seconds, masked = speed(2 if quick else 10)
    lines += [
        "",
        "#### Speed",
        "",
        "| text | CPU s | MB/s | secrets masked |",
        "|---|---:|---:|---:|",
        f"| {megabytes:.0f} MB of prose, paths and every case above | {seconds:.2f} |"
        f" {megabytes / seconds:.1f} | {masked:,} |",
    ]
    if real and SHARED_DATA.is_dir():
        lines += [
            "",
            "#### Redactions on the real sessions (`../shared/data`)",
            "",
            "Every string of every message, as the importers read them (LoCoMo: every"
            " string of the dialogue turns).",
            "",
            "| corpus | strings | MB | CPU s | redactions | by kind |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, count, size, seconds, kinds in real_data():
            detail = ", ".join(f"`{k}` {n}" for k, n in kinds.most_common()) or "–"
            lines.append(
                f"| {name} | {count:,} | {size:.1f} | {seconds:.2f} | {sum(kinds.values())}"
                f" | {detail} |"
            )
    lines += ["", f"_{time.perf_counter() - started:.1f} s in all._"]
    return "\n".join(lines)


#: The generated part of the page sits between these lines; the prose around
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 MB instead of 10 for the speed")
    parser.add_argument("--no-real-data", action="store_true", help="skip ../shared/data")
    parser.add_argument("--output", default="-", help="page whose figures to rewrite ('-': print)")
    args = parser.parse_args(argv)
    body = run(quick=args.quick, real=not args.no_real_data)
    if args.output == "-":
        print(_page.figures(NAME, " --quick" if args.quick else "", body))
    else:
        figures = _page.figures(NAME, " --quick" if args.quick else "", body)
        _page.write_figures(Path(args.output), NAME, SECTION, figures)
        print(f"wrote the redaction figures of {args.output}", file=sys.stderr)
    # Exit 1 when the matrix itself leaks; the edge cases are reported, not judged.
    return 1 if "**LEAK**" in body.split("#### Places beyond the four")[0] else 0


if __name__ == "__main__":
    assert set(SECRET_KINDS) == {case.kind for case in CASES}, "a kind without a case"
    assert all(redact(case.text) != case.text for case in CASES)
    raise SystemExit(main())
