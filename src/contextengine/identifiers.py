"""Identifiers: the anchors a summary keeps last, ranked, and written compactly.

An *identifier* is an anchor (see :mod:`contextengine.anchors`) that names
one exact thing a later turn may need to type again: a path, a URL, an id
(commit hash, UUID, prefixed id, issue number) or an error name (``KeyError``,
``ENOENT``, ``HTTP 404``, ``exit code 1``). Whole error lines, command lines
and numbers with units are anchors too, but they are context, not names: a
summary cuts them with the prose.

Three things live here:

* :func:`is_identifier` and :data:`IDENTIFIER_KINDS` (in rank order: error
  names, ids, paths, URLs), used by the deterministic summariser to put the
  identifier index of a region last in line to be cut;
* :func:`pack_identifiers`, which writes paths (and URLs) that share a folder
  on one line in brace notation, ``src/pkg/{a.py,b.py}``, the notation of
  POSIX shells' brace expansion, which models read and a shell expands; and
  :func:`expand_identifiers`, which reads every such group in a text back to
  the exact values (the tests and the identifier benchmark use it);
* :func:`append_missing_identifiers`, which the compressor applies to a model's
  summary: the identifiers of the region the summary left out are appended,
  packed, as an ``## Identifiers`` section within a token budget.

Values come from anchors found in redacted text (the engines pass nothing
else), so nothing here can put a secret back.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from contextengine.anchors import find_anchors
from contextengine.tokens import count_tokens

__all__ = [
    "IDENTIFIERS_HEADING",
    "IDENTIFIER_KINDS",
    "append_missing_identifiers",
    "expand_identifiers",
    "identifier_rank",
    "is_identifier",
    "listed_identifiers",
    "pack_identifiers",
    "previous_identifiers",
]

#: The anchor kinds identifiers come from (error anchors only when they are
#: names); :func:`identifier_rank` orders identifiers within and across them.
IDENTIFIER_KINDS = ("errors", "ids", "files", "urls")

#: Heading of the section :func:`append_missing_identifiers` adds to a summary.
IDENTIFIERS_HEADING = "## Identifiers"

# An error anchor that is a name, not a whole error line (anchors.py finds both
# under "errors"): the forms of its word pattern, matched whole.
_ERROR_NAME = re.compile(
    r"[A-Z][A-Za-z0-9]*(?:Error|Exception|Warning|Exit|Interrupt|Fault)"
    r"|E[A-Z0-9]{2,14}"
    r"|(?:HTTP|status(?:[ _]code)?)[ /:=]*[1-5]\d\d"
    r"|exit (?:code|status)[ :=]*-?\d{1,3}"
)
# Kinds whose values are grouped by their folder.
_GROUPED_KINDS = ("files", "urls")
# A member must not hold what the notation uses, or the group would not expand back.
#: A folder group is written when it saves more characters than this.
_GROUP_COST_CHARS = 8
_NOT_IN_MEMBER = re.compile(r"[{},\s]")
# UUIDs and prefixed ids (``call_abc123``, ``req_011C...``) as anchors.py finds them.
_OPAQUE_ID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[A-Za-z][A-Za-z0-9]{1,15}[_-][A-Za-z0-9_]{4,}"
)
_GROUP = re.compile(r"([^\s{},]*)\{([^\s{}]*,[^\s{}]*)\}")


def is_identifier(kind: str, value: str) -> bool:
    """Whether an anchor of ``kind`` with ``value`` is an identifier (see the module docstring)."""
    if kind == "errors":
        return _ERROR_NAME.fullmatch(value) is not None
    return kind in IDENTIFIER_KINDS


def identifier_rank(kind: str, value: str) -> int:
    """Rank of an identifier, 0 best: how late a tight budget cuts it.

    Error names (0), then commit hashes, issue and PR numbers and short codes
    (1), paths (2), URLs (3), and last the long opaque ids, UUIDs and prefixed
    ids such as ``toolu_01...`` (4): they cost the most tokens each and are
    the least often typed again. Anything else ranks after them.
    """
    if kind == "errors":
        return 0
    if kind == "ids":
        return 4 if _OPAQUE_ID.fullmatch(value) else 1
    if kind == "files":
        return 2
    if kind == "urls":
        return 3
    return 5


@lru_cache(maxsize=65_536)
def _prefixes(value: str) -> tuple[str, ...]:
    """The folder prefixes (each ending in ``/``) a value can be grouped under; maybe none."""
    # Cached: the summariser renders the same values once per step of its
    # search for the largest index that fits.
    if _NOT_IN_MEMBER.search(value):
        return ()
    last = value.rfind("/")
    if last <= 0 or last == len(value) - 1:
        return ()  # no folder, or a folder itself (trailing slash)
    scheme = value.find("://")
    floor = scheme + 3 if scheme != -1 else 0
    prefixes: list[str] = []
    cut = value.find("/", floor)
    while cut != -1 and cut <= last:
        if cut > 0:
            prefixes.append(value[: cut + 1])
        cut = value.find("/", cut + 1)
    return tuple(prefixes)


def group_indices(values: Sequence[str]) -> list[list[int]]:
    """The lines :func:`pack_identifiers` writes, as lists of indices into ``values``.

    Greedy on characters saved: the folder prefix that the most characters
    share, ``(members - 1) × len(prefix)``, takes its members first; the
    next prefix takes what is left of its own. A group sits where its first
    (best) member was, members in their given order; a value alone, or not
    groupable, is its own line. Linear-logarithmic in the values.
    """
    members: dict[str, list[int]] = {}
    for index, value in enumerate(values):
        for prefix in _prefixes(value):
            members.setdefault(prefix, []).append(index)
    taken: dict[int, str] = {}
    # Savings only fall as members are taken, so a popped entry whose saving
    # is still current is the best one left (a lazy max-heap).
    heap = [(-_saving(p, len(m)), -len(p), p) for p, m in members.items() if len(m) > 1]
    heapq.heapify(heap)
    while heap:
        negative, _, prefix = heapq.heappop(heap)
        free = [i for i in members[prefix] if i not in taken]
        saving = _saving(prefix, len(free))
        if len(free) < 2 or saving <= 0:
            continue
        if saving != -negative:
            heapq.heappush(heap, (-saving, -len(prefix), prefix))
            continue
        for index in free:
            taken[index] = prefix
        members[prefix] = free
    groups: list[list[int]] = []
    placed: dict[str, list[int]] = {}
    for index in range(len(values)):
        home = taken.get(index)
        if home is None:
            groups.append([index])
        elif home in placed:
            placed[home].append(index)
        else:
            placed[home] = [index]
            groups.append(placed[home])
    return groups


def _saving(prefix: str, count: int) -> int:
    # The prefix is written once instead of ``count`` times. The braces cost
    # about what a short prefix saves, and a group is harder to read than a
    # list: a short folder shared twice (``src/`` by two files) stays a list.
    return (count - 1) * len(prefix) - _GROUP_COST_CHARS


def format_group(values: Sequence[str]) -> str:
    """One line for values from one :func:`group_indices` group."""
    if len(values) == 1:
        return values[0]
    prefix = _common_folder(values)
    return prefix + "{" + ",".join(value[len(prefix) :] for value in values) + "}"


def _common_folder(values: Sequence[str]) -> str:
    """The longest folder prefix (ending in ``/``) all ``values`` share."""
    first, last = min(values), max(values)
    length = 0
    while length < min(len(first), len(last)) and first[length] == last[length]:
        length += 1
    return first[: first.rfind("/", 0, length) + 1] if "/" in first[:length] else ""


def pack_identifiers(values: Sequence[str]) -> list[str]:
    """``values`` (best first, distinct) as lines, paths sharing a folder as ``folder/{a,b}``.

    :func:`expand_identifiers` of the lines gives ``values`` back exactly.
    """
    return [format_group([values[i] for i in group]) for group in group_indices(values)]


def expand_identifiers(text: str) -> list[str]:
    """Every value of every brace group (``prefix{a,b}``) in ``text``, in order.

    Only groups without spaces and without nesting are read: the notation
    :func:`pack_identifiers` writes.
    """
    found: list[str] = []
    for match in _GROUP.finditer(text):
        prefix = match.group(1)
        found.extend(prefix + member for member in match.group(2).split(",") if member)
    return found


def listed_identifiers(text: str) -> set[str]:
    """The values brace groups of ``text`` stand for: what a reader of ``text`` can type back.

    A value counts as kept by a summary when it is in the summary verbatim or
    in this set.
    """
    return set(expand_identifiers(text))


def _missing(text: str, anchors: Iterable[str]) -> list[tuple[str, str]]:
    listed = listed_identifiers(text)
    seen: set[str] = set()
    missing: list[tuple[str, str]] = []
    for anchor in anchors:
        kind, sep, value = anchor.partition(":")
        if not sep or not value or value in seen or not is_identifier(kind, value):
            continue
        seen.add(value)
        if value not in text and value not in listed:
            missing.append((kind, value))
    # Stable: within a kind, the caller's order (best first) is kept.
    missing.sort(key=lambda pair: identifier_rank(*pair))
    return missing


def _index_lines(pairs: Sequence[tuple[str, str]]) -> list[str]:
    lines: list[str] = []
    for kind in IDENTIFIER_KINDS:
        values = [value for k, value in pairs if k == kind]
        if kind in _GROUPED_KINDS:
            lines.extend(f"- {line}" for line in pack_identifiers(values))
        else:
            lines.extend(f"- {value}" for value in values)
    return lines


def append_missing_identifiers(
    summary: str, anchors: Sequence[str], *, budget_tokens: int, model: str | None = None
) -> str:
    """``summary`` with the identifiers of ``anchors`` it lacks appended, within ``budget_tokens``.

    ``anchors`` are ``"kind:value"`` strings, best first (``SummaryRequest.anchors``);
    only identifiers count (:func:`is_identifier`). The missing ones, ranked by
    kind then by the caller's order, are packed under :data:`IDENTIFIERS_HEADING`;
    as many as fit ``budget_tokens`` (the section's own cost) are appended.
    Returns ``summary`` unchanged when none is missing or none fits.
    """
    missing = _missing(summary, anchors)
    if not missing or budget_tokens <= 0:
        return summary

    def section(count: int) -> str:
        return "\n".join([IDENTIFIERS_HEADING, *_index_lines(missing[:count])])

    low, high = 0, len(missing)
    while low < high:  # the most identifiers whose section fits
        middle = (low + high + 1) // 2
        if count_tokens(section(middle), model) + 2 <= budget_tokens:
            low = middle
        else:
            high = middle - 1
    if low == 0:
        return summary
    return f"{summary.rstrip()}\n\n{section(low)}"


def previous_identifiers(summary: str) -> list[str]:
    """The identifiers a summary holds, as ``"kind:value"``, its folder groups expanded.

    For :func:`append_missing_identifiers` on a later compaction, after the
    region's own: what the summary being replaced listed must not be lost
    because a model left it out of the new one.
    """
    if not summary:
        return []
    text = "\n".join([summary, *expand_identifiers(summary)])
    return [f"{a.kind}:{a.value}" for a in find_anchors(text) if is_identifier(a.kind, a.value)]
