"""Long texts in bounded index segments: the cut rule, SQLite rowids, Porter counting, 10 MB rows.

The behaviour runs on every store (the contract factories); the rule itself
(``contextengine.store.segments``) and the Porter stemmer that counts what the
index matched (``contextengine.store.stemming``) are checked directly.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextengine.store import Store, ranking
from contextengine.store.segments import (
    SEGMENT_CHARS,
    SEGMENT_OVERLAP,
    segment_rowid,
    segment_text,
    split_rowid,
)
from contextengine.store.stemming import WORD, porter
from store_factories import STORE_FACTORIES, FakeClock, StoreFactory

TEN_MB = 10_000_000


@pytest.fixture(params=STORE_FACTORIES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    factory: StoreFactory = request.param
    opened = factory(tmp_path, FakeClock())
    yield opened
    opened.close()


# ------------------------------------------------------------------------------ the cut rule

_TEXTS = st.text(alphabet=st.sampled_from("ab c\n\té-"), max_size=3 * SEGMENT_CHARS)


@settings(max_examples=200, deadline=None)
@given(_TEXTS)
def test_segments_cover_the_text_in_order_each_bounded(text: str) -> None:
    segments = segment_text(text)
    assert all(len(s) <= SEGMENT_CHARS for s in segments)
    # Each segment is a slice of the text; together they cover all of it, in order,
    # each starting at most SEGMENT_OVERLAP characters before the previous one ends.
    position = 0
    end = 0
    for segment in segments:
        start = text.find(segment, max(0, end - SEGMENT_OVERLAP))
        assert start >= 0 and start <= end and start >= position
        position, end = start, start + len(segment)
    assert end == len(text)


def test_a_short_text_is_one_segment_and_a_long_one_is_cut_at_spaces() -> None:
    assert segment_text("hello world") == ["hello world"]
    words = " ".join(f"word{i}" for i in range(5_000))
    segments = segment_text(words)
    assert len(segments) > 1
    assert all(not s.startswith(("ord", "rd")) for s in segments[1:])  # cuts fall on spaces


def test_a_text_without_spaces_is_cut_at_the_segment_size() -> None:
    segments = segment_text("x" * (2 * SEGMENT_CHARS + 5))
    assert [len(s) for s in segments] == [SEGMENT_CHARS, SEGMENT_CHARS, 5]


@pytest.mark.parametrize(
    ("owner", "k"),
    [
        pytest.param(1, 1, id="first-message"),
        pytest.param(123_456_789, 2_499, id="late-segment"),
        pytest.param(-42, 7, id="summary"),
        pytest.param(5, 0, id="segment-zero-is-the-owner"),
    ],
)
def test_segment_rowids_round_trip(owner: int, k: int) -> None:
    rowid = segment_rowid(owner, k)
    assert split_rowid(rowid) == (owner, k)
    assert (rowid > 0) == (owner > 0)


# ------------------------------------------------------------------------------ Porter


def _fts5_stems(words: list[str]) -> list[str]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    db.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", list(enumerate(words)))
    stems = dict(db.execute("SELECT doc, term FROM v").fetchall())
    return [stems[i] for i in range(len(words))]


_ROOTS = "relat condit hop agre generous nation sensit form digit electr adopt depend hy tr"
_SUFFIXES = (
    " s es ed ing ion ional ation ative alize ality ness ful ous ly ement ment ent er ism ate"
    " iti ive ize ible able ance ence al ic ical icate iveness fulness ousness aliti iviti"
    " biliti logi bli alli entli eli ousli ization ator alism izer enci anci y ies sses eed ll"
)


def test_porter_stems_exactly_as_the_sqlite_index() -> None:
    project = Path(__file__).resolve().parents[1]
    texts = [*project.glob("docs/*.md"), *(project / "tests" / "fixtures").rglob("*.json*")]
    words = {
        w
        for path in texts
        for w in WORD.findall(path.read_text(encoding="utf-8").lower())
        if w.isascii() and w.isalpha()
    }
    # Every suffix rule, on roots that meet and miss its measure condition.
    words |= {root + suffix for root in _ROOTS.split() for suffix in _SUFFIXES.split(" ")}
    ordered = sorted(words)
    assert len(ordered) > 2_000
    assert [porter(w) for w in ordered] == _fts5_stems(ordered)


# ------------------------------------------------------------------------------ 10 MB rows


@pytest.fixture
def ten_mb(store: Store) -> str:
    cid = store.open_conversation("big-output")
    line = "INFO worker flushed the cache for tenant {} and the queue drained\n"
    big = "".join(line.format(i) for i in range(TEN_MB // len(line)))
    big += "ERROR disk full while writing app49.log quokkatail\n"
    history: list[dict[str, Any]] = [{"role": "user", "content": "run the nightly job"}]
    history.append({"role": "tool", "tool_call_id": "call_1", "content": big})
    history.append({"role": "assistant", "content": "The job failed: the cache was flushed."})
    store.import_messages(cid, history, token_counts=[1, 1, 1], start_seq=0)
    return cid


def test_a_10mb_row_is_searched_in_bounded_windows(
    store: Store, ten_mb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []
    score = ranking._Scorer.score

    def counting(self: Any, key: Any, text: str, ctx: str, average: float) -> float:
        read.append(len(text))
        return score(self, key, text, ctx, average)

    monkeypatch.setattr(ranking._Scorer, "score", counting)
    frequent = store.search(ten_mb, "cache flushed").results
    # The tool output matches in thousands of segments: it is returned once.
    assert [h.seq for h in frequent].count(1) == 1 and {h.seq for h in frequent} == {1, 2}
    assert "«cache»" in frequent[0].snippet and len(frequent[0].snippet) < 400
    assert read and max(read) <= SEGMENT_CHARS + SEGMENT_OVERLAP
    (end,) = store.search(ten_mb, "quokkatail").results
    assert end.seq == 1 and "«quokkatail»" in end.snippet
    assert [h.seq for h in store.search(ten_mb, "app49.log").results] == [1]


def test_regex_finds_a_word_near_the_end_of_a_10mb_row(store: Store, ten_mb: str) -> None:
    cursor = None
    found: list[Any] = []
    for _ in range(50):  # a budget per call: the scan goes on through the cursor
        page = store.search(ten_mb, r"quokka\w+", mode="regex", cursor=cursor)
        found += page.results
        cursor = page.next_cursor
        if found or cursor is None:
            break
    assert [h.seq for h in found] == [1]
    assert "«quokkatail»" in found[0].snippet


def _words(n: int) -> list[str]:
    return [f"w{i:04d}" for i in range(n)]  # all 5 characters: cuts do not move when one changes


def test_anchors_match_the_ends_of_the_text_not_of_a_segment(store: Store) -> None:
    cid = store.open_conversation("anchors")
    text = " ".join(_words(2 * SEGMENT_CHARS // 6))
    first, second = segment_text(text)[:2]
    store.append_messages(cid, [{"role": "tool", "tool_call_id": "c", "content": text}])
    last_of_first, first_of_second = first.split()[-1], second.split()[0]
    assert first_of_second != "w0000"
    assert store.search(cid, rf"{last_of_first}$", mode="regex").results == []
    assert store.search(cid, rf"^{first_of_second}", mode="regex").results == []
    assert [h.seq for h in store.search(cid, r"^w0000", mode="regex").results] == [0]
    assert [h.seq for h in store.search(cid, rf"{text[-5:]}$", mode="regex").results] == [0]


def test_a_phrase_across_a_cut_is_found_whole(store: Store) -> None:
    cid = store.open_conversation("phrase")
    words = _words(2 * SEGMENT_CHARS // 6)
    cut = len(segment_text(" ".join(words))[0].split())
    words[cut - 1 : cut + 1] = ["amber", "otter"]  # the last word of a segment and the next
    text = " ".join(words)
    assert segment_text(text)[0].endswith(" amber")
    store.append_messages(cid, [{"role": "user", "content": text}])
    assert [h.seq for h in store.search(cid, '"amber otter"').results] == [0]
    assert [h.seq for h in store.search(cid, "amber\\s+otter", mode="regex").results] == [0]
