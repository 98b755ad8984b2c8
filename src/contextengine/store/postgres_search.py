"""Search in the PostgreSQL archive: the ``lcm_grep`` engine of :class:`PostgresStore`.

Called by :meth:`contextengine.store.postgres.PostgresStore.search` inside
one transaction, after it checked the conversation and decoded the cursor
(with the shared helpers of :mod:`contextengine.store.search`).

* Text mode: :func:`contextengine.store.search.parse_query` splits the user's
  text into words; :func:`tsquery_sql` asks PostgreSQL to turn each word into
  a tsquery (``plainto_tsquery`` / ``phraseto_tsquery``, each word a bound
  parameter, so no input can break the query syntax) and combines them like
  the SQLite store does (phrases required, terms OR-ed). Candidates are ranked
  by ``ts_rank_cd`` over the GIN-indexed ``tsv`` column, then reordered by the
  shared proximity :func:`~contextengine.store.search.rerank`. Snippets
  (:func:`text_snippet`) are cut in Python around the first query word, with
  the shared :func:`~contextengine.store.search.snippet_around`.
* Regex mode: PostgreSQL's ``~`` (pg_trgm-indexed when available) under a
  ``statement_timeout``, after :func:`translate_regex` fixed the Python-isms
  (``\\b``) whose meaning differs; an invalid pattern is a clear
  :class:`~contextengine.errors.StoreError`. Snippets use the shared
  :func:`~contextengine.store.search.snippet_around`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from psycopg import Connection
from psycopg import errors as pg_errors

from contextengine.errors import StoreError
from contextengine.store import search as _search
from contextengine.store.protocol import SearchHit

__all__ = [
    "plain_snippet",
    "search_regex",
    "search_text",
    "text_snippet",
    "translate_regex",
    "tsquery_sql",
    "with_summary_ids",
]

#: The text-search configuration migration 1 creates: English stemming, no stop-word list.
TS_CONFIG = "ce_english"
#: Characters of a row handed to the reranker and searched for the snippet.
_SNIPPET_SOURCE_CHARS = 20_000
#: ts_rank_cd weights of D, C, B, A: ``ctx`` (D) counts 0.4 of the row's own text (A), as in SQLite.
_WEIGHTS = [0.4, 0.0, 0.0, 1.0]


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


def tsquery_sql(parsed: _search.ParsedQuery) -> tuple[str, list[str]]:
    """SQL building the tsquery of ``parsed``: only placeholders, each word a parameter.

    Same shape as :func:`contextengine.store.search.fts5_match`: phrases
    required, terms OR-ed (and OR-ed with the first phrase so they add to
    the rank without being required).
    """
    cfg = f"'{TS_CONFIG}'::regconfig"
    params: list[str] = []
    terms: list[str] = []
    for term in parsed.terms:
        if term in parsed.prefixes:
            terms.append(
                f"(SELECT CASE WHEN numnode(q) = 0 THEN q ELSE (q::text || ':*')::tsquery END"
                f" FROM plainto_tsquery({cfg}, %s) AS q)"
            )
        else:
            terms.append(f"plainto_tsquery({cfg}, %s)")
        params.append(term)
    phrases = [f"phraseto_tsquery({cfg}, %s)" for _ in parsed.phrases]
    phrase_params = [" ".join(p) for p in parsed.phrases]
    if not phrases:
        return " || ".join(terms), params
    required = " && ".join(phrases)
    if not terms:
        return required, phrase_params
    optional = " || ".join([*terms, phrases[0]])
    return f"({required}) && ({optional})", phrase_params + params + phrase_params[:1]


def plain_snippet(text: str) -> str:
    """The start of ``text`` on one line, bounded like a snippet (no match to highlight)."""
    size = 2 * _search.SNIPPET_CONTEXT
    return " ".join(text[:size].split()) + ("…" if len(text) > size else "")


def text_snippet(parsed: _search.ParsedQuery, text: str) -> str:
    """``text`` around the earliest query word, highlighted; its start when none is found.

    A word matches when it starts with the query word's crude stem (so
    "paints" finds "painting"), the same leniency the ranking has.
    """
    words = [*parsed.terms, *(w for phrase in parsed.phrases for w in phrase)]
    stems = sorted({_search.stem(w) for w in words if w}, key=len, reverse=True)
    if not stems:
        return plain_snippet(text)
    pattern = re.compile(
        r"(?<!\w)(?:" + "|".join(re.escape(s) for s in stems) + r")\w*", re.IGNORECASE
    )
    match = pattern.search(text)
    if match is None:
        return plain_snippet(text)
    return _search.snippet_around(text, match.start(), match.end())


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
    expr, params = tsquery_sql(parsed)
    row = conn.execute(f"SELECT ({expr})::text", params).fetchone()
    tsquery = str(row[0]) if row and row[0] else ""
    if not tsquery:
        return [], False
    phrases = ""
    body_only = ""
    if parsed.phrases:
        # Phrases must match the row's own text, not the previous message's (ctx, weight D).
        cfg = f"'{TS_CONFIG}'::regconfig"
        expr = " && ".join(f"phraseto_tsquery({cfg}, %s)" for _ in parsed.phrases)
        row = conn.execute(f"SELECT ({expr})::text", [" ".join(p) for p in parsed.phrases])
        phrases = str((row.fetchone() or ("",))[0] or "")
        if phrases:
            body_only = " AND ts_filter(tsv, '{a}') @@ CAST(%(p)s AS tsquery)"
    parts = []
    if scope in ("messages", "all"):
        parts.append(
            "SELECT 0 AS k, id, seq AS o, role,"
            " ts_rank_cd(CAST(%(w)s AS real[]), tsv, q, 1) AS score,"
            f" left(body, {_SNIPPET_SOURCE_CHARS}) AS text, ctx"
            " FROM messages, CAST(%(q)s AS tsquery) AS q"
            " WHERE conversation_id = %(c)s AND tsv @@ q" + body_only
        )
    if scope in ("summaries", "all"):
        parts.append(
            "SELECT 1 AS k, id, pk AS o, 'summary' AS role,"
            " ts_rank_cd(CAST(%(w)s AS real[]), tsv, q, 1) AS score,"
            f" left(body, {_SNIPPET_SOURCE_CHARS}) AS text, '' AS ctx"
            " FROM summaries, CAST(%(q)s AS tsquery) AS q"
            " WHERE conversation_id = %(c)s AND tsv @@ q" + body_only
        )
    fetch = max(_search.RERANK_WINDOW, offset + limit + 1)
    rows = conn.execute(
        " UNION ALL ".join(parts) + " ORDER BY score DESC, k, o LIMIT %(n)s",
        {"q": tsquery, "c": conversation_id, "n": fetch, "w": _WEIGHTS, "p": phrases},
    ).fetchall()
    # The reranker sees the previous message's words too, as the SQLite store's does.
    order = _search.rerank(parsed, [(float(r[4]), f"{r[5]} {r[6]}") for r in rows])
    page = [rows[i] for i in order[offset : offset + limit]]
    hits = []
    for kind, item_id, position, role, score, text, _ctx in page:
        snippet = text_snippet(parsed, text)
        hits.append(
            SearchHit(
                id=item_id,
                kind="message" if kind == 0 else "summary",
                seq=int(position) if kind == 0 else None,
                role=role,
                snippet=snippet,
                score=float(score),
            )
        )
    return hits, len(order) > offset + limit


def search_regex(
    conn: Connection[Any],
    conversation_id: str,
    pattern: str,
    scope: str,
    limit: int,
    offset: int,
    timeout_ms: int,
) -> tuple[list[SearchHit], bool]:
    """One page of regex hits in conversation order and whether more exist.

    The pattern runs under ``statement_timeout = timeout_ms``: running past it
    is a :class:`StoreError` telling the model to simplify the pattern.
    """
    if len(pattern) > 1_000:
        raise StoreError("regular expression too long (over 1000 characters)")
    try:  # only for the snippet's span; PostgreSQL decides what matches
        compiled: Any = _search.compile_regex(pattern)
    except StoreError:
        compiled = None
    parts = []
    if scope in ("messages", "all"):
        parts.append(
            "SELECT 0 AS k, id, seq AS o, role, body FROM messages"
            " WHERE conversation_id = %(c)s AND body ~ %(p)s"
        )
    if scope in ("summaries", "all"):
        parts.append(
            "SELECT 1 AS k, id, pk AS o, 'summary' AS role, body FROM summaries"
            " WHERE conversation_id = %(c)s AND body ~ %(p)s"
        )
    conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout_ms),))
    try:
        with conn.transaction():  # a savepoint, so a refused pattern leaves conn usable
            rows = conn.execute(
                " UNION ALL ".join(parts) + " ORDER BY k, o LIMIT %(n)s OFFSET %(s)s",
                {"c": conversation_id, "p": translate_regex(pattern), "n": limit + 1, "s": offset},
            ).fetchall()
    except pg_errors.InvalidRegularExpression as exc:
        # The timeout can strike while PostgreSQL compiles the pattern: it then
        # reports the cancellation as an invalid regular expression.
        if "cancel" not in str(exc):
            raise StoreError(f"invalid regular expression {pattern!r}: {exc}") from None
        raise StoreError(_too_slow(pattern, timeout_ms)) from None
    except pg_errors.QueryCanceled:
        raise StoreError(_too_slow(pattern, timeout_ms)) from None
    hits = []
    for kind, item_id, position, role, body in rows[:limit]:
        span = _search.regex_find(compiled, body) if compiled is not None else None
        snippet = _search.snippet_around(body, *span) if span is not None else plain_snippet(body)
        hits.append(
            SearchHit(
                id=item_id,
                kind="message" if kind == 0 else "summary",
                seq=int(position) if kind == 0 else None,
                role=role,
                snippet=snippet,
                score=0.0,
            )
        )
    return hits, len(rows) > limit


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
