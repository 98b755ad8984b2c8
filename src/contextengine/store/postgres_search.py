"""Search in the PostgreSQL archive: the ``lcm_grep`` engine of :class:`PostgresStore`.

Called by :meth:`contextengine.store.postgres.PostgresStore.search` inside
one transaction, after it checked the conversation and decoded the cursor
(with the shared helpers of :mod:`contextengine.store.search`).

* Text mode: the shared :func:`contextengine.store.ranking.rank`, as on
  SQLite. :class:`PgTextIndex` answers its probes with one query per term over
  the GIN-indexed ``tsv`` columns of ``messages``, ``summaries`` and
  ``search_segments``, ``ORDER BY seq DESC LIMIT cap`` (the planner walks the
  ``(conversation_id, seq)`` index backwards for a common word and takes the
  GIN index for a rare one); ``ts_rank_cd`` is never computed. Each term's
  tsquery is built in Python from its Porter stems
  (:mod:`contextengine.store.postgres_text`), the same words the rows' ``tsv``
  hold, and passed as a bound parameter: its lexemes hold only letters and
  digits, so no input can change the query's syntax. Snippets are cut in
  Python around the query words of the best segment.
* Regex mode: PostgreSQL's ``~`` (pg_trgm-indexed when available) under a
  ``statement_timeout``, after :func:`translate_regex` fixed the Python-isms
  (``\\b``) whose meaning differs, over a window of
  :data:`~contextengine.store.search.REGEX_MAX_ROWS` messages (their segments
  included) per call, in conversation order; the cursor is the position to
  resume from. An invalid pattern is a clear :class:`~contextengine.errors.StoreError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from psycopg import Connection
from psycopg import errors as pg_errors

from contextengine.errors import StoreError
from contextengine.store import ranking as _ranking
from contextengine.store import search as _search
from contextengine.store.postgres_text import tsquery_phrase, tsquery_term
from contextengine.store.protocol import SearchHit
from contextengine.store.segments import SEGMENT_BITS

__all__ = [
    "PgTextIndex",
    "search_regex",
    "search_text",
    "translate_regex",
    "with_summary_ids",
]

#: Messages (with their segments) one regex call scans at most.
_REGEX_WINDOW = _search.REGEX_MAX_ROWS
#: A common word's probe walks back through at most this many times ``cap`` messages.
_RECENT = 16


def translate_regex(pattern: str) -> str:
    """Rewrite the Python-isms of ``pattern`` that PostgreSQL's ARE syntax spells differently.

    ``\\b``/``\\B`` (word boundary) are ``\\y``/``\\Y`` in PostgreSQL, where
    ``\\b`` means backspace; ``(?P<name>...)`` groups become plain groups.
    Inside a bracket expression nothing is rewritten (``[\\b]`` is backspace in both).
    """
    out: list[str] = []
    i = 0
    class_start = -1
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if class_start < 0 and nxt in "bB":
                out.append("\\y" if nxt == "b" else "\\Y")
            else:
                out.append(char + nxt)
            i += 2
            continue
        if class_start >= 0:
            # A "]" right after "[" or "[^" is a literal member, not the end of the class.
            first = class_start + 1 + (pattern[class_start + 1 : class_start + 2] == "^")
            if char == "]" and i > first:
                class_start = -1
        elif char == "[":
            class_start = i
        elif pattern.startswith("(?P<", i):
            close = pattern.find(">", i)
            if close > 0:
                out.append("(")
                i = close + 1
                continue
        out.append(char)
        i += 1
    return "".join(out)


#: (kind, segment >= 1) -> the probe of that region, newest first.
_REGIONS = {
    (0, False): (
        "SELECT 0, seq, 0 FROM messages WHERE conversation_id = %(c)s"
        " AND tsv @@ CAST(%(q)s AS tsquery) ORDER BY seq DESC LIMIT %(n)s"
    ),
    (0, True): (
        "SELECT 0, owner, segment FROM search_segments WHERE conversation_id = %(c)s"
        " AND kind = 0 AND tsv @@ CAST(%(q)s AS tsquery) ORDER BY owner DESC, segment DESC"
        " LIMIT %(n)s"
    ),
    (1, False): (
        "SELECT 1, pk, 0 FROM summaries WHERE conversation_id = %(c)s"
        " AND tsv @@ CAST(%(q)s AS tsquery) ORDER BY pk DESC LIMIT %(n)s"
    ),
    (1, True): (
        "SELECT 1, owner, segment FROM search_segments WHERE conversation_id = %(c)s"
        " AND kind = 1 AND tsv @@ CAST(%(q)s AS tsquery) ORDER BY owner DESC, segment DESC"
        " LIMIT %(n)s"
    ),
}


class PgTextIndex:
    """:class:`~contextengine.store.ranking.TextIndex` over one conversation in PostgreSQL."""

    def __init__(
        self,
        conn: Connection[Any],
        conversation_id: str,
        parsed: _search.ParsedQuery,
        scope: str,
    ) -> None:
        self.conn = conn
        self.conversation_id = conversation_id
        kinds = {"messages": (0,), "summaries": (1,), "all": (0, 1)}[scope]
        self.regions = [r for r in _REGIONS if r[0] in kinds]
        self.terms = {t: tsquery_term(t, prefix=t in parsed.prefixes) for t in parsed.terms}
        # Phrases must match the row's own text (weight A), not the previous message's (D).
        self.phrases = " & ".join(
            f"({q})" for q in (tsquery_phrase(list(p), weight="A") for p in parsed.phrases) if q
        )

    @property
    def empty(self) -> bool:
        """True when no query word has anything the index could hold."""
        return not self.phrases and not any(self.terms.values())

    def _query(self, term: str | None) -> str:
        """The tsquery of one probe: every phrase, and ``term``; '' when nothing is indexable."""
        parts = [self.phrases] if self.phrases else []
        if term is not None:
            if not self.terms.get(term):
                return ""  # no indexable word in it
            parts.append(self.terms[term])
        return " & ".join(f"({p})" for p in parts)

    def probe_many(self, terms: Sequence[str | None], cap: int) -> list[list[_ranking.Key]]:
        """Every term's newest ``cap`` rows per region, in a few statements for all of them.

        The planner alone does badly here: it cannot see that testing
        ``tsv @@`` row by row costs a decompression per row, and it walks an
        index backwards through thousands of rows for a word a few hundred
        hold, or probes each word separately. So, for all the terms at once:
        (1) the words the planner's statistics say are common (in ``cap``
        rows of a conversation this size or more) are tested together on each
        of the conversation's newest :data:`_RECENT` × ``cap`` messages, in
        one walk back; a word found there ``cap`` times is done; (2) the
        others go through the GIN index only (bitmap scans forced), every row
        of each, newest first; (3) later segments and summaries, small
        tables, through GIN too.
        """
        queries = [self._query(t) for t in terms]
        out: list[list[_ranking.Key]] = [[] for _ in terms]
        live = [i for i, q in enumerate(queries) if q]
        if not live:
            return out
        base = {"c": self.conversation_id, "n": cap}
        frequency = self._frequencies()
        size = self.size()
        share = {i: frequency.get(self.terms.get(str(terms[i]), ""), 0.0) for i in live}
        # Walking back costs about a row per cap / share; the GIN path about three
        # per matching row (share * size): walk back for the words where that is less.
        common = [i for i in live if share[i] > 0 and 2 * cap / share[i] < 3 * share[i] * size]
        recent = min(_RECENT * cap, max((int(2 * cap / share[i]) for i in common), default=0))
        if (0, False) in self.regions and common:
            tests = ", ".join(f"tsv @@ CAST(%(q{i})s AS tsquery)" for i in common)
            either = " | ".join(f"({queries[i]})" for i in common)
            rows = self.conn.execute(
                f"SELECT seq, {tests} FROM (SELECT seq, tsv FROM messages"
                " WHERE conversation_id = %(c)s ORDER BY seq DESC LIMIT %(r)s) AS recent"
                " WHERE tsv @@ CAST(%(any)s AS tsquery) ORDER BY seq DESC",
                {
                    **base,
                    "r": recent,
                    "any": either,
                    **{f"q{i}": queries[i] for i in common},
                },
            ).fetchall()
            for row in rows:
                for n, i in enumerate(common):
                    if row[1 + n] and len(out[i]) < cap:
                        out[i].append((0, int(row[0]), 0))
        rare = [i for i in live if len(out[i]) < cap and (0, False) in self.regions]
        regions = [r for r in self.regions if r != (0, False)]
        selects: list[str] = []
        params: dict[str, Any] = dict(base)
        for i in live:
            params[f"q{i}"] = queries[i]
            asked = ([(0, False)] if i in rare else []) + regions
            if i in rare:
                out[i] = []
            selects += [
                f"(SELECT {i}, * FROM ({_REGIONS[r].replace('%(q)s', f'%(q{i})s')}) AS x)"
                for r in asked
            ]
        if selects:
            self._gin_only()
            for i, kind, order, segment in self.conn.execute(" UNION ALL ".join(selects), params):
                out[int(i)].append((int(kind), int(order), int(segment)))
        return out

    def _frequencies(self) -> dict[str, float]:
        """Share of ``messages`` rows holding each common word (``ANALYZE``'s), by lexeme.

        Empty before the first ``ANALYZE`` (autovacuum's, or ``vacuum()``):
        every word then takes the GIN path, correct and only slower for a
        very common word in a very long conversation.
        """
        row = self.conn.execute(
            "SELECT most_common_elems::text, most_common_elem_freqs FROM pg_stats"
            " WHERE schemaname = current_schema() AND tablename = 'messages'"
            " AND attname = 'tsv'"
        ).fetchone()
        if not row or not row[0]:
            return {}
        words = row[0].strip("{}").split(",")
        return {f"'{w.strip(chr(34))}'": float(f) for w, f in zip(words, row[1], strict=False)}

    def _gin_only(self) -> None:
        """From here on this transaction's planner uses bitmap (GIN) scans only."""
        self.conn.execute(
            "SELECT set_config('enable_indexscan', 'off', true),"
            " set_config('enable_seqscan', 'off', true)"
        )

    def texts(self, keys: Sequence[_ranking.Key]) -> dict[_ranking.Key, tuple[str, str]]:
        out: dict[_ranking.Key, tuple[str, str]] = {}
        c = self.conversation_id
        seqs = [k[1] for k in keys if k[0] == 0 and k[2] == 0]
        if seqs:
            for seq, body, ctx in self.conn.execute(
                "SELECT seq, body, ctx FROM messages WHERE conversation_id = %s AND seq = ANY(%s)",
                (c, seqs),
            ):
                out[(0, int(seq), 0)] = (body, ctx)
        pks = [k[1] for k in keys if k[0] == 1 and k[2] == 0]
        if pks:
            for pk, body in self.conn.execute(
                "SELECT pk, body FROM summaries WHERE conversation_id = %s AND pk = ANY(%s)",
                (c, pks),
            ):
                out[(1, int(pk), 0)] = (body, "")
        later = [k for k in keys if k[2] > 0]
        if later:
            columns = [list(column) for column in zip(*later, strict=True)]
            for kind, owner, segment, body in self.conn.execute(
                "SELECT s.kind, s.owner, s.segment, s.body FROM search_segments s"
                " JOIN unnest(%s::smallint[], %s::bigint[], %s::int[]) AS u(k, o, g)"
                " ON s.kind = u.k AND s.owner = u.o AND s.segment = u.g"
                " WHERE s.conversation_id = %s",
                (*columns, c),
            ):
                out[(int(kind), int(owner), int(segment))] = (body, "")
        return out

    def position(self, key: _ranking.Key) -> int | None:
        return key[1] if key[0] == 0 else None

    def size(self) -> int:
        row = self.conn.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = %s",
            (self.conversation_id,),
        ).fetchone()
        return int(row[0]) if row else 0


def _identities(
    conn: Connection[Any], conversation_id: str, keys: Sequence[_ranking.Key]
) -> dict[tuple[int, int], tuple[str, int | None, str]]:
    """``(kind, order) -> (id, seq, role)`` of the owners of ``keys``, in this conversation only."""
    found: dict[tuple[int, int], tuple[str, int | None, str]] = {}
    seqs = list({k[1] for k in keys if k[0] == 0})
    pks = list({k[1] for k in keys if k[0] == 1})
    if seqs:
        for seq, item_id, role in conn.execute(
            "SELECT seq, id, role FROM messages WHERE conversation_id = %s AND seq = ANY(%s)",
            (conversation_id, seqs),
        ):
            found[(0, int(seq))] = (item_id, int(seq), role)
    if pks:
        for pk, item_id in conn.execute(
            "SELECT pk, id FROM summaries WHERE conversation_id = %s AND pk = ANY(%s)",
            (conversation_id, pks),
        ):
            found[(1, int(pk))] = (item_id, None, "summary")
    return found


def search_text(
    conn: Connection[Any],
    conversation_id: str,
    query: str,
    scope: str,
    limit: int,
    offset: int,
) -> tuple[list[SearchHit], bool]:
    """One page of ranked full-text hits (``summary_id`` not yet filled) and whether more exist."""
    parsed = _search.parse_query(query)
    if parsed.empty:
        return [], False
    index = PgTextIndex(conn, conversation_id, parsed, scope)
    if index.empty:
        return [], False
    # Both stores match by Porter stems, so Python finds what the index matched;
    # only a match through ``ctx`` (the previous message) leaves the text unmarked.
    return _ranking.hits_page(
        parsed,
        index,
        offset=offset,
        limit=limit,
        owners=lambda keys: _identities(conn, conversation_id, keys),
    )


# ------------------------------------------------------------------------------------ regex


def pack_position(kind: int, order: int, segment: int) -> int:
    """A regex cursor position: the row ``(kind, order)`` and the segment to resume at."""
    return (kind << 61) | (order << SEGMENT_BITS) | segment


def unpack_position(position: int) -> tuple[int, int, int]:
    mask = (1 << SEGMENT_BITS) - 1
    return position >> 61, (position >> SEGMENT_BITS) & ((1 << 41) - 1), position & mask


# One window of rows in conversation order: segment 0 from the owner's table,
# later segments from search_segments; the first matching segment of each row.
_REGEX_SQL = {
    0: (
        "WITH r AS ("
        " SELECT seq AS o, 0 AS g, body FROM messages"
        " WHERE conversation_id = %(c)s AND seq >= %(lo)s AND seq < %(hi)s"
        " UNION ALL SELECT owner, segment, body FROM search_segments"
        " WHERE conversation_id = %(c)s AND kind = 0 AND owner >= %(lo)s AND owner < %(hi)s)"
    ),
    1: (
        "WITH r AS ("
        " SELECT pk AS o, 0 AS g, body FROM summaries"
        " WHERE conversation_id = %(c)s AND pk >= %(lo)s AND pk < %(hi)s"
        " UNION ALL SELECT owner, segment, body FROM search_segments"
        " WHERE conversation_id = %(c)s AND kind = 1 AND owner >= %(lo)s AND owner < %(hi)s)"
    ),
}
# ``^``/``$`` must not match where a segment was cut: the text is tested with a
# space beyond each cut (as the SQLite store's :func:`~contextengine.store.search.regex_find`).
_REGEX_MATCH = (
    " SELECT DISTINCT ON (o) o, g, body FROM r"
    " WHERE (o, g) >= (%(o)s, %(g)s) AND body ~ %(p)s"
    " AND (CASE WHEN g > 0 THEN ' ' ELSE '' END || body || CASE WHEN EXISTS ("
    "   SELECT 1 FROM search_segments x WHERE x.conversation_id = %(c)s AND x.kind = %(k)s"
    "   AND x.owner = r.o AND x.segment = r.g + 1) THEN ' ' ELSE '' END) ~ %(p)s"
    " ORDER BY o, g LIMIT %(n)s"
)


def search_regex(
    conn: Connection[Any],
    conversation_id: str,
    pattern: str,
    scope: str,
    limit: int,
    position: int,
    timeout_ms: int,
) -> tuple[list[SearchHit], int | None]:
    """One page of regex hits in conversation order and the position to resume at (or None).

    At most one hit per message or summary. Each call scans at most
    :data:`_REGEX_WINDOW` rows of a kind (messages, then summaries) with their
    segments, under ``statement_timeout = timeout_ms``: running past it is a
    :class:`StoreError` telling the model to simplify the pattern.
    """
    if len(pattern) > 1_000:
        raise StoreError("regular expression too long (over 1000 characters)")
    try:  # only for the snippet's span; PostgreSQL decides what matches
        compiled: Any = _search.compile_regex(pattern)
    except StoreError:
        compiled = None
    kind, order, segment = unpack_position(position)
    kinds = {"messages": (0,), "summaries": (1,), "all": (0, 1)}[scope]
    conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout_ms),))
    hits: list[SearchHit] = []
    for current in kinds:
        if current < kind:
            continue
        if current > kind:
            order, segment = 0, 0
        end = _end(conn, conversation_id, current)
        if order >= end:
            continue
        hi = order + _REGEX_WINDOW
        params = {
            "c": conversation_id,
            "lo": order,
            "hi": hi,
            "o": order,
            "g": segment,
            "p": translate_regex(pattern),
            "k": current,
            "n": limit - len(hits) + 1,
        }
        try:
            with conn.transaction():  # a savepoint, so a refused pattern leaves conn usable
                rows = conn.execute(_REGEX_SQL[current] + _REGEX_MATCH, params).fetchall()
        except pg_errors.InvalidRegularExpression as exc:
            # The timeout can strike while PostgreSQL compiles the pattern: it then
            # reports the cancellation as an invalid regular expression.
            if "cancel" not in str(exc):
                raise StoreError(f"invalid regular expression {pattern!r}: {exc}") from None
            raise StoreError(_too_slow(pattern, timeout_ms)) from None
        except pg_errors.QueryCanceled:
            raise StoreError(_too_slow(pattern, timeout_ms)) from None
        room = limit - len(hits)
        hits += _regex_hits(conn, conversation_id, current, rows[:room], compiled)
        if len(rows) > room:  # more matches in this window: the next page starts after this one
            return hits, pack_position(current, int(rows[room - 1][0]) + 1, 0)
        if hi < end:  # the window is scanned; the rest of the conversation is the next call's
            return hits, pack_position(current, hi, 0)
        if len(hits) >= limit:
            later = [k for k in kinds if k > current and _end(conn, conversation_id, k) > 0]
            return hits, pack_position(later[0], 0, 0) if later else None
    return hits, None


def _end(conn: Connection[Any], conversation_id: str, kind: int) -> int:
    """One past the last row order of ``kind`` in the conversation."""
    sql = (
        "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE conversation_id = %s"
        if kind == 0
        else "SELECT COALESCE(MAX(pk) + 1, 0) FROM summaries WHERE conversation_id = %s"
    )
    row = conn.execute(sql, (conversation_id,)).fetchone()
    return int(row[0]) if row else 0


def _regex_hits(
    conn: Connection[Any],
    conversation_id: str,
    kind: int,
    rows: Sequence[Sequence[Any]],
    compiled: Any,
) -> list[SearchHit]:
    owners = _identities(conn, conversation_id, [(kind, int(r[0]), int(r[1])) for r in rows])
    hits = []
    for order, segment, body in rows:
        owner = owners.get((kind, int(order)))
        if owner is None:  # pragma: no cover - deleted meanwhile
            continue
        item_id, seq, role = owner
        span = (
            _search.regex_find(compiled, body, first=int(segment) == 0)
            if compiled is not None
            else None
        )
        hits.append(
            SearchHit(
                id=item_id,
                kind="message" if kind == 0 else "summary",
                seq=seq,
                role=role,
                snippet=(
                    _search.snippet_around(body, *span)
                    if span is not None
                    else _search.plain_snippet(body)
                ),
                score=0.0,
            )
        )
    return hits


def _too_slow(pattern: str, timeout_ms: int) -> str:
    return (
        f"regular expression {pattern!r} ran past {timeout_ms} ms; simplify it or search text mode"
    )


def with_summary_ids(
    conn: Connection[Any], conversation_id: str, hits: list[SearchHit]
) -> list[SearchHit]:
    """Fill ``summary_id`` for hits that left the active context."""
    if not hits:
        return hits
    ids = [h.id for h in hits]
    in_view = {
        r[0]
        for r in conn.execute(
            "SELECT ref_id FROM context_items WHERE conversation_id = %s AND ref_id = ANY(%s)",
            (conversation_id, ids),
        )
    }
    parents: dict[str, str] = {}
    for source_id, summary_id in conn.execute(
        "SELECT DISTINCT ON (source_id) source_id, summary_id FROM summary_sources"
        " WHERE conversation_id = %s AND source_id = ANY(%s) ORDER BY source_id, summary_id",
        (conversation_id, ids),
    ):
        parents[source_id] = summary_id
    return [
        hit
        if hit.id in in_view or hit.id not in parents
        else dataclasses.replace(hit, summary_id=parents[hit.id])
        for hit in hits
    ]
