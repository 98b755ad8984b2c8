"""Anchors: the exact identifiers a summary must not lose.

Public evaluations of compaction found that summaries paraphrase away exact
identifiers — the file that was edited, the commit that broke the build, the
booking code, the error message — and that indexing them mechanically recovers
much of that loss. An *anchor* is one such identifier, found by a compiled
regular expression. Three callers use them:

* :class:`~contextengine.DeterministicSummarizer` builds its anchor index from
  them;
* the compressor benchmark measures the share of a compacted region's anchors
  still present in the context afterwards;
* the recall evaluation checks which anchors a summary kept.

Kinds (the ``Anchor.kind`` values, in index order): ``files``, ``urls``,
``ids`` (commit hashes, UUIDs, prefixed ids such as ``call_abc123``, booking
codes such as ``ZFA04Y``, issue and PR numbers), ``errors`` (exception names,
errno names, HTTP statuses, exit codes, and whole error lines, bounded),
``commands`` (``$ ...`` lines and the command argument of shell tool calls) and
``numbers`` (numbers with a unit: ``12 ms``, ``3.5 GB``, ``45%``, ``$120``,
``10k``).

Extraction is linear in the text: each pattern runs once, and a span claimed by
an earlier kind (a URL) is not matched again by a later one (a path inside it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

__all__ = [
    "ANCHOR_KINDS",
    "MAX_LINE_ANCHOR_CHARS",
    "Anchor",
    "anchor_set",
    "anchors_from_tool_call",
    "extract_anchors",
    "find_anchors",
    "parse_tool_arguments",
]

#: The anchor kinds, in the order an anchor index lists them.
ANCHOR_KINDS = ("files", "urls", "ids", "errors", "commands", "numbers")

#: Error lines and command lines are kept whole up to this many characters.
MAX_LINE_ANCHOR_CHARS = 200


class Anchor(NamedTuple):
    """One exact identifier found in a text, with its kind and first position."""

    kind: str
    value: str
    start: int


_FILE_EXTENSIONS = (
    "py|pyi|pyx|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|conf|md|rst|txt|"
    "sh|bash|zsh|ps1|rs|go|java|kt|scala|c|h|cc|cpp|hpp|cs|rb|php|swift|m|lua|pl|r|sql|"
    "html|htm|css|scss|vue|svelte|xml|csv|tsv|log|lock|env|gz|zip|tar|whl|patch|diff|"
    "proto|graphql|tf|dockerfile|mk|gradle|pdf|png|jpg|svg"
)

# Order matters: each kind claims its spans before the next one runs, so a
# commit hash inside a URL stays part of the URL and a UUID is not also read
# as a hash.
_URL = re.compile(r"\b(?:https?|ftp|wss?)://[^\s<>\"'`)\]}]+")
# Paths are found from their slashes and extensions (literal searches, fast)
# and grown to the surrounding path characters, instead of trying a path
# pattern at every position of the text.
_PATH_RIGHT = re.compile(r"[\w.@+/~-]*")
_EXTENSION = re.compile(rf"\.(?:{_FILE_EXTENSIONS})\b", re.IGNORECASE)
_MAX_PATH_CHARS = 400
# No leading lookbehind or \b: a pattern that starts with a literal is searched
# much faster; the character before a match is checked in Python instead.
_ISSUE_PATTERNS = tuple(
    re.compile(prefix + r"[ -]?#?\d{1,7}\b")
    for prefix in ("PR", "MR", "GH", "issue", "Issue", "pull")
)
_ISSUE_HASH = re.compile(r"#\d{1,7}\b")
# One pass for every identifier that starts at a word boundary; the branch
# order is the claim order (a UUID is not also a hash, an error name not an id).
_WORD_ANCHOR = re.compile(
    r"\b(?:"
    r"(?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    # Scan the word once, then look back for the suffix: an alternation after a
    # greedy run would backtrack through every letter of every capitalised word.
    r"|(?P<error>[A-Z][A-Za-z0-9]*\b(?:(?<=Error)|(?<=Exception)|(?<=Warning)|(?<=Exit)"
    r"|(?<=Interrupt)|(?<=Fault))"
    r"|E(?:NOENT|ACCES|PERM|EXIST|ISDIR|NOTDIR|NOTEMPTY|CONNREFUSED|CONNRESET|CONNABORTED|"
    r"TIMEDOUT|ADDRINUSE|ADDRNOTAVAIL|PIPE|NOSPC|MFILE|NFILE|AGAIN|BADF|BUSY|INVAL|NOMEM|"
    r"HOSTUNREACH|NETUNREACH|NOTCONN|NOTFOUND|ROFS|XDEV|NOEXEC|2BIG|LOOP|NAMETOOLONG)\b"
    r"|(?:HTTP|status(?:[ _]code)?)[ /:=]*[1-5]\d\d\b"
    r"|exit (?:code|status)[ :=]*-?\d{1,3}\b)"
    r"|(?P<prefixed>[A-Za-z][A-Za-z0-9]{1,15}[_-](?=[A-Za-z0-9_]*\d)[A-Za-z0-9_]{4,}\b)"
    r"|(?P<hash>(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b)"
    r"|(?P<code>(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6,10}\b)"
    r")"
)
_WORD_ANCHOR_KIND = {
    "uuid": "ids",
    "error": "errors",
    "prefixed": "ids",
    "hash": "ids",
    "code": "ids",
}
# Searched as keywords, then grown to the whole line: a line pattern with a
# leading [^\n]* backtracks over every line and was the slowest of all.
_ERROR_WORDS = ("Error:", "Exception:", "error:", "fatal:", "Traceback", "failed", "FAILED")
_COMMAND_LINE = re.compile(r"^[ \t]*\$ +(\S[^\n]*)$", re.MULTILINE)
# Starts with a character class (searched quickly); the "not after a word
# character" rule is checked in Python.
_NUMBER = re.compile(
    r"(?:"
    r"[$€£]\d[\d,]*(?:\.\d+)?[kKmMbB]?\b"
    r"|\d[\d,]*(?:\.\d+)?"
    r"(?:"
    r" ?%"
    r"|[kKMGx]\b"
    r"|(?:ms|s|h|d)\b"
    r"| ?(?:ns|µs|us|ms|sec|secs|seconds?|minutes?|mins?|hours?|days?|weeks?|"
    r"[KMGT]i?B|kB|bytes?|tokens?|chars?|characters|lines?|files?|tests?|"
    r"messages?|turns?|req/s|rps|qps|USD|EUR|GBP|dollars?|°C|°F|px|"
    r"passed|failed|errors?)\b"
    r")"
    r")"
)

_SHELL_TOOL_WORDS = ("bash", "shell", "sh", "terminal", "exec", "run", "command", "cmd")
_COMMAND_ARG_KEYS = ("command", "cmd", "script", "commands")


def _bounded_line(text: str) -> str:
    line = text.strip()
    if len(line) > MAX_LINE_ANCHOR_CHARS:
        line = line[: MAX_LINE_ANCHOR_CHARS - 1].rstrip() + "…"
    return line


def _clean_url(url: str) -> str:
    # Trailing sentence punctuation is almost never part of a URL someone wrote.
    return url.rstrip(".,;:!?'\"")


def _clean_path(path: str) -> str | None:
    stripped = path.rstrip(".,;:")
    body = stripped.rstrip("/") if stripped.endswith("/") and len(stripped) > 1 else stripped
    if not any(c.isalpha() for c in body):
        return None  # dates and fractions such as 10/20/2024 or 1/2
    slashes = body.count("/")
    if slashes == 0:
        # A bare name only counts with a known extension (the pattern's last
        # branch) or as a directory written with a trailing slash.
        return stripped if ("." in body or stripped.endswith("/")) and len(body) > 2 else None
    if body.startswith(("/", "~/", "./", "../")):
        last = body.rsplit("/", 1)[-1]
        # "/s" in "km /s" or "/dev" alone are too ambiguous; demand two parts or an extension.
        if slashes < 2 and "." not in last and not stripped.endswith("/"):
            return None
        return stripped
    last = body.rsplit("/", 1)[-1]
    has_extension = "." in last and last.rsplit(".", 1)[-1][:1].isalpha()
    # "and/or", "read/write" are prose; a relative path needs an extension,
    # a trailing slash or some depth.
    if has_extension or stripped.endswith("/") or slashes >= 2:
        return stripped
    return None


def _is_word_at(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not (before.isalnum() or before == "_" or after.isalnum() or after == "_")


def _is_path_char(char: str) -> bool:
    return char.isalnum() or char in "_.@+~-"


def _path_spans(text: str) -> Iterator[tuple[int, int]]:
    """Candidate path spans: runs of path characters around a slash or a known extension."""
    pos = text.find("/")
    while pos != -1:
        start = pos
        floor = max(0, pos - _MAX_PATH_CHARS)
        while start > floor and _is_path_char(text[start - 1]):
            start -= 1
        match = _PATH_RIGHT.match(text, pos)
        end = match.end() if match else pos + 1
        yield start, end
        pos = text.find("/", end)
    for match in _EXTENSION.finditer(text):
        start = match.start()
        floor = max(0, start - _MAX_PATH_CHARS)
        while start > floor and _is_path_char(text[start - 1]):
            start -= 1
        if start < match.start():
            yield start, match.end()


def find_anchors(text: str) -> list[Anchor]:
    """Every anchor in ``text``, ordered by first occurrence and deduplicated by value.

    Called by :func:`extract_anchors`, by the deterministic summariser (which
    needs the kinds to group its index) and by the benchmarks.
    """
    if not text:
        return []
    claimed = bytearray(len(text))
    found: list[Anchor] = []

    def take(kind: str, start: int, end: int, value: str | None) -> None:
        if value and not any(claimed[start:end]):
            claimed[start:end] = b"\x01" * (end - start)
            found.append(Anchor(kind, value, start))

    def claim(kind: str, pattern: re.Pattern[str], clean: Any = None) -> None:
        for match in pattern.finditer(text):
            start, end = match.span()
            value = match.group()
            take(kind, start, end, clean(value) if clean is not None else value)

    if "://" in text:
        claim("urls", _URL, _clean_url)
    for start, end in _path_spans(text):
        take("files", start, end, _clean_path(text[start:end]))
    # Literal-prefixed patterns, each searched only when its literal occurs:
    # a search for a literal is far cheaper than trying an alternation everywhere.
    issue_patterns = [p for p in _ISSUE_PATTERNS if p.pattern[:2] in text]
    if "#" in text:
        issue_patterns.append(_ISSUE_HASH)
    for pattern in issue_patterns:
        for match in pattern.finditer(text):
            start = match.start()
            if start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_&#"):
                take("ids", start, match.end(), match.group())
    for match in _WORD_ANCHOR.finditer(text):
        kind = _WORD_ANCHOR_KIND[match.lastgroup or "code"]
        take(kind, match.start(), match.end(), match.group())
    for match in _NUMBER.finditer(text):
        start = match.start()
        if start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_.$"):
            take("numbers", start, match.end(), match.group())
    # Whole lines overlap the identifiers inside them on purpose: the line is
    # the context, the identifiers are what a later search will look for.
    line_starts: set[int] = set()
    for word in _ERROR_WORDS:
        pos = text.find(word)
        while pos != -1:
            end = pos + len(word)
            if word[-1] == ":" or _is_word_at(text, pos, end):
                line_start = text.rfind("\n", 0, pos) + 1
                if line_start not in line_starts:
                    line_starts.add(line_start)
                    line_end = text.find("\n", end)
                    line = text[line_start : line_end if line_end != -1 else len(text)]
                    if line.strip() != "Traceback (most recent call last):":
                        found.append(Anchor("errors", _bounded_line(line), line_start))
            pos = text.find(word, end)
    if "$ " in text:
        for match in _COMMAND_LINE.finditer(text):
            found.append(Anchor("commands", _bounded_line(match.group(1)), match.start(1)))
    return _dedupe(found)


def _dedupe(anchors: Iterable[Anchor]) -> list[Anchor]:
    seen: set[str] = set()
    result: list[Anchor] = []
    for anchor in sorted(anchors, key=lambda a: a.start):
        if anchor.value and anchor.value not in seen:
            seen.add(anchor.value)
            result.append(anchor)
    return result


def extract_anchors(text: str) -> list[str]:
    """The exact identifiers in ``text``, ordered by first occurrence, without duplicates."""
    return [anchor.value for anchor in find_anchors(text)]


def anchor_set(text: str) -> set[str]:
    """The exact identifiers in ``text`` as a set, for survival and recall measurements."""
    return {anchor.value for anchor in find_anchors(text)}


def parse_tool_arguments(arguments: Any) -> Any:
    """Tool-call arguments as JSON when they parse, else as given."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def anchors_from_tool_call(name: str, arguments: Any) -> list[Anchor]:
    """The anchors in one tool call: its command (for shell-like tools) and its argument values.

    ``arguments`` is the OpenAI ``function.arguments`` (a JSON string) or an
    already parsed value. Called by the deterministic summariser for each
    tool call of the region; ``start`` is the order within the call.
    """
    parsed = parse_tool_arguments(arguments)
    found: list[Anchor] = []
    lowered = name.lower()
    shell_like = any(word in lowered for word in _SHELL_TOOL_WORDS)
    if isinstance(parsed, Mapping):
        for key in _COMMAND_ARG_KEYS:
            value = parsed.get(key)
            if isinstance(value, str) and value.strip():
                found.append(Anchor("commands", _bounded_line(value.splitlines()[0]), 0))
                break
        strings = [v for v in parsed.values() if isinstance(v, str)]
    elif isinstance(parsed, str):
        if shell_like and parsed.strip():
            found.append(Anchor("commands", _bounded_line(parsed.strip().splitlines()[0]), 0))
        strings = [parsed]
    else:
        strings = []
    offset = 1
    for value in strings:
        for anchor in find_anchors(value):
            found.append(Anchor(anchor.kind, anchor.value, offset + anchor.start))
        offset += len(value) + 1
    return _dedupe(found)
