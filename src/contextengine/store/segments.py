"""Long texts are indexed in bounded segments: the rule, and where each segment lives.

Part of the archive format (migration 3 of both stores). The searchable text of
a message or summary (:func:`contextengine.store._common.message_search_text`)
is cut into *segments* of at most :data:`SEGMENT_CHARS` characters; each
segment is its own full-text row, mapped back to the message (or summary) it
belongs to and its number ``k`` (0, 1, 2...). A text that fits in one segment,
which is almost every message, has exactly one row, as before migration 3.

Why: a search must never do work proportional to one row's size. A 10 MB tool
output used to be one index row, so ranking, snippets and regex scans read all
of it (FTS5's ``snippet()`` took 75 s over a 9 MB row). With segments, every
row a search reads, ranks, highlights or scans is at most
``SEGMENT_CHARS + SEGMENT_OVERLAP`` characters, and the whole text is still
indexed: a word near the end of the 10 MB output is found in its segment. A
hit on several segments of one message returns the message once (its best
segment, whose text gives the snippet).

The cut rule (:func:`segment_text`): a segment ends at the last whitespace
within its final half, or exactly at :data:`SEGMENT_CHARS` characters when that
half holds no whitespace at all (minified code, base64: a word is then split
in two). The next segment starts up to :data:`SEGMENT_OVERLAP` characters
earlier, at a word start, so a phrase or regex match shorter than that which
straddles a cut is still found whole in one segment. Readers never assume a
segment size: any cut a writer chose is valid, so the rule may change without
re-indexing.

Where segments live: the segment ``k = 0`` is the row's own index entry, as
before (SQLite: the ``search_index`` row with the message's rowid; PostgreSQL:
``messages.body``). Segments ``k >= 1`` live in SQLite's ``search_index`` too,
at rowids :func:`segment_rowid` gives (:data:`SEGMENT_BASE` + owner rowid
``<< 20`` + ``k``, negated for summaries, so they sort by owner after every
segment 0), and in PostgreSQL's ``search_segments`` table.
"""

from __future__ import annotations

__all__ = [
    "SEGMENT_BASE",
    "SEGMENT_BITS",
    "SEGMENT_CHARS",
    "SEGMENT_OVERLAP",
    "segment_rowid",
    "segment_text",
    "split_rowid",
]

#: Largest segment, in characters (the overlap comes on top of it).
SEGMENT_CHARS = 4_000
#: How far back a segment starts before the end of the previous one, at most.
SEGMENT_OVERLAP = 256
#: SQLite rowids at or above this (in absolute value) are segments ``k >= 1``.
SEGMENT_BASE = 1 << 61
#: Bits of a segment rowid that hold ``k``: at most 2**20 segments (4 GB) per text.
SEGMENT_BITS = 20
_MAX_SEGMENTS = 1 << SEGMENT_BITS
_MAX_OWNER = 1 << (61 - SEGMENT_BITS)
_SPACES = (" ", "\n", "\t", "\r")


def _last_space(text: str, lo: int, hi: int) -> int:
    return max(text.rfind(space, lo, hi) for space in _SPACES)


def _first_space(text: str, lo: int, hi: int) -> int:
    found = [i for i in (text.find(space, lo, hi) for space in _SPACES) if i >= 0]
    return min(found) if found else -1


def segment_text(text: str) -> list[str]:
    """``text`` cut into the segments the index holds (one segment when it is short).

    Deterministic and linear in ``len(text)``; the rule is in the module docstring.
    """
    if len(text) <= SEGMENT_CHARS:
        return [text]
    out: list[str] = []
    start = 0
    end = len(text)
    while end - start > SEGMENT_CHARS:
        limit = start + SEGMENT_CHARS
        cut = _last_space(text, start + SEGMENT_CHARS // 2, limit)
        cut = limit if cut <= start else cut
        out.append(text[start:cut])
        back = max(start + 1, cut - SEGMENT_OVERLAP)
        space = _first_space(text, back, cut)
        start = space + 1 if 0 <= space < cut else cut
    out.append(text[start:])
    if len(out) > _MAX_SEGMENTS:  # pragma: no cover - 4 GB of text; SQLite caps strings at 1 GB
        raise ValueError("text too long to index")
    return out


def segment_rowid(owner_rowid: int, k: int) -> int:
    """The SQLite ``search_index`` rowid of segment ``k`` of the row ``owner_rowid``.

    ``owner_rowid`` is a message's rowid, or minus a summary's (the index's
    convention since migration 1); segment 0 keeps it.
    """
    if k == 0:
        return owner_rowid
    magnitude = abs(owner_rowid)
    if not 0 < k < _MAX_SEGMENTS or not 0 < magnitude < _MAX_OWNER:
        raise ValueError(f"no segment rowid for owner {owner_rowid}, segment {k}")
    rowid = SEGMENT_BASE + (magnitude << SEGMENT_BITS) + k
    return rowid if owner_rowid > 0 else -rowid


def split_rowid(rowid: int) -> tuple[int, int]:
    """``(owner_rowid, k)`` of a ``search_index`` rowid: the inverse of :func:`segment_rowid`."""
    magnitude = abs(rowid)
    if magnitude < SEGMENT_BASE:
        return rowid, 0
    packed = magnitude - SEGMENT_BASE
    owner = packed >> SEGMENT_BITS
    return (owner if rowid > 0 else -owner), packed & (_MAX_SEGMENTS - 1)
