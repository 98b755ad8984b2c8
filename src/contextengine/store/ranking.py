"""Text-mode ranking of ``lcm_grep``, shared by every store: bounded candidates, BM25, rerank.

A store answers the questions of :class:`TextIndex` (which rows hold this
word, newest first, at most ``cap``; what do these rows say) and
:func:`rank` does the rest, so both stores rank alike and no search does work
proportional to the conversation's or a row's size:

1. **Candidates, bounded.** One *probe* per query term asks the full-text
   index for the rows of the conversation that hold the term (and every quoted
   phrase), newest first, at most ``cap`` (:func:`probe_cap`: about
   :data:`PROBE_ROWS` rows over all the terms of a query; every row of a
   conversation of at most :data:`COMPLETE_ROWS`). A term found in fewer rows
   than the cap is *rare*: all its rows are candidates, however old. A term
   found in more is *common*: only its newest ``cap`` rows are, a recency
   window (an agent's recent work is what it searches most; a common word
   alone says little about which old row is meant). Probes never call the
   engine's own ranking function, whose cost grows with the number of rows
   holding each word in the whole archive (FTS5's ``bm25()`` counts them for
   every query: 60 ms for a rare word and over a second for a common one in a
   conversation of a million messages).
2. **Document frequencies** come from the probes: exact for a rare term,
   extrapolated for a common one from the density of its window
   (``cap * messages / messages in the window``). They are the conversation's
   own, so another conversation's text never changes a ranking. The IDF has a
   floor (:func:`_idf`).
3. **Coarse order**: each candidate scores the IDF of the terms its probes
   say it holds. The best :data:`SCORED_ROWS` (more for deep pages) are read
   and scored by **BM25** (k1 1.2, b 0.75; a row's own text weighs 1, the
   previous message's start, ``ctx``, 0.4 — the weights of the SQLite index),
   counting term occurrences in the text; a probe's answer overrides the
   count (a row it found holds the term at least once, if only in ``ctx``; a
   row inside its window that it did not find holds none).
4. **Rerank** of the best :data:`~contextengine.store.search.RERANK_WINDOW`
   by coverage of the query's words (IDF-weighted) and proximity
   (``_Scorer.boost``), looking only at the words a regular expression
   preselects; then each message moves part of the way up to the score of
   the message just before or after it (:func:`_with_neighbours`).
5. **One hit per message**: a message matched by several segments
   (:mod:`contextengine.store.segments`) appears once, with its best segment.

Ties go to the newer row, so pages are deterministic.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from contextengine.store import search as _search
from contextengine.store.protocol import SearchHit
from contextengine.store.stemming import count_stems, match_words, word_stems
from contextengine.store.wordforms import variants

__all__ = [
    "COMPLETE_ROWS",
    "PROBE_ROWS",
    "SCORED_ROWS",
    "Key",
    "Owner",
    "Ranked",
    "Ranking",
    "TextIndex",
    "explain",
    "hits_page",
    "probe_cap",
    "query_snippet",
    "rank",
]

#: A searchable row: ``(kind, order, segment)``. ``kind`` 0 is a message, 1 a
#: summary; ``order`` grows with recency within a kind (a store's own row
#: number); ``segment`` is the segment number (0 for short texts).
Key = tuple[int, int, int]

#: Rows all the probes of one query may return together (spread over its terms).
PROBE_ROWS = 2_400
#: Smallest and largest probe cap per term.
MIN_PROBE_CAP = 150
MAX_PROBE_CAP = 1_200
#: Conversations with at most this many messages are probed completely.
COMPLETE_ROWS = 4_000
#: Candidates read and scored exactly per query (at least twice the page depth).
#: LoCoMo recall is the same from 150 to 5,000; each costs up to a segment's scan.
SCORED_ROWS = 150
_TOKEN = re.compile(r"\w+")
#: BM25 parameters and the weight of ``ctx`` (the previous message's start).
K1 = 1.2
B = 0.75
CTX_WEIGHT = 0.4
#: Share of the way to its best neighbour's rerank score a weaker row moves up
#: (LoCoMo recall@10: 0 -> 78.6%, 0.3 -> 79.8%, 0.5 -> 80.1%, 0.7 -> 80.1%; but
#: 0.5 lost 2 points of anchor recall@5 on ids in the SWE-bench runs, 0.3 none).
NEIGHBOUR_WEIGHT = 0.3


class TextIndex(Protocol):
    """What :func:`rank` needs from a store, for one conversation and one query."""

    def probe_many(self, terms: Sequence[str | None], cap: int) -> list[list[Key]]:
        """For each term, the rows holding every phrase of the query and it (None: phrases only).

        At most ``cap`` rows per region (messages' segment 0, messages' later
        segments, and the same for summaries when the scope includes them),
        newest first within a region. All the terms of a query are asked at
        once, so a store can share work between them.
        """
        ...

    def texts(self, keys: Sequence[Key]) -> Mapping[Key, tuple[str, str]]:
        """``(text, ctx)`` of each row still there."""
        ...

    def position(self, key: Key) -> int | None:
        """The ``seq`` of the message a row belongs to (None for a summary)."""
        ...

    def size(self) -> int:
        """How many messages the conversation holds."""
        ...


@dataclass(frozen=True, kw_only=True)
class Ranked:
    """One result of :func:`rank`: the best segment of one message or summary."""

    key: Key
    score: float
    text: str
    ctx: str


@dataclass(frozen=True, kw_only=True)
class Ranking:
    """The ranked results (at least as many as asked for, when there are) and how many exist."""

    results: list[Ranked]
    #: Distinct messages and summaries among all the candidates.
    total: int


#: What a store knows of the row a key names: ``(id, seq, role)`` (seq None for a summary).
Owner = tuple[str, int | None, str]


def hits_page(
    parsed: _search.ParsedQuery,
    index: TextIndex,
    *,
    offset: int,
    limit: int,
    owners: Callable[[list[Key]], Mapping[tuple[int, int], Owner]],
    highlight: Callable[[Key], str] | None = None,
) -> tuple[list[SearchHit], bool]:
    """One page of ranked hits (``summary_id`` not yet filled) and whether more exist.

    What every store's text search does once it has its :class:`TextIndex`:
    rank, take the page, look up who owns each row (``owners``, the store's
    query), and cut each snippet around the query's words in the row's own
    text (``highlight``, the store's own marking, when Python finds none).
    """
    ranking = rank(parsed, index, want=offset + limit + 1)
    page = ranking.results[offset : offset + limit]
    found = owners([r.key for r in page])
    hits = []
    for result in page:
        owner = found.get((result.key[0], result.key[1]))
        if owner is None:  # pragma: no cover - deleted between the probe and this read
            continue
        item_id, seq, role = owner
        snippet, context = explain(parsed, result, highlight)
        hits.append(
            SearchHit(
                id=item_id,
                kind="message" if result.key[0] == 0 else "summary",
                seq=seq,
                role=role,
                snippet=snippet,
                score=result.score,
                context=context,
            )
        )
    return hits, ranking.total > offset + limit


def explain(
    parsed: _search.ParsedQuery, result: Ranked, highlight: Callable[[Key], str] | None = None
) -> tuple[str, str | None]:
    """``(snippet, context)`` of one result: why it matched, in words the model can check.

    The snippet is the row's own text around its query words whenever it
    holds any. A row that holds none ranks only through ``ctx`` (the start of
    the message before it): its snippet is the start of its own text and
    ``context`` is the neighbour's text around the query words, so a reply is
    never shown as a bare hit it cannot explain. Python's Porter stems find
    what both stores' indexes match; only when they find nothing in either
    column does ``highlight`` (SQLite's own ``snippet()``, which also folds
    diacritics) get a say, and its answer counts only if it marked a word.
    """
    own = query_snippet(parsed, result.text)
    if own:
        return own, None
    near = query_snippet(parsed, result.ctx) if result.ctx else None
    if near:
        return _search.plain_snippet(result.text), near
    marked = highlight(result.key) if highlight is not None else ""
    if _search.HIGHLIGHT_OPEN in marked:
        return marked, None
    return _search.plain_snippet(result.text), None


def probe_cap(terms: int, size: int) -> int:
    """Rows one probe may return, for a query of ``terms`` terms in a conversation of ``size``."""
    if size <= COMPLETE_ROWS:
        return COMPLETE_ROWS + 1
    return max(MIN_PROBE_CAP, min(MAX_PROBE_CAP, PROBE_ROWS // max(1, terms)))


def _region(key: Key) -> tuple[int, bool]:
    return key[0], key[2] > 0


@dataclass
class _Probe:
    """One term's probe: the rows it found and, per region it filled, the oldest of them."""

    found: set[Key]
    floors: dict[tuple[int, bool], Key]
    df: float

    def knows(self, key: Key) -> bool | None:
        """Whether the row holds the term: True, False, or None when the window cannot tell."""
        if key in self.found:
            return True
        floor = self.floors.get(_region(key))
        if floor is None or (key[1], key[2]) > (floor[1], floor[2]):
            return False
        return None


def _read_probe(index: TextIndex, keys: list[Key], cap: int, size: int) -> _Probe:
    regions: dict[tuple[int, bool], list[Key]] = {}
    for key in keys:
        regions.setdefault(_region(key), []).append(key)
    floors: dict[tuple[int, bool], Key] = {}
    df = 0.0
    for region, found in regions.items():
        if len(found) < cap:
            df += len(found)
            continue
        floor = found[-1]
        floors[region] = floor
        position = index.position(floor)
        if position is None or size <= 0:
            df += len(found)
        else:
            # Density of the window, extrapolated to the whole conversation.
            df += len(found) * size / max(1, size - position)
    return _Probe(found=set(keys), floors=floors, df=df)


def _idf(documents: float, df: float) -> float:
    """``ln(3 + N / (df + 0.5))``: never below ln 3, so a word in most rows still counts.

    With the conversation's own statistics, the words every row shares (the
    speakers' names of a dialogue, the project's name in a coding session)
    would otherwise weigh nothing, though a question naming them is usually
    about rows that hold them. The floor was chosen on LoCoMo recall (ln 1:
    69.8% recall@5; ln 2: 71.0%; ln 3: 71.1%, as with the archive-wide
    statistics FTS5's ``bm25()`` used).
    """
    return math.log(3.0 + documents / (df + 0.5))


def _words(text: str) -> int:
    """About how many words ``text`` holds (BM25's document length): spaces and newlines."""
    return text.count(" ") + text.count("\n") + 1 if text else 0


@dataclass
class _Scored:
    """One row scored by BM25."""

    score: float
    key: Key
    text: str
    ctx: str


class _Scorer:
    """BM25 over the text of a bounded set of rows, with the probes' knowledge as a floor."""

    def __init__(
        self,
        parsed: _search.ParsedQuery,
        probes: Sequence[_Probe],
        documents: float,
        phrase_df: float,
    ) -> None:
        self.probes = probes
        self.idf = [_idf(documents, p.df) for p in probes]
        self.prefixes = frozenset(parsed.prefixes)
        # A term is one stem, or several ("user_id" is "user" then "id" to the index);
        # a prefix term (``word*``) matches every stem it starts.
        self.keys: list[str | tuple[str, ...]] = []
        for term in parsed.terms:
            stems = tuple(word_stems(term)) if term not in self.prefixes else (term,)
            self.keys.append(stems[0] if len(stems) == 1 else stems)
        self.phrases = [tuple(word_stems(" ".join(p))) for p in parsed.phrases]
        self.sequences = [k for k in self.keys if isinstance(k, tuple) and k] + self.phrases
        # Every stem the rerank looks for, in query order: terms, then the phrases' words.
        wanted: list[str] = []
        for key in [*self.keys, *self.phrases]:
            wanted += [key] if isinstance(key, str) else list(key)
        self.wanted = list(dict.fromkeys(w for w in wanted if w))
        self.stems = frozenset(self.wanted) - self.prefixes
        self.phrase_idf = _idf(documents, phrase_df)
        # The irregular forms parse_query added stand for the word they came from:
        # "bought" covers "buy", and is no pair of its own.
        alias: dict[str, str] = {}
        for n, term in enumerate(parsed.terms):
            for other in parsed.terms[:n]:
                if term in variants(other) and other not in alias:
                    alias[crude_stem(term)] = crude_stem(other)
                    break
        words = [*parsed.terms, *(w for phrase in parsed.phrases for w in phrase)]
        self.crude = [w for w in dict.fromkeys(crude_stem(w) for w in words) if w not in alias]
        self.alias = alias
        self.crude_set = frozenset(self.crude)
        # Rare words weigh more in the coverage, as in BM25 (LoCoMo recall@10 +0.4 point).
        self.crude_idf: dict[str, float] = {}
        for i, term in enumerate(parsed.terms):
            self.crude_idf.setdefault(crude_stem(term), self.idf[i])
        for w in self.crude:
            self.crude_idf.setdefault(w, self.phrase_idf)
        # A word whose crude stem is s starts with s: only those are looked at.
        self.crude_pattern = re.compile(
            r"(?<!\w)(?:" + "|".join(re.escape(w) for w in [*self.crude, *alias]) + r")\w*",
            re.IGNORECASE,
        )

    def _counts(self, text: str) -> dict[str | tuple[str, ...], int]:
        counts: dict[str | tuple[str, ...], int] = {}
        counts.update(count_stems(text, self.stems, self.prefixes))
        if self.sequences:
            stems = word_stems(text)
            for sequence in self.sequences:
                n = len(sequence)
                counts[sequence] = sum(
                    1 for i in range(len(stems) - n + 1) if tuple(stems[i : i + n]) == sequence
                )
        return counts

    def score(self, key: Key, text: str, ctx: str, average: float) -> _Scored:
        norm = K1 * (1.0 - B + B * (_words(text) + _words(ctx) + 1) / average)
        body = self._counts(text)
        context = self._counts(ctx) if ctx else {}
        total = 0.0
        for i, term in enumerate(self.keys):
            tf = body.get(term, 0) + CTX_WEIGHT * context.get(term, 0)
            known = self.probes[i].knows(key)
            if known is True:
                # The index found it where we did not: at least a ``ctx`` match.
                tf = max(tf, CTX_WEIGHT)
            elif known is False:
                tf = 0.0
            if tf > 0:
                total += self.idf[i] * tf * (K1 + 1.0) / (tf + norm)
        for phrase in self.phrases:
            tf = max(1.0, float(body.get(phrase, 0)))
            total += self.phrase_idf * tf * (K1 + 1.0) / (tf + norm)
        return _Scored(score=total, key=key, text=text, ctx=ctx)

    def boost(self, row: _Scored) -> float:
        """The rerank's factor: coverage of the query's words, and pairs of them close together.

        ``(1 + share of distinct query words held) * (1 + 0.3 * pairs)``, the
        share weighted by each word's IDF (an irregular form counts as the
        word it came from), where a
        pair is two words next to each other in the query found in that order
        at most three words apart (BM25 ignores both). Words are compared by a
        crude suffix stripper (:func:`crude_stem`), stricter than Porter's
        ("peaceful" is not "peace"): the factor rewards the query's own words.
        """
        if len(self.crude) < 2:
            return 1.0
        joined = f"{row.text} {row.ctx}"
        where: dict[str, list[int]] = {}
        for match in self.crude_pattern.finditer(joined):
            word = crude_stem(match.group().lower())
            word = self.alias.get(word, word)
            if word in self.crude_set:
                where.setdefault(word, []).append(match.start())
        coverage = sum(self.crude_idf[w] for w in where) / sum(
            self.crude_idf[w] for w in self.crude
        )
        near = 0
        for first, second in itertools.pairwise(self.crude):
            if any(
                0 < _gap(joined, a, b) <= 3
                for a in where.get(first, ())
                for b in where.get(second, ())
                if 0 < b - a < 200
            ):
                near += 1
        return (1.0 + coverage) * (1.0 + 0.3 * near)


_SUFFIXES = ("ings", "ing", "edly", "ed", "ies", "es", "s", "ly", "ment", "ness", "er")


@functools.lru_cache(maxsize=65_536)
def crude_stem(word: str) -> str:
    """A crude suffix stripper ("paints" and "painting" are "paint"): the rerank's word identity."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _gap(text: str, a: int, b: int) -> int:
    """How many words from the one starting at ``a`` to the one starting at ``b``."""
    return len(_TOKEN.findall(text, a, b))


def _with_neighbours(index: TextIndex, head: list[_Scored], values: list[float]) -> list[float]:
    """Each value moved :data:`NEIGHBOUR_WEIGHT` of the way up to its best neighbour's.

    An answer often shares few words with the question about it while the
    turn before or after it shares many (the question it answers, the reply
    that names what it was about); ``ctx`` lets a reply borrow its question's
    words, this lets a weak row borrow its neighbour's score. A row never
    passes the neighbour it borrows from and the best row never moves, so an
    exact match stays above the messages around it (adding a share of the
    neighbour's score instead cost 1.6 points of anchor recall@5 on the Claude
    Code sessions, where a command and its output share most words). Only
    rows among the reranked ones count (no extra reads but one ``position``
    per row, a key lookup); summaries have no neighbours.
    """
    best: dict[int, float] = {}
    where: list[int | None] = []
    for row, value in zip(head, values, strict=True):
        seq = index.position(row.key) if row.key[0] == 0 else None
        where.append(seq)
        if seq is not None:
            best[seq] = max(best.get(seq, 0.0), value)
    out = []
    for value, seq in zip(values, where, strict=True):
        if seq is not None:
            near = max(best.get(seq - 1, 0.0), best.get(seq + 1, 0.0))
            value += NEIGHBOUR_WEIGHT * max(0.0, near - value)
        out.append(value)
    return out


def rank(parsed: _search.ParsedQuery, index: TextIndex, *, want: int) -> Ranking:
    """The best ``want`` (or more) results of ``parsed`` in one conversation, best first.

    Called by a store's ``search`` in text mode, inside its read transaction;
    ``want`` is the page's offset + limit + 1. The steps are in the module docstring.
    """
    size = index.size()
    terms = list(parsed.terms)
    cap = probe_cap(len(terms) + bool(parsed.phrases), size)
    # Rows must hold every phrase, and each probe asks for them; the phrases'
    # own probe gives the rows that hold no query term at all.
    asked: list[str | None] = [*terms, *([None] if parsed.phrases else [])]
    found = index.probe_many(asked, cap)
    probes = [_read_probe(index, keys, cap, size) for keys in found[: len(terms)]]
    phrases = _read_probe(index, found[-1], cap, size) if parsed.phrases else None
    documents = max([float(size), *(p.df + 1.0 for p in probes)]) + 1.0
    coarse: dict[Key, float] = {}
    weighted = [(_idf(documents, p.df), p) for p in probes]
    if phrases is not None:
        documents = max(documents, phrases.df + 2.0)
        weighted.append((_idf(documents, phrases.df), phrases))
    for weight, probe in weighted:
        for key in probe.found:
            coarse[key] = coarse.get(key, 0.0) + weight
    if not coarse:
        return Ranking(results=[], total=0)
    order = sorted(coarse, key=lambda k: (-coarse[k], -k[1], k[0], k[2]))
    owners = {(k[0], k[1]) for k in order}
    scorer = _Scorer(parsed, probes, documents, phrases.df if phrases is not None else 1.0)
    budget = max(SCORED_ROWS, 2 * want)
    while True:
        chosen = order[:budget]
        texts = index.texts(chosen)
        rows = [(key, *texts[key]) for key in chosen if key in texts]
        average = sum(_words(t) + _words(c) + 1 for _, t, c in rows) / max(1, len(rows))
        scored = sorted(
            (scorer.score(key, text, ctx, average) for key, text, ctx in rows),
            key=lambda r: (-r.score, -r.key[1], r.key[0], r.key[2]),
        )
        # The rerank reorders the best RERANK_WINDOW; the rest keep their BM25 order.
        head = scored[: _search.RERANK_WINDOW]
        values = _with_neighbours(index, head, [row.score * scorer.boost(row) for row in head])
        boosted = sorted(
            ((v, n) for n, v in enumerate(values)),
            key=lambda pair: (-pair[0], pair[1]),
        )
        final = [head[n] for _, n in boosted] + scored[len(head) :]
        results: list[Ranked] = []
        seen: set[tuple[int, int]] = set()
        for row in final:
            owner = (row.key[0], row.key[1])
            if owner not in seen:
                seen.add(owner)
                results.append(Ranked(key=row.key, score=row.score, text=row.text, ctx=row.ctx))
        if len(results) >= want or budget >= len(order):
            return Ranking(results=results, total=len(owners))
        budget *= 2


def query_snippet(parsed: _search.ParsedQuery, text: str) -> str | None:
    """``text`` around its first query word, every query word in it highlighted.

    Words are matched by their Porter stem, as the SQLite index matches them.
    None when ``text`` holds no query word (the row matched through ``ctx``,
    or PostgreSQL's stemmer matched a form Porter's does not): the store then
    asks its own engine to highlight the row, whose text is one bounded segment.
    """
    words = [*parsed.terms, *(w for phrase in parsed.phrases for w in phrase)]
    prefixes = frozenset(parsed.prefixes)
    stems = frozenset(s for w in words if w not in prefixes for s in word_stems(w))
    spans = [(start, end) for start, end, _stem in match_words(text, stems, prefixes)]
    if not spans:
        return None
    return _search.snippet_around(text, spans[0][0], spans[0][1], also=spans[1:])
