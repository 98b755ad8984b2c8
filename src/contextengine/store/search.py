"""Search-query handling shared by every store: safe FTS queries, reranking, cursors, regex.

Stores call these helpers from ``Store.search`` (the engine of ``lcm_grep``):

* :func:`parse_query` turns the model's or user's text into terms and quoted
  phrases. Nothing of the text reaches the full-text engine unquoted, so no
  input (``"``, ``AND OR NOT``, ``*``, ``NEAR(``, ``col:``, ``^``, emoji...)
  can break the query syntax. Stop words are dropped unless nothing else is
  left; the irregular forms of a word are added (:mod:`.wordforms`).
* :func:`fts5_match` builds the SQLite FTS5 ``MATCH`` expression: every quoted
  phrase is required, the bare terms are OR-ed (natural-language questions
  rarely share all their words with the answer; BM25 ranks the rows that share
  more of them first).
* :func:`encode_cursor` / :func:`decode_cursor` make opaque page cursors bound
  to one conversation, mode, scope and query; a cursor from another query or
  conversation is rejected.
* :func:`compile_regex` and :func:`regex_find` give bounded regex search: a
  compile error is a clear :class:`~contextengine.errors.StoreError`, every
  text scanned is one segment of a row (:mod:`contextengine.store.segments`)
  and every match runs under a timeout, so neither a catastrophic pattern nor
  a 10 MB row can hang the agent.

Ranking of text mode is in :mod:`contextengine.store.ranking`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The `regex` module can time a match out; `re` cannot, and a model-written
# pattern with catastrophic backtracking must not hang the agent.
import regex as _regex

from contextengine.errors import StoreError
from contextengine.store.wordforms import variants

__all__ = [
    "HIGHLIGHT_CLOSE",
    "HIGHLIGHT_OPEN",
    "MAX_LIMIT",
    "MAX_OFFSET",
    "MAX_PHRASE_WORDS",
    "MAX_QUERY_PHRASES",
    "MAX_QUERY_TERMS",
    "REGEX_MAX_ROWS",
    "REGEX_ROW_CHARS",
    "STOP_WORDS",
    "ParsedQuery",
    "compile_regex",
    "decode_cursor",
    "encode_cursor",
    "fts5_match",
    "parse_query",
    "plain_snippet",
    "quote",
    "regex_find",
    "snippet_around",
]

#: Markers around the matched text in snippets.
HIGHLIGHT_OPEN = "«"
HIGHLIGHT_CLOSE = "»"
#: Largest page a search returns.
MAX_LIMIT = 100
#: Deepest offset a cursor may point to: pages beyond it are refused, not computed.
MAX_OFFSET = 5_000
#: Regex mode scans at most this many rows (segments) per call, then returns a cursor to continue.
REGEX_MAX_ROWS = 20_000
#: Regex mode looks at no more than this many characters of one row; rows are segments
#: (:mod:`contextengine.store.segments`), far shorter, so this is only a safety net.
REGEX_ROW_CHARS = 100_000
#: Timeout of one regex match over one row, in seconds.
REGEX_ROW_TIMEOUT_S = 0.25
#: Most distinct terms of a text query searched (the first ones); each costs one index probe.
MAX_QUERY_TERMS = 32
#: Most quoted phrases of a text query kept (the first ones).
MAX_QUERY_PHRASES = 8
#: Most words of one quoted phrase kept (its first ones).
MAX_PHRASE_WORDS = 32
#: Number of BM25 candidates the rerank (:mod:`contextengine.store.ranking`) reorders.
RERANK_WINDOW = 100
#: Characters of context on each side of a match in a snippet.
SNIPPET_CONTEXT = 90

_STOP_WORDS_TEXT = """
a about above after again against all am an and any are aren as at be because been before
being below between both but by can cannot could couldn did didn do does doesn doing don
down during each few for from further had hadn has hasn have haven having he her here hers
herself him himself his how i if in into is isn it its itself just let ll me more most
mustn my myself no nor not now of off on once only or other ought our ours ourselves out
over own re same shan she should shouldn so some such than that the their theirs them
themselves then there these they this those through to too under until up ve very was
wasn we were weren what when where which while who whom why will with won would wouldn you
your yours yourself yourselves s t d m o y kind sort type ever also whose
"""
#: English stop words dropped from text queries (kept when a query has nothing else).
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_PHRASE = re.compile(r'"([^"]*)"')
_WORD = re.compile(r"\w+\*?", re.UNICODE)
_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True, kw_only=True)
class ParsedQuery:
    """A query split into required phrases (each a tuple of words) and optional terms."""

    phrases: tuple[tuple[str, ...], ...]
    terms: tuple[str, ...]
    #: Terms the user ended with ``*``: matched as prefixes.
    prefixes: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.phrases and not self.terms


def parse_query(text: str, *, stop_words: frozenset[str] = STOP_WORDS) -> ParsedQuery:
    """Split ``text`` into quoted phrases and lower-cased terms, dropping stop words.

    A double quote without its partner is ignored. Stop words are kept only
    when the query has nothing else (a search for "the who" still finds
    something). The other forms of an irregular word ("bought" for "buy",
    :func:`~contextengine.store.wordforms.variants`) follow the query's own
    terms. Duplicate terms are dropped, first occurrence wins. At most
    :data:`MAX_QUERY_TERMS` terms, :data:`MAX_QUERY_PHRASES` phrases and
    :data:`MAX_PHRASE_WORDS` words of a phrase are kept, the first ones: every
    term costs one index probe, and a model that pastes a whole log as its
    query must get an answer in bounded time.
    """
    phrases: list[tuple[str, ...]] = []
    for raw in _PHRASE.findall(text):
        words = tuple(w.lower() for w in _TOKEN.findall(raw))[:MAX_PHRASE_WORDS]
        if words and words not in phrases:
            phrases.append(words)
            if len(phrases) == MAX_QUERY_PHRASES:
                break
    rest = _PHRASE.sub(" ", text)
    raw_words = [w.lower() for w in _WORD.findall(rest)]
    prefixes = frozenset(w[:-1] for w in raw_words if w.endswith("*") and len(w) > 1)
    bare = [w.rstrip("*") for w in raw_words if w.rstrip("*")]
    kept = [w for w in bare if w not in stop_words] or ([] if phrases else bare)
    # dict.fromkeys: first occurrence wins, in linear time (a list scan was quadratic).
    own = tuple(dict.fromkeys(kept))[:MAX_QUERY_TERMS]
    # Irregular forms Porter's stemmer cannot join ("buy" / "bought") come after
    # the query's own words, so the cap never drops one of those for them.
    forms = [v for w in own if w not in prefixes for v in variants(w) if v not in stop_words]
    terms = tuple(dict.fromkeys([*own, *forms]))[:MAX_QUERY_TERMS]
    return ParsedQuery(phrases=tuple(phrases), terms=terms, prefixes=prefixes.intersection(terms))


def quote(word: str) -> str:
    """``word`` as one FTS5 string: the only form user text ever takes in a ``MATCH``."""
    return '"' + word.replace('"', '""') + '"'


def fts5_match(
    query: ParsedQuery, *, phrase_columns: str = "body", term_columns: str = "{body ctx}"
) -> str:
    """The FTS5 expression for ``query``; "" when the query is empty.

    Every phrase is required, in ``phrase_columns`` (the row's own text);
    terms are alternatives, in ``term_columns`` (the row's text and the context
    column, see the SQLite store). When there are both, the terms are OR-ed
    with the first phrase so they add to the BM25 score (FTS5 scores every
    phrase of the expression) without being required.
    """
    if query.empty:
        return ""
    phrases = [f"{phrase_columns} : (" + " ".join(quote(w) for w in p) + ")" for p in query.phrases]
    terms = [
        f"{term_columns} : (" + quote(t) + (" *" if t in query.prefixes else "") + ")"
        for t in query.terms
    ]
    if not phrases:
        return " OR ".join(terms)
    if not terms:
        return " AND ".join(phrases)
    optional = " OR ".join([*terms, phrases[0]])
    return " AND ".join(phrases) + f" AND ({optional})"


# ------------------------------------------------------------------------------------ cursors


def _query_hash(conversation_id: str, mode: str, scope: str, query: str) -> str:
    material = json.dumps([conversation_id, mode, scope, query], ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def encode_cursor(conversation_id: str, mode: str, scope: str, query: str, offset: int) -> str:
    """An opaque cursor for the page starting at ``offset`` of this exact search."""
    payload = {"o": offset, "q": _query_hash(conversation_id, mode, scope, query)}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, conversation_id: str, mode: str, scope: str, query: str) -> int:
    """The offset a cursor points to; :class:`StoreError` if it is malformed or foreign."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload: Any = json.loads(raw)
        offset = payload["o"]
        digest = payload["q"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise StoreError("invalid cursor: pass the next_cursor of a previous result") from None
    if not isinstance(offset, int) or isinstance(offset, bool) or not isinstance(digest, str):
        raise StoreError("invalid cursor: pass the next_cursor of a previous result")
    if digest != _query_hash(conversation_id, mode, scope, query):
        raise StoreError(
            "cursor belongs to another search (query, mode, scope or conversation differ)"
        )
    # Text cursors count results; regex cursors are scan positions (row and segment).
    if not 0 <= offset <= (MAX_OFFSET * 10 if mode == "text" else 1 << 63):
        raise StoreError("invalid cursor: offset out of range")
    return offset


# ------------------------------------------------------------------------------------ regex


def compile_regex(pattern: str) -> Any:
    """Compile ``pattern``; :class:`StoreError` naming the problem when it is invalid.

    Every match later runs under a timeout (:func:`regex_find`).
    """
    if len(pattern) > 1_000:
        raise StoreError("regular expression too long (over 1000 characters)")
    try:
        return _regex.compile(pattern, _regex.VERSION0)
    except _regex.error as exc:
        raise StoreError(f"invalid regular expression {pattern!r}: {exc}") from None


def regex_find(
    compiled: Any, text: str, *, first: bool = True, last: bool = True
) -> tuple[int, int] | None:
    """The span of the first match of ``compiled`` in ``text`` (one segment), or None.

    ``first`` / ``last`` say whether the segment starts / ends its row: when it
    does not, ``^``, ``\\A``, ``$`` and ``\\Z`` must not match at the cut, so
    the segment is searched as if a space stood beyond it (a cut falls on
    whitespace but for runs of thousands of characters without any). A match
    that times out counts as no match: the segment is skipped rather than
    hanging the search.
    """
    prefix = "" if first else " "
    subject = prefix + text[:REGEX_ROW_CHARS] + ("" if last else " ")
    try:
        match = compiled.search(subject, len(prefix), timeout=REGEX_ROW_TIMEOUT_S)
    except TimeoutError:
        return None
    if match is None:
        return None
    start = max(0, int(match.start()) - len(prefix))
    return start, max(start, min(len(text), int(match.end()) - len(prefix)))


def plain_snippet(text: str) -> str:
    """The start of ``text`` on one line, bounded like a snippet (no match to highlight)."""
    size = 2 * SNIPPET_CONTEXT
    return " ".join(text[:size].split()) + ("…" if len(text) > size else "")


def snippet_around(
    text: str,
    start: int,
    end: int,
    *,
    context: int = SNIPPET_CONTEXT,
    also: Sequence[tuple[int, int]] = (),
) -> str:
    """Text around ``text[start:end]`` with the match highlighted, on one line, bounded.

    ``also`` are more spans to highlight (other query words) when they fall
    inside the window; spans are ``(start, end)`` offsets in ``text``, sorted.
    """
    end = min(end, start + 2 * context)
    left = max(0, start - context)
    right = min(len(text), end + context)
    spans = [(start, end), *((a, b) for a, b in also if a >= end and b <= right)]
    pieces = [text[left:start]]
    for n, (a, b) in enumerate(spans):
        pieces.append(HIGHLIGHT_OPEN + text[a:b] + HIGHLIGHT_CLOSE)
        pieces.append(text[b : spans[n + 1][0] if n + 1 < len(spans) else right])
    piece = " ".join("".join(pieces).split())
    return ("…" if left > 0 else "") + piece + ("…" if right < len(text) else "")
