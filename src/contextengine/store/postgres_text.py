"""The words of the PostgreSQL index, computed in Python: ``tsv`` values and query tsqueries.

Since migration 3 the PostgreSQL store does not ask the server to parse and
stem text (``to_tsvector``): it writes each row's ``tsv`` itself, as a
``tsvector`` literal of Porter stems (:mod:`contextengine.store.stemming`),
and builds every query's ``tsquery`` the same way. Two reasons:

* **the same words match in both stores.** The SQLite index stems with
  Porter's algorithm; PostgreSQL's ``english`` configuration with Snowball's,
  which differs on many words (``generously``: ``gener`` against
  ``generous``). Now a query finds the same rows in both.
* **ingest speed.** ``to_tsvector`` with the punctuation ``translate()`` of
  migration 1 was most of the server's cost per row: with it a bulk import
  ran at 3,800 rows/s, with client-side ``tsv`` at 18,000 (same machine).

Words are what SQLite's ``unicode61`` tokenizer finds (runs of letters and
digits; an underscore or any punctuation separates; lower case; diacritics
removed), each stemmed by :func:`~contextengine.store.stemming.porter`. A
message's ``tsv`` holds its text's words with weight A at positions 1, 2...
and then the previous message's start (``ctx``) with weight D, as migration
1's ``setweight(..., 'A') || setweight(..., 'D')`` did. PostgreSQL limits:
positions above 16,383 are clamped and words over 2,046 bytes are left out
(``to_tsvector`` drops them too); a segment is far smaller than either.

Lexemes hold only letters and digits, so the literals need no escaping and
no user text can change a query's syntax: quotes, operators and
backslashes are not word characters, they never reach a literal.
"""

from __future__ import annotations

import unicodedata

from contextengine.store.stemming import WORD, porter

__all__ = ["lexemes", "tsquery_phrase", "tsquery_term", "tsvector"]

_MAX_POSITION = 16_383
_MAX_LEXEME_BYTES = 2_046


_MAX_CACHED = 200_000
_cache: dict[str, str] = {}
#: Position literals, formatted once: ``"7A"`` (weight A) and ``"7"`` (weight D, the default).
_AT_A = [f"{i}A" for i in range(_MAX_POSITION + 1)]
_AT_D = [str(i) for i in range(_MAX_POSITION + 1)]


def _lexeme(word: str) -> str:
    """The index word of one lower-case token: no diacritics, Porter-stemmed ('' if too long)."""
    found = _cache.get(word)
    if found is not None:
        return found
    folded = word
    if not word.isascii():
        # Letters and digits only, whatever the decomposition gives: a lexeme
        # never holds a quote or a backslash, the two characters a literal escapes.
        folded = "".join(c for c in unicodedata.normalize("NFKD", word) if c.isalnum())
        folded = folded or "".join(c for c in word if c.isalnum())
    lexeme = "" if len(folded.encode()) > _MAX_LEXEME_BYTES else porter(folded)
    if len(_cache) >= _MAX_CACHED:
        _cache.clear()
    _cache[word] = lexeme
    return lexeme


def lexemes(text: str) -> list[str]:
    """The index words of ``text`` in order (empty strings for words too long to index)."""
    return [_lexeme(w) for w in WORD.findall(text.lower())]


def tsvector(text: str, ctx: str = "") -> str:
    """The ``tsvector`` literal of a row: ``text`` at weight A, then ``ctx`` at weight D.

    Called for every row written (in the bulk path's producer thread), so it
    is written for speed: cached stems, preformatted positions.
    """
    positions: dict[str, list[str]] = {}
    position = 0
    for table, part in ((_AT_A, text), (_AT_D, ctx)):
        if not part:
            continue
        for word in WORD.findall(part.lower()):
            position += 1
            lexeme = _cache.get(word)
            if lexeme is None:
                lexeme = _lexeme(word)
            if not lexeme:
                continue
            found = positions.get(lexeme)
            at = table[position if position < _MAX_POSITION else _MAX_POSITION]
            if found is None:
                positions[lexeme] = [at]
            elif len(found) < 256:  # PostgreSQL keeps at most 256 positions per lexeme
                found.append(at)
    return " ".join(["'" + lexeme + "':" + ",".join(at) for lexeme, at in positions.items()])


def tsquery_term(term: str, *, prefix: bool = False) -> str:
    """The tsquery of one query word: its lexeme (a phrase when it holds several, ``user_id``).

    Empty when the word has no indexable word in it. ``prefix`` matches every
    lexeme that starts with the word's own lexeme, as FTS5's ``word*`` does
    (it stems the prefix too: "deploy*" is every lexeme starting "deploi").
    """
    if prefix:
        words = [w for w in WORD.findall(term.lower()) if w]
        if not words or not _lexeme(words[-1]):
            return ""
        return " <-> ".join([*(f"'{_lexeme(w)}'" for w in words[:-1]), f"'{_lexeme(words[-1])}':*"])
    return tsquery_phrase([term])


def tsquery_phrase(words: list[str], *, weight: str = "") -> str:
    """The tsquery matching ``words`` next to each other, in order (restricted to ``weight``)."""
    found = [lexeme for word in words for lexeme in lexemes(word) if lexeme]
    suffix = f":{weight}" if weight else ""
    return " <-> ".join(f"'{lexeme}'{suffix}" for lexeme in found)
