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

:func:`message_anchors` gives the anchors of one message, found in its redacted
text, from a bounded LRU cache keyed by the message's text: an engine warms it
as messages arrive (once per turn, for the new messages only), so that a
compaction collects the anchors of a whole region without scanning it again.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from contextengine.messages import message_text
from contextengine.redact import redact

__all__ = [
    "ANCHOR_KINDS",
    "MAX_LINE_ANCHOR_CHARS",
    "Anchor",
    "AnchorCacheInfo",
    "anchor_cache_clear",
    "anchor_cache_info",
    "anchor_set",
    "anchors_from_tool_call",
    "extract_anchors",
    "find_anchors",
    "message_anchors",
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


# ---------------------------------------------------------------- per-message cache


@dataclass(frozen=True, slots=True)
class AnchorCacheInfo:
    """Counters of the :func:`message_anchors` cache since the last :func:`anchor_cache_clear`.

    ``scans`` is how many message texts were redacted and scanned with the
    patterns: the real work. A lookup answered from the cache leaves it unchanged.
    """

    hits: int
    scans: int
    entries: int
    chars: int


class _AnchorCache:
    """A thread-safe LRU map from message text to anchors, bounded by entries and characters."""

    def __init__(self, max_entries: int, max_chars: int) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._data: OrderedDict[str, tuple[tuple[Anchor, ...], int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.scans = 0

    def get(self, key: str) -> tuple[Anchor, ...] | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: str, value: tuple[Anchor, ...]) -> None:
        weight = len(key) + sum(len(anchor.value) for anchor in value)
        with self._lock:
            self.scans += 1
            if weight > self.max_chars // 4:
                return  # one entry must not flush the cache
            old = self._data.pop(key, None)
            if old is not None:
                self._chars -= old[1]
            self._data[key] = (value, weight)
            self._chars += weight
            while len(self._data) > self.max_entries or self._chars > self.max_chars:
                _, (_, dropped) = self._data.popitem(last=False)
                self._chars -= dropped

    def info(self) -> AnchorCacheInfo:
        with self._lock:
            return AnchorCacheInfo(self.hits, self.scans, len(self._data), self._chars)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._chars = 0
            self.hits = 0
            self.scans = 0


# Keys are mostly the message's own content string (message_text returns it
# as is), so the cache rarely holds text the history does not hold already.
_cache = _AnchorCache(max_entries=50_000, max_chars=64_000_000)


def _scan_message(message: Mapping[str, Any], text: str) -> tuple[Anchor, ...]:
    # Redact the whole text before looking for anchors: a secret is often only
    # recognisable by what precedes it (``password=...``, ``Bearer ...``), so
    # redacting each anchor alone would let such values through.
    found = find_anchors(redact(text))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        offset = len(text) + 1
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                arguments = redact(arguments)
            name = str(function.get("name") or "")
            for anchor in anchors_from_tool_call(name, arguments):
                # The argument values are in the text already; only the
                # command line of a shell call is new.
                if anchor.kind == "commands":
                    found.append(Anchor(anchor.kind, redact(anchor.value), offset))
            offset += 1
    return tuple(_dedupe(found))


def message_anchors(message: dict[str, Any]) -> tuple[Anchor, ...]:
    """The anchors of one message, found in its redacted text; cached.

    The text is :func:`contextengine.messages.message_text` (content, text
    parts and tool calls as ``name(arguments)``), redacted with
    :func:`contextengine.redact.redact` before the patterns run, plus the
    command of each shell-like tool call. ``start`` is the position in the
    redacted text. Results are cached by the text (bounded LRU, thread-safe),
    so a message is scanned once in its life however often it is asked for;
    called by the compressor as messages arrive (``on_turn_complete``) and
    when it compacts a region.
    """
    text = message_text(message)
    if not text:
        return ()
    cached = _cache.get(text)
    if cached is not None:
        return cached
    anchors = _scan_message(message, text)
    _cache.put(text, anchors)
    return anchors


def anchor_cache_info() -> AnchorCacheInfo:
    """Snapshot of the :func:`message_anchors` cache counters (see :class:`AnchorCacheInfo`)."""
    return _cache.info()


def anchor_cache_clear() -> None:
    """Empty the :func:`message_anchors` cache and reset its counters."""
    _cache.clear()
