"""lcm_grep's engine: safe full-text queries, ranking, regex, cursors, bounds and isolation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextengine.errors import StoreError
from contextengine.store import ContextRef, NewSummary, Store
from contextengine.store.search import (
    MAX_LIMIT,
    MAX_PHRASE_WORDS,
    MAX_QUERY_PHRASES,
    MAX_QUERY_TERMS,
    fts5_match,
    parse_query,
)
from store_factories import STORE_FACTORIES, FakeClock, StoreFactory

TEXTS = [
    "The deploy script lives in tools/deploy.sh and needs the staging key.",
    "Lunch was great, we talked about the migration plan.",
    "Database migration failed: column user_id does not exist.",
    "The database migration finally succeeded after adding the user_id column.",
    "Emoji test 🎉 party time",
    "Remember: the wifi password is hunter2.",
]


@pytest.fixture(params=STORE_FACTORIES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    factory: StoreFactory = request.param
    opened = factory(tmp_path, FakeClock())
    yield opened
    opened.close()


@pytest.fixture
def conv(store: Store) -> str:
    cid = store.open_conversation("main")
    store.append_messages(cid, [{"role": "user", "content": t} for t in TEXTS], start_seq=0)
    return cid


@pytest.mark.parametrize(
    "query",
    [
        pytest.param('"', id="lone-quote"),
        pytest.param("AND OR NOT", id="operators"),
        pytest.param("*", id="star"),
        pytest.param("NEAR(", id="near"),
        pytest.param("col: migration", id="column-filter"),
        pytest.param("^migration", id="caret"),
        pytest.param('"database migration', id="unbalanced-quote"),
        pytest.param("🎉", id="emoji"),
        pytest.param("conv : c000", id="conversation-column"),
        pytest.param("migration) OR (wifi", id="parentheses"),
        pytest.param("", id="empty"),
    ],
)
def test_no_query_text_breaks_the_search(store: Store, conv: str, query: str) -> None:
    page = store.search(conv, query)
    assert isinstance(page.results, list)


def test_operator_words_are_searched_as_words(store: Store, conv: str) -> None:
    hits = store.search(conv, "NOT exist").results
    assert hits and hits[0].seq == 2


def test_bm25_ranks_the_row_with_more_query_words_first(store: Store, conv: str) -> None:
    seqs = [h.seq for h in store.search(conv, "database migration user_id column").results]
    assert set(seqs[:2]) == {2, 3}
    assert 1 in seqs  # OR semantics: one shared word is enough to be found


def test_porter_stemming_matches_word_forms(store: Store, conv: str) -> None:
    hits = store.search(conv, "succeeding").results
    assert hits[0].seq == 3 and "«succeeded»" in hits[0].snippet


def test_quoted_phrase_is_required_as_a_phrase(store: Store, conv: str) -> None:
    seqs = [h.seq for h in store.search(conv, '"migration failed"').results]
    assert seqs == [2]
    seqs = [h.seq for h in store.search(conv, '"migration plan" database').results]
    assert seqs == [1]


def test_results_carry_id_role_snippet_and_summary_id(store: Store, conv: str) -> None:
    (hit,) = store.search(conv, "hunter2").results
    assert hit.kind == "message" and hit.role == "user" and hit.seq == 5
    assert "«hunter2»" in hit.snippet
    assert hit.summary_id is None
    assert store.get_message(conv, hit.id) is not None


def test_summary_id_points_at_the_covering_summary_once_out_of_view(
    store: Store, conv: str
) -> None:
    msgs = store.get_messages(conv)
    store.commit_compaction(
        conv,
        [
            NewSummary(
                kind="leaf",
                depth=0,
                content="Talked about the wifi password.",
                token_count=6,
                source_ids=[m.id for m in msgs[4:]],
                seq_start=4,
                seq_end=5,
                time_start=0.0,
                time_end=0.0,
                descendant_count=2,
            )
        ],
        [
            *(ContextRef(kind="message", id=m.id) for m in msgs[:4]),
            ContextRef(kind="summary", id="new:0"),
        ],
    )
    hits = store.search(conv, "wifi password").results
    by_kind = {h.kind: h for h in hits}
    assert by_kind["message"].summary_id == by_kind["summary"].id
    assert by_kind["summary"].summary_id is None
    assert [h.kind for h in store.search(conv, "wifi", scope="summaries").results] == ["summary"]
    assert [h.kind for h in store.search(conv, "wifi", scope="messages").results] == ["message"]


@pytest.mark.parametrize(
    ("pattern", "seqs"),
    [
        pytest.param(r"user_id\b", [2, 3], id="word-boundary"),
        pytest.param(r"hunter\d", [5], id="digit"),
        pytest.param(r"(?i)DATABASE", [2, 3], id="inline-flag"),
        pytest.param(r"tools/\w+\.sh", [0], id="path"),
    ],
)
def test_regex_mode_finds_matches_in_order(
    store: Store, conv: str, pattern: str, seqs: list[int]
) -> None:
    page = store.search(conv, pattern, mode="regex")
    assert [h.seq for h in page.results] == seqs
    assert all("«" in h.snippet for h in page.results)


@pytest.mark.parametrize(
    "pattern",
    [pytest.param("(unclosed", id="paren"), pytest.param("*oops", id="nothing-to-repeat")],
)
def test_invalid_regex_is_a_clear_error(store: Store, conv: str, pattern: str) -> None:
    with pytest.raises(StoreError, match="invalid regular expression"):
        store.search(conv, pattern, mode="regex")


def test_catastrophic_regex_cannot_hang_the_search(store: Store) -> None:
    cid = store.open_conversation("evil")
    store.append_messages(
        cid, [{"role": "user", "content": "a" * 5_000 + "!"}, {"role": "user", "content": "aaa"}]
    )
    page = store.search(cid, r"(a+)+$", mode="regex")
    # The timed-out row is skipped; the short one still matches.
    assert [h.seq for h in page.results] == [1]


def _all_pages(store: Store, cid: str, query: str, **kw: Any) -> list[list[int | None]]:
    pages = []
    cursor = None
    while True:
        page = store.search(cid, query, cursor=cursor, **kw)
        pages.append([h.seq for h in page.results])
        cursor = page.next_cursor
        if cursor is None:
            return pages


@pytest.mark.parametrize(
    "mode", [pytest.param("text", id="text"), pytest.param("regex", id="regex")]
)
def test_cursor_pagination_covers_every_match_once(store: Store, mode: str) -> None:
    cid = store.open_conversation("many")
    store.append_messages(
        cid, [{"role": "user", "content": f"needle number {i}"} for i in range(23)]
    )
    pages = _all_pages(store, cid, "needle", mode=mode, limit=10)
    assert [len(p) for p in pages] == [10, 10, 3]
    assert sorted(s for p in pages for s in p if s is not None) == list(range(23))


def test_limit_is_bounded(store: Store) -> None:
    cid = store.open_conversation("many")
    store.append_messages(
        cid, [{"role": "user", "content": f"needle {i}"} for i in range(MAX_LIMIT + 5)]
    )
    assert len(store.search(cid, "needle", limit=10_000).results) == MAX_LIMIT
    assert len(store.search(cid, "needle", limit=0).results) == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"query": "needle number"}, id="other-query"),
        pytest.param({"mode": "regex"}, id="other-mode"),
        pytest.param({"scope": "messages"}, id="other-scope"),
    ],
)
def test_cursor_from_another_search_is_rejected(store: Store, change: dict[str, Any]) -> None:
    cid = store.open_conversation("many")
    store.append_messages(cid, [{"role": "user", "content": f"needle {i}"} for i in range(5)])
    cursor = store.search(cid, "needle", limit=2).next_cursor
    assert cursor
    args: dict[str, Any] = {"query": "needle", "mode": "text", "scope": "all", **change}
    with pytest.raises(StoreError, match="cursor"):
        store.search(cid, args.pop("query"), cursor=cursor, **args)


@pytest.mark.parametrize(
    "cursor", [pytest.param("garbage!", id="garbage"), pytest.param("e30", id="empty-json")]
)
def test_malformed_cursor_is_rejected(store: Store, conv: str, cursor: str) -> None:
    with pytest.raises(StoreError, match="invalid cursor"):
        store.search(conv, "migration", cursor=cursor)


def test_no_query_id_regex_or_cursor_reaches_another_conversation(store: Store) -> None:
    mine = store.open_conversation("mine")
    theirs = store.open_conversation("theirs")
    store.append_messages(
        mine, [{"role": "user", "content": f"ordinary note {i}"} for i in range(3)]
    )
    secret = store.append_messages(
        theirs, [{"role": "user", "content": f"TOPSECRET launch code {i}"} for i in range(3)]
    )
    for query in [
        "TOPSECRET",
        "launch code",
        '"launch code"',
        "ordinary OR TOPSECRET",
        "ordinary) OR (TOPSECRET",
    ]:
        for hit in store.search(mine, query).results:
            assert "TOPSECRET" not in hit.snippet
    assert store.search(mine, "TOPSECRET|ordinary", mode="regex").results
    assert all(
        "TOPSECRET" not in h.snippet
        for h in store.search(mine, ".*", mode="regex", limit=100).results
    )
    assert store.get_message(mine, secret[0].id) is None
    assert store.get_messages(mine, 0, 100)[-1].message["content"] == "ordinary note 2"
    cursor = store.search(theirs, "TOPSECRET", limit=1).next_cursor
    assert cursor
    with pytest.raises(StoreError, match="cursor"):
        store.search(mine, "TOPSECRET", cursor=cursor)


@pytest.mark.parametrize(
    ("text", "phrases", "terms"),
    [
        pytest.param("What did Caroline research?", (), ("caroline", "research"), id="stop-words"),
        pytest.param('"big red" dog', (("big", "red"),), ("dog",), id="phrase"),
        pytest.param("the who", (), ("the", "who"), id="only-stop-words-kept"),
        pytest.param('say "hi', (), ("say", "hi", "said"), id="unbalanced-quote-dropped"),
        pytest.param("When did he buy it?", (), ("buy", "bought"), id="irregular-form-added"),
        pytest.param("Who went where?", (), ("went", "go", "gone"), id="past-form-adds-present"),
        pytest.param("Is it done?", (), ("done",), id="stop-word-forms-skipped"),
    ],
)
def test_parse_query(text: str, phrases: tuple[Any, ...], terms: tuple[str, ...]) -> None:
    parsed = parse_query(text)
    assert parsed.phrases == phrases and parsed.terms == terms


def test_prefix_star_becomes_a_prefix_query(store: Store, conv: str) -> None:
    assert '"migrat" *' in fts5_match(parse_query("migrat*"))
    assert {h.seq for h in store.search(conv, "migrat*").results[:3]} == {1, 2, 3}


def test_a_message_is_also_found_by_the_words_of_the_one_before(store: Store, conv: str) -> None:
    # Seq 4 does not say "succeeded"; the message before it does, and ranks first.
    first, second = store.search(conv, "succeeded").results
    assert (first.seq, second.seq) == (3, 4)
    assert first.context is None and second.snippet == TEXTS[4]
    assert second.context is not None and "«succeeded»" in second.context


def test_locomo_recall_beats_plain_bm25(shared_data: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import recall_locomo

    data = recall_locomo.load_locomo(shared_data / "LoCoMo" / "locomo10.json")[:2]
    from contextengine.store import SQLiteStore

    hits = total = 0
    with SQLiteStore(token_counter=lambda m: 1) as store:
        for sample in data:
            cid = store.open_conversation(sample["id"])
            store.append_messages(cid, sample["messages"], start_seq=0)
            for qa in sample["qa"]:
                evidence = {sample["seq_of"].get(d) for d in qa.get("evidence", [])} - {None}
                if qa["category"] == 5 or not evidence:
                    continue
                seqs = {
                    h.seq
                    for h in store.search(cid, qa["question"], scope="messages", limit=5).results
                }
                total += 1
                hits += bool(evidence & seqs)
    assert hits / total > 0.62


@pytest.mark.parametrize("every", [pytest.param(1, id="every-row"), pytest.param(7, id="sparse")])
def test_a_common_word_probes_the_newest_rows_of_the_conversation(every: int) -> None:
    from contextengine.store import SQLiteStore
    from contextengine.store.search import parse_query
    from contextengine.store.sqlite_search import SQLiteTextIndex

    texts = [("common " if seq % every == 0 else "") + f"row{seq}" for seq in range(3_000)]
    with SQLiteStore(":memory:", token_counter=lambda m: 1) as store:
        mine, other = store.open_conversation("mine"), store.open_conversation("other")
        for lo in range(0, len(texts), 100):  # two conversations' rowids interleave
            batch = [{"role": "user", "content": t} for t in texts[lo : lo + 100]]
            store.import_messages(mine, batch, start_seq=lo)
            store.import_messages(other, [{"role": "user", "content": f"common {lo}"}])
        # A row holds the word, or the message before it does (its ``ctx``).
        holding = [
            seq
            for seq, text in enumerate(texts)
            if "common" in text or (seq and "common" in texts[seq - 1])
        ]
        with store._snapshot() as db:
            token = store._search_token(mine)
            index = SQLiteTextIndex(db, mine, token, parse_query("common"), "all")
            seqs = [index.position(k) for k in index.probe("common", 50)]
        assert seqs == holding[-50:][::-1]


def test_a_huge_query_keeps_a_bounded_number_of_terms_and_phrases() -> None:
    # Found by benchmarks/reliability/isolation.py: a pasted 100 kB query of
    # distinct words took seconds on SQLite and minutes on PostgreSQL (one probe
    # per term, and a quadratic de-duplication).
    words = [f"w{i}" for i in range(20_000)]
    parsed = parse_query(" ".join(words) + " " + " ".join(f'"{w} {w}"' for w in words))
    assert parsed.terms == tuple(words[:MAX_QUERY_TERMS])
    assert len(parsed.phrases) == MAX_QUERY_PHRASES
    long_phrase = parse_query('"' + " ".join(words) + '"').phrases[0]
    assert long_phrase == tuple(words[:MAX_PHRASE_WORDS])
    assert parse_query("deploy* w1*").prefixes == {"deploy", "w1"}


def test_a_huge_query_still_finds_its_first_words(store: Store, conv: str) -> None:
    hits = store.search(conv, "hunter2 " + " ".join(f"w{i}" for i in range(20_000))).results
    assert [h.seq for h in hits] == [5]


def test_a_question_in_the_present_finds_the_answer_in_the_past(store: Store) -> None:
    cid = store.open_conversation("forms")
    said = [
        "Did you see the old harbour market this weekend?",
        "We should buy a new kettle some day.",
        "I bought the blue kettle at the harbour market.",
    ]
    store.append_messages(cid, [{"role": "user", "content": t} for t in said], start_seq=0)
    hits = store.search(cid, "where did they buy the kettle").results
    assert hits[0].seq == 2 and "«bought»" in hits[0].snippet


def test_a_message_beside_the_rest_of_the_answer_ranks_above_the_same_words_alone(
    store: Store,
) -> None:
    cid = store.open_conversation("neighbours")
    said = [
        "Morning, how was the weekend?",
        "Ordered a new kettle today.",  # 1: its reply names the harbour
        "It arrived at the harbour office already.",
        "Lunch was pasta with friends.",
        "Ordered a new kettle today.",  # 4: the same words, newer, nothing beside them
        "Nice, enjoy the tea.",
    ]
    store.append_messages(cid, [{"role": "user", "content": t} for t in said], start_seq=0)
    seqs = [h.seq for h in store.search(cid, "kettle harbour").results]
    assert seqs[0] == 2
    assert seqs.index(1) < seqs.index(4)
