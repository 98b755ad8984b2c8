"""The Porter stemmer, as the SQLite index applies it, for counting and highlighting in Python.

The SQLite full-text index tokenizes with ``porter unicode61``: words are runs
of letters and digits (an underscore separates), lower-cased, then reduced by
M. F. Porter's 1980 algorithm ("An algorithm for suffix stripping"), which
FTS5 applies to words of 3 to 64 characters. :func:`porter` implements the
same algorithm (the common revision: ``bli`` -> ``ble``, ``logi`` -> ``log``),
and :func:`match_words` finds the words of a text that stem to given stems, so
:mod:`contextengine.store.ranking` can count and highlight what the index
matched without asking the index (whose own ranking and snippet functions
cost too much at scale). PostgreSQL's ``ce_english`` configuration uses the
Snowball English stemmer, a close relative: the counts are the same for
nearly every word, and a probe's answer overrides them anyway.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

__all__ = ["WORD", "count_stems", "match_words", "porter", "word_stems"]

#: A word as the index's tokenizer sees one: letters and digits, no underscore.
WORD = re.compile(r"[^\W_]+")
_ASCII_WORD = re.compile(r"^[a-z]+$")

_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
    ("logi", "log"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _consonant(word: str, i: int) -> bool:
    char = word[i]
    if char in "aeiou":
        return False
    if char == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    m = 0
    previous_vowel = False
    for i in range(len(stem)):
        vowel = not _consonant(stem, i)
        if previous_vowel and not vowel:
            m += 1
        previous_vowel = vowel
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y (Porter's *o)."""
    n = len(word)
    return (
        n >= 3
        and _consonant(word, n - 3)
        and not _consonant(word, n - 2)
        and _consonant(word, n - 1)
        and word[-1] not in "wxy"
    )


def _replace(word: str, rules: tuple[tuple[str, str], ...], minimum: int) -> str:
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if _measure(stem) > minimum else word
    return word


def _step1(word: str) -> str:
    if word.endswith("sses") or word.endswith("ies"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    stripped = False
    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
    elif word.endswith("ed") and _has_vowel(word[:-2]):
        word, stripped = word[:-2], True
    elif word.endswith("ing") and _has_vowel(word[:-3]):
        word, stripped = word[:-3], True
    if stripped:
        if word.endswith(("at", "bl", "iz")):
            word += "e"
        elif _double_consonant(word) and word[-1] not in "lsz":
            word = word[:-1]
        elif _measure(word) == 1 and _cvc(word):
            word += "e"
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    return word


def _step4(word: str) -> str:
    for suffix in _STEP4:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if suffix == "ion" and not stem.endswith(("s", "t")):
                return word
            return stem if _measure(stem) > 1 else word
    return word


@functools.lru_cache(maxsize=65_536)
def porter(word: str) -> str:
    """The stem the SQLite index stores for the lower-case word ``word``."""
    if not 3 <= len(word) <= 64 or not _ASCII_WORD.match(word):
        return word
    word = _step1(word)
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    word = _step4(word)
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word[:-1]) > 1:
        word = word[:-1]
    return word


def word_stems(text: str) -> list[str]:
    """The stems of the words of ``text``, in order (a query word may hold several: ``user_id``)."""
    return [porter(w) for w in WORD.findall(text.lower())]


@functools.lru_cache(maxsize=1_024)
def _prefilter(stems: frozenset[str], fold: bool) -> re.Pattern[str]:
    # A word stemming to s starts with s minus its last letter (Porter only
    # rewrites a word's end: y -> i, an e added or dropped).
    heads = sorted({s[:-1] if len(s) > 3 else s for s in stems}, key=len, reverse=True)
    alternatives = "|".join(re.escape(h) for h in heads)
    return re.compile(r"(?<![^\W_])(?:" + alternatives + r")[^\W_]*", re.IGNORECASE if fold else 0)


def match_words(
    text: str, stems: frozenset[str], prefixes: frozenset[str] = frozenset()
) -> Iterator[tuple[int, int, str]]:
    """``(start, end, stem)`` of every word of ``text`` whose stem is in ``stems``.

    A word also matches when its stem starts with one of ``prefixes`` (a
    query's ``word*``); the stem yielded is then the prefix. Scans ``text``
    once with a regular expression and stems only the words it preselects.
    """
    heads = _prefix_stems(prefixes)
    wanted = stems | prefixes | frozenset(heads)
    if not wanted:
        return
    for match in _prefilter(frozenset(wanted), True).finditer(text):
        stem = porter(match.group().lower())
        if stem in stems:
            yield match.start(), match.end(), stem
        else:
            for head, prefix in heads.items():
                if stem.startswith(head):
                    yield match.start(), match.end(), prefix
                    break


def count_stems(
    text: str, stems: frozenset[str], prefixes: frozenset[str] = frozenset()
) -> dict[str, int]:
    """How many words of ``text`` stem to each of ``stems`` (or start with a prefix).

    :func:`match_words` without the offsets, for counting many texts: the text
    is lower-cased once and scanned case-sensitively, which is several times
    faster than a case-insensitive scan.
    """
    counts: dict[str, int] = {}
    heads = _prefix_stems(prefixes)
    wanted = stems | prefixes | frozenset(heads)
    if not wanted:
        return counts
    for word in _prefilter(frozenset(wanted), False).findall(text.lower()):
        stem = porter(word)
        if stem in stems:
            counts[stem] = counts.get(stem, 0) + 1
            continue
        for head, prefix in heads.items():
            if stem.startswith(head):
                counts[prefix] = counts.get(prefix, 0) + 1
                break
    return counts


def _prefix_stems(prefixes: frozenset[str]) -> dict[str, str]:
    """Each prefix's stem -> the prefix: what a word's stem must start with to match ``word*``.

    SQLite's FTS5 stems the prefix of a ``word*`` query too ("deploy*" looks
    for stems starting with "deploi", which "deployed" has and "deploy" with an
    unstemmed prefix would miss), and so do PostgreSQL's tsquery
    (:func:`~contextengine.store.postgres_text.tsquery_term`) and the snippets,
    so every store finds, and marks, the same words.
    """
    return {porter(p): p for p in sorted(prefixes)}
