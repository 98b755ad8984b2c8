"""Search in the SQLite archive: the ``lcm_grep`` engine of :class:`SQLiteStore`.

Called by :meth:`SQLiteStore.search` inside one read transaction (a snapshot),
after it checked the arguments and decoded the cursor.

* Text mode: the shared :func:`contextengine.store.ranking.rank` asks
  :class:`SQLiteTextIndex` for bounded probes (an FTS5 ``MATCH`` per query
  term, scoped to the conversation by its ``conv`` token, ``ORDER BY rowid``
  with a ``LIMIT``: FTS5 stops as soon as it has enough rows and never calls
  ``bm25()``) and for the text of the rows it scores. Snippets are cut in
  Python around the first query word of the best segment; when the crude
  stemmer finds none, FTS5's ``snippet()`` highlights that one segment.
* Regex mode: rows are scanned in conversation order (messages by ``seq``,
  then summaries), segment by segment, each under the ``regex`` module's
  timeout, at most :data:`~contextengine.store.search.REGEX_MAX_ROWS`
  segments and :data:`REGEX_DEADLINE_S` seconds per call; the cursor is the
  position to resume from (message, segment), so a long conversation or a
  10 MB row is scanned in bounded steps.

No query reaches another conversation: every FTS5 expression starts with the
conversation's ``conv`` token, every row lookup is keyed by rowids those
expressions returned or carries ``conversation_id = ?``, and user text only
ever reaches FTS5 as quoted phrases (:mod:`contextengine.store.search`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Any

from contextengine.store import ranking as _ranking
from contextengine.store import search as _search
from contextengine.store.protocol import SearchHit
from contextengine.store.segments import (
    SEGMENT_BASE,
    SEGMENT_BITS,
    SEGMENT_CHARS,
    segment_rowid,
    split_rowid,
)

__all__ = ["REGEX_DEADLINE_S", "SQLiteTextIndex", "identities", "search_regex", "search_text"]

#: Time budget of one regex search call, in seconds.
REGEX_DEADLINE_S = 3.0
_CHUNK = 400  # parameters per IN (...) list
_LAST_SEGMENT = (1 << SEGMENT_BITS) - 1
#: Rows fetched per step of a regex scan (messages or the segments of one message).
_SCAN_BATCH = 64
#: (kind, segment >= 1) -> the region's rowid range ``[low, high]``. Summaries'
#: rowids are negative, so for them ascending order is newest first.
_REGIONS = {
    (0, False): (1, SEGMENT_BASE - 1),
    (0, True): (SEGMENT_BASE, (1 << 62) - 1),
    (1, False): (-(SEGMENT_BASE - 1), -1),
    (1, True): (-((1 << 62) - 1), -SEGMENT_BASE),
}
_PROBE = (
    "SELECT rowid FROM search_index WHERE search_index MATCH ? AND rowid >= ? AND rowid <= ?"
    " ORDER BY rowid LIMIT ?"
)
#: Window searches of one probe, at most (each halves or doubles the window).
_WINDOW_STEPS = 16


def _key(rowid: int) -> _ranking.Key:
    owner, k = split_rowid(rowid)
    return (0 if owner > 0 else 1, abs(owner), k)


def _rowid(key: _ranking.Key) -> int:
    kind, order, k = key
    return segment_rowid(order if kind == 0 else -order, k)


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for lo in range(0, len(items), _CHUNK):
        yield items[lo : lo + _CHUNK]


class SQLiteTextIndex:
    """:class:`~contextengine.store.ranking.TextIndex` over one conversation's FTS5 rows."""

    def __init__(
        self,
        db: sqlite3.Connection,
        conversation_id: str,
        token: str,
        parsed: _search.ParsedQuery,
        scope: str,
    ) -> None:
        self.db = db
        self.conversation_id = conversation_id
        self.scope = scope
        self.parsed = parsed
        self.conv = f'conv : "{token}"'
        kinds = {"messages": (0,), "summaries": (1,), "all": (0, 1)}[scope]
        self.regions = [r for r in _REGIONS if r[0] in kinds]

    def match(self, term: str | None) -> str:
        """The FTS5 expression of one probe: the conversation, every phrase, ``term``."""
        parts = [self.conv]
        parts += [
            "body : (" + " ".join(_search.quote(w) for w in phrase) + ")"
            for phrase in self.parsed.phrases
        ]
        if term is not None:
            star = " *" if term in self.parsed.prefixes else ""
            parts.append("{body ctx} : (" + _search.quote(term) + star + ")")
        return " AND ".join(parts)

    def probe_many(self, terms: Sequence[str | None], cap: int) -> list[list[_ranking.Key]]:
        return [self.probe(term, cap) for term in terms]

    def probe(self, term: str | None, cap: int) -> list[_ranking.Key]:
        """One term's probe (see :meth:`~contextengine.store.ranking.TextIndex.probe_many`)."""
        match = self.match(term)
        keys: list[_ranking.Key] = []
        for region in self.regions:
            keys += [_key(rowid) for rowid in self._newest(match, region, cap)]
        return keys

    def _rowids(self, match: str, low: int, high: int, limit: int) -> list[int]:
        rows = self.db.execute(_PROBE, (match, low, high, limit)).fetchall()
        return [int(r[0]) for r in rows]

    def _newest(self, match: str, region: tuple[int, bool], cap: int) -> list[int]:
        """The newest ``cap`` rowids of ``region`` matching ``match``, newest first.

        Only ascending scans: SQLite 3.40's FTS5 can return nothing at all for
        ``ORDER BY rowid DESC`` over an AND whose rarer side is small (found at
        a million rows). Ascending from the region's start gives every row of
        a rare word (and, with negative rowids, the newest summaries first);
        for a common word, a window below the conversation's newest rowid is
        searched, halved when it holds too many rows, doubled when too few.
        """
        low, high = _REGIONS[region]
        first = self._rowids(match, low, high, cap + 1)
        if region[0] == 1 or len(first) <= cap:
            return first[:cap] if region[0] == 1 else first[::-1]
        top = self._top(region)
        width = max(1, 2 * cap * (first[-1] - first[0]) // cap)
        found = first
        for _ in range(_WINDOW_STEPS):
            start = max(first[0], top - width)
            found = self._rowids(match, start, top, 4 * cap + 1)
            if len(found) > 4 * cap and width > 1:
                width //= 2  # too many rows in the window: its top part is what we want
            elif len(found) >= cap or start <= first[0]:
                break
            else:
                width *= 2
        return found[-cap:][::-1]

    def _top(self, region: tuple[int, bool]) -> int:
        """The highest rowid the conversation can hold in a message region."""
        row = self.db.execute(
            "SELECT rowid FROM messages WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
            (self.conversation_id,),
        ).fetchone()
        newest = int(row[0]) if row else 0
        return segment_rowid(newest, _LAST_SEGMENT) if region[1] and newest else newest

    def texts(self, keys: Sequence[_ranking.Key]) -> dict[_ranking.Key, tuple[str, str]]:
        out: dict[_ranking.Key, tuple[str, str]] = {}
        rowids = [_rowid(k) for k in keys]
        for chunk in _chunks(rowids):
            marks = ",".join("?" * len(chunk))
            for rowid, body, ctx in self.db.execute(
                f"SELECT rowid, body, ctx FROM search_index WHERE rowid IN ({marks})", chunk
            ):
                out[_key(rowid)] = (str(body), str(ctx or ""))
        return out

    def position(self, key: _ranking.Key) -> int | None:
        if key[0] != 0:
            return None
        row = self.db.execute(
            "SELECT seq FROM messages WHERE rowid = ? AND +conversation_id = ?",
            (key[1], self.conversation_id),
        ).fetchone()
        return int(row[0]) if row else None

    def size(self) -> int:
        row = self.db.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = ?",
            (self.conversation_id,),
        ).fetchone()
        return int(row[0])

    def highlight(self, key: _ranking.Key) -> str:
        """FTS5's own snippet of one row (one bounded segment) for the whole query."""
        match = self.conv + " AND (" + _search.fts5_match(self.parsed) + ")"
        row = self.db.execute(
            "SELECT snippet(search_index, 1, ?, ?, '…', 24) FROM search_index"
            " WHERE search_index MATCH ? AND rowid = ?",
            (_search.HIGHLIGHT_OPEN, _search.HIGHLIGHT_CLOSE, match, _rowid(key)),
        ).fetchone()
        return str(row[0]) if row and row[0] else ""


def identities(
    db: sqlite3.Connection, conversation_id: str, keys: Sequence[_ranking.Key]
) -> dict[tuple[int, int], tuple[str, int | None, str]]:
    """``(kind, rowid) -> (id, seq, role)`` of the owners of ``keys``, in this conversation only."""
    found: dict[tuple[int, int], tuple[str, int | None, str]] = {}
    messages = list({k[1] for k in keys if k[0] == 0})
    summaries = list({k[1] for k in keys if k[0] == 1})
    for chunk in _chunks(messages):
        marks = ",".join("?" * len(chunk))
        # "+conversation_id": without it SQLite may walk the conversation's whole
        # (conversation_id, seq) index instead of looking the rowids up.
        for rowid, item_id, seq, role in db.execute(
            f"SELECT rowid, id, seq, role FROM messages WHERE rowid IN ({marks})"
            " AND +conversation_id = ?",
            (*chunk, conversation_id),
        ):
            found[(0, rowid)] = (item_id, int(seq), role)
    for chunk in _chunks(summaries):
        marks = ",".join("?" * len(chunk))
        for rowid, item_id in db.execute(
            f"SELECT rowid, id FROM summaries WHERE rowid IN ({marks}) AND +conversation_id = ?",
            (*chunk, conversation_id),
        ):
            found[(1, rowid)] = (item_id, None, "summary")
    return found


def search_text(
    db: sqlite3.Connection,
    conversation_id: str,
    token: str,
    query: str,
    scope: str,
    limit: int,
    offset: int,
) -> tuple[list[SearchHit], bool]:
    """One page of ranked hits (``summary_id`` not yet filled) and whether more exist."""
    parsed = _search.parse_query(query)
    if parsed.empty:
        return [], False
    index = SQLiteTextIndex(db, conversation_id, token, parsed, scope)
    return _ranking.hits_page(
        parsed,
        index,
        offset=offset,
        limit=limit,
        owners=lambda keys: identities(db, conversation_id, keys),
        highlight=index.highlight,
    )


def with_summary_ids(
    db: sqlite3.Connection, conversation_id: str, hits: list[SearchHit]
) -> list[SearchHit]:
    """Fill ``summary_id`` for hits that left the active context (two queries per page)."""
    if not hits:
        return hits
    import dataclasses

    ids = [h.id for h in hits]
    marks = ",".join("?" * len(ids))
    in_view = {
        r[0]
        for r in db.execute(
            f"SELECT ref_id FROM context_items WHERE conversation_id = ? AND ref_id IN ({marks})",
            (conversation_id, *ids),
        )
    }
    parents = dict(
        db.execute(
            f"SELECT source_id, MIN(summary_id) FROM summary_sources WHERE conversation_id = ?"
            f" AND source_id IN ({marks}) GROUP BY source_id",
            (conversation_id, *ids),
        ).fetchall()
    )
    return [
        hit
        if hit.id in in_view or hit.id not in parents
        else dataclasses.replace(hit, summary_id=parents[hit.id])
        for hit in hits
    ]


# ------------------------------------------------------------------------------------ regex


def pack_position(kind: int, order: int, segment: int) -> int:
    """A regex cursor position: the row ``(kind, order)`` and the segment to resume at."""
    return (kind << 61) | (order << SEGMENT_BITS) | segment


def unpack_position(position: int) -> tuple[int, int, int]:
    return position >> 61, (position >> SEGMENT_BITS) & ((1 << 41) - 1), position & _LAST_SEGMENT


def _later_segments(
    db: sqlite3.Connection, conv: str, owner: int, start: int
) -> Iterator[tuple[int, str, bool]]:
    """``(k, text, last)`` of the segments ``k >= start`` (``start >= 1``) of the row ``owner``."""
    k = start
    while True:
        # Ascending scans only (see SQLiteTextIndex._newest); a summary's segments
        # have falling rowids, so they are read in windows of segment numbers.
        last = min(_LAST_SEGMENT, k + _SCAN_BATCH)
        lo, hi = segment_rowid(owner, k), segment_rowid(owner, last)
        rows = db.execute(
            "SELECT rowid, body FROM search_index WHERE search_index MATCH ? AND rowid >= ?"
            " AND rowid <= ? ORDER BY rowid",
            (conv, min(lo, hi), max(lo, hi)),
        ).fetchall()
        if owner < 0:
            rows.reverse()
        more = len(rows) > _SCAN_BATCH
        rows = rows[:_SCAN_BATCH]
        for i, (rowid, text) in enumerate(rows):
            k = split_rowid(rowid)[1]
            yield k, str(text), not more and i == len(rows) - 1
        if not more:
            return
        k += 1


def _segments(
    db: sqlite3.Connection, conv: str, owner: int, body: str, start: int
) -> Iterator[tuple[int, str, bool]]:
    """``(k, text, last)`` of the segments of the row ``owner`` (signed), from ``start`` on."""
    # A text cut into segments has a first segment at least half full.
    later = (
        _later_segments(db, conv, owner, max(1, start))
        if len(body) >= SEGMENT_CHARS // 2
        else iter(())
    )
    pending = next(later, None)
    if start == 0:
        yield 0, body, pending is None
    while pending is not None:
        yield pending
        pending = next(later, None)


def search_regex(
    db: sqlite3.Connection,
    conversation_id: str,
    token: str,
    pattern: str,
    scope: str,
    limit: int,
    position: int,
) -> tuple[list[SearchHit], int | None]:
    """One page of regex hits in conversation order, and the position to resume at (or None).

    At most one hit per message or summary (its first matching segment). The
    scan stops at ``limit`` hits, after :data:`~contextengine.store.search.REGEX_MAX_ROWS`
    segments or :data:`REGEX_DEADLINE_S` seconds; a segment whose match times
    out counts as no match.
    """
    compiled = _search.compile_regex(pattern)
    conv = f'conv : "{token}"'
    deadline = time.monotonic() + REGEX_DEADLINE_S
    kind, order, segment = unpack_position(position)
    kinds = {"messages": (0,), "summaries": (1,), "all": (0, 1)}[scope]
    hits: list[SearchHit] = []
    scanned = 0
    for current in kinds:
        if current < kind:
            continue
        if current > kind:
            order, segment = 0, 0
        while True:
            if current == 0:
                rows = db.execute(
                    "SELECT m.seq, m.rowid, m.id, m.role, s.body FROM messages m"
                    " JOIN search_index s ON s.rowid = m.rowid"
                    " WHERE m.conversation_id = ? AND m.seq >= ? ORDER BY m.seq LIMIT ?",
                    (conversation_id, order, _SCAN_BATCH),
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT u.rowid, -u.rowid, u.id, 'summary', s.body FROM summaries u"
                    " JOIN search_index s ON s.rowid = -u.rowid"
                    " WHERE u.conversation_id = ? AND u.rowid >= ? ORDER BY u.rowid LIMIT ?",
                    (conversation_id, order, _SCAN_BATCH),
                ).fetchall()
            if not rows:
                break
            for row_order, owner, item_id, role, body in rows:
                start = segment if row_order == order else 0
                for k, text, last in _segments(db, conv, owner, str(body), start):
                    if scanned >= _search.REGEX_MAX_ROWS or time.monotonic() > deadline:
                        return hits, pack_position(current, row_order, k)
                    scanned += 1
                    span = _search.regex_find(compiled, text, first=k == 0, last=last)
                    if span is not None:
                        hits.append(
                            SearchHit(
                                id=item_id,
                                kind="message" if current == 0 else "summary",
                                seq=int(row_order) if current == 0 else None,
                                role=role,
                                snippet=_search.snippet_around(text, *span),
                                score=0.0,
                            )
                        )
                        break
                if len(hits) >= limit:
                    resume = pack_position(current, row_order + 1, 0)
                    return hits, resume if _more(db, conversation_id, kinds, resume) else None
            order, segment = int(rows[-1][0]) + 1, 0
    return hits, None


def _more(
    db: sqlite3.Connection, conversation_id: str, kinds: Sequence[int], position: int
) -> bool:
    """Whether any row is left to scan from ``position`` on."""
    kind, order, _segment = unpack_position(position)
    if kind == 0 and 0 in kinds:
        row = db.execute(
            "SELECT 1 FROM messages WHERE conversation_id = ? AND seq >= ? LIMIT 1",
            (conversation_id, order),
        ).fetchone()
        if row is not None:
            return True
        order = 0
    if 1 in kinds:
        row = db.execute(
            "SELECT 1 FROM summaries WHERE conversation_id = ? AND rowid >= ? LIMIT 1",
            (conversation_id, order if kind == 1 else 0),
        ).fetchone()
        return row is not None
    return False
