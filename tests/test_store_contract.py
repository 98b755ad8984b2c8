"""The Store contract: every store (SQLite in memory and on disk, PostgreSQL) behaves alike."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextengine.errors import InvalidMessagesError, StoreConflictError, StoreError
from contextengine.store import (
    ContextRef,
    ContextSplice,
    LineageStore,
    NewSummary,
    SQLiteStore,
    Store,
    default_store_path,
    open_store,
)
from contextengine.store.migrations import load_migrations
from store_factories import STORE_FACTORIES, FakeClock, StoreFactory


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORE_FACTORIES)
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Store]:
    factory: StoreFactory = request.param
    opened = factory(tmp_path, clock)
    yield opened
    opened.close()


def history(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"question {i}"})
        msgs.append({"role": "assistant", "content": f"answer {i}"})
    return msgs


def tool_turn() -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "README.md setup.py"},
    ]


def test_store_satisfies_protocol(store: Store) -> None:
    assert isinstance(store, Store)


def test_open_conversation_is_stable_per_session_key(store: Store) -> None:
    a = store.open_conversation("session-a")
    assert store.open_conversation("session-a") == a
    assert store.open_conversation("session-b") != a


def test_messages_round_trip_verbatim_in_seq_order(store: Store) -> None:
    cid = store.open_conversation("s")
    msgs = history(2) + tool_turn()
    stored = store.append_messages(cid, msgs, start_seq=0)
    assert [m.seq for m in stored] == list(range(len(msgs)))
    got = store.get_messages(cid)
    assert [m.message for m in got] == msgs
    assert [m.role for m in got] == [m["role"] for m in msgs]
    assert store.message_count(cid) == len(msgs)
    assert store.get_message(cid, stored[3].id) == got[3]
    assert [m.seq for m in store.get_messages(cid, 2, 4)] == [2, 3]
    # Any integer bounds (found by benchmarks/reliability/isolation.py: SQLite
    # raised OverflowError past 64 bits).
    every = list(range(len(msgs)))
    assert [m.seq for m in store.get_messages(cid, -(2**70), 2**70)] == every
    assert [m.seq for m in store.get_messages(cid, 2**63)] == []
    assert [m.seq for m in store.get_messages(cid, 0, -5)] == []


@pytest.mark.parametrize(
    "second_call",
    [
        pytest.param({"start_seq": 0}, id="same-prefix-with-start-seq"),
        pytest.param({}, id="same-prefix-aligned-by-content"),
    ],
)
def test_storing_the_same_prefix_again_adds_nothing(
    store: Store, second_call: dict[str, Any]
) -> None:
    cid = store.open_conversation("s")
    msgs = history(3)
    store.append_messages(cid, msgs, start_seq=0)
    assert store.append_messages(cid, msgs, **second_call) == []
    assert store.append_messages(cid, msgs[:4], **second_call) == []
    assert store.message_count(cid) == len(msgs)


def test_grown_history_stores_only_the_new_tail(store: Store) -> None:
    cid = store.open_conversation("s")
    msgs = history(2)
    store.append_messages(cid, msgs)
    longer = [*msgs, {"role": "user", "content": "question 0"}]  # same text as an older message
    new = store.append_messages(cid, longer)
    assert [(m.seq, m.message) for m in new] == [(len(msgs), longer[-1])]


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(
            lambda m: [*m[-2:], {"role": "user", "content": "next"}], id="overlapping-tail"
        ),
        pytest.param(lambda m: [{"role": "user", "content": "next"}], id="only-new"),
    ],
)
def test_batches_without_start_seq_append_only_what_is_new(store: Store, batch: Any) -> None:
    cid = store.open_conversation("s")
    msgs = history(2)
    store.append_messages(cid, msgs)
    new = store.append_messages(cid, batch(msgs))
    assert [m.message["content"] for m in new] == ["next"]
    assert [m.seq for m in store.get_messages(cid)] == list(range(len(msgs) + 1))


def test_provider_message_ids_deduplicate_whatever_the_position(store: Store) -> None:
    cid = store.open_conversation("s")
    with_id = {"role": "assistant", "content": "hi", "id": "msg_provider_1"}
    assert len(store.append_messages(cid, [with_id])) == 1
    assert store.append_messages(cid, [with_id], start_seq=40) == []
    assert store.get_messages(cid)[0].identity_key == "id:msg_provider_1"


def test_recycled_tool_call_ids_never_drop_a_different_message(store: Store) -> None:
    # Real providers reuse tool-call ids for different calls (tau-bench's gpt-4o
    # runs do): each call and result is a message of its own and must be kept.
    cid = store.open_conversation("s")
    first = tool_turn()
    second = tool_turn()
    second[1] = {**second[1], "content": "LICENSE pyproject.toml"}
    assert len(store.append_messages(cid, first, start_seq=0)) == 2
    assert len(store.append_messages(cid, second, start_seq=2)) == 2
    assert [m.message["content"] for m in store.get_messages(cid) if m.role == "tool"] == [
        "README.md setup.py",
        "LICENSE pyproject.toml",
    ]
    # Storing the same prefix again still adds nothing.
    assert store.append_messages(cid, [*first, *second], start_seq=0) == []


def test_identical_messages_at_different_positions_are_both_kept(store: Store) -> None:
    cid = store.open_conversation("s")
    msgs = [{"role": "user", "content": "continue"}] * 3
    assert len(store.append_messages(cid, msgs, start_seq=0)) == 3


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(["not a dict"], id="not-a-dict"),
        pytest.param([{"role": "user", "content": {1, 2}}], id="not-json"),
    ],
)
def test_invalid_messages_are_refused(store: Store, bad: list[Any]) -> None:
    cid = store.open_conversation("s")
    with pytest.raises(InvalidMessagesError):
        store.append_messages(cid, bad)
    assert store.message_count(cid) == 0


def test_unknown_conversation_is_a_store_error(store: Store) -> None:
    with pytest.raises(StoreError, match="unknown conversation"):
        store.append_messages("conv_nope", history(1))
    with pytest.raises(StoreError, match="unknown conversation"):
        store.search("conv_nope", "question")


def _leaf(source_ids: list[str], content: str = "summary of the start") -> NewSummary:
    return NewSummary(
        kind="leaf",
        depth=0,
        content=content,
        token_count=5,
        source_ids=source_ids,
        seq_start=0,
        seq_end=len(source_ids) - 1,
        time_start=1.0,
        time_end=2.0,
        descendant_count=len(source_ids),
    )


def test_compaction_writes_summaries_edges_and_context_at_once(store: Store) -> None:
    cid = store.open_conversation("s")
    stored = store.append_messages(cid, history(4), start_seq=0)
    ids = [m.id for m in stored]
    condensed = NewSummary(
        kind="condensed",
        depth=1,
        content="everything so far",
        token_count=3,
        source_ids=["new:0", "new:1"],
        seq_start=0,
        seq_end=4,
        time_start=1.0,
        time_end=2.0,
        descendant_count=5,
        fallback=True,
    )
    context = [ContextRef(kind="summary", id="new:2")] + [
        ContextRef(kind="message", id=i) for i in ids[5:]
    ]
    leaf_a, leaf_b, top = store.commit_compaction(
        cid, [_leaf(ids[:3]), _leaf(ids[3:5]), condensed], context
    )
    assert top.id.startswith("sum_") and len(top.id) == 20
    assert store.get_context(cid)[0] == ContextRef(kind="summary", id=top.id)
    assert store.get_summary(cid, top.id) == top
    assert top.source_ids == (leaf_a.id, leaf_b.id) and top.fallback
    assert store.get_summary(cid, leaf_a.id).source_ids == tuple(ids[:3])  # type: ignore[union-attr]
    assert store.parent_summary(cid, ids[4]) == leaf_b.id
    assert store.parent_summary(cid, leaf_a.id) == top.id
    assert store.parent_summary(cid, top.id) is None


def test_every_stored_message_is_reachable_from_the_context(store: Store) -> None:
    cid = store.open_conversation("s")
    ids = [m.id for m in store.append_messages(cid, history(3), start_seq=0)]
    store.commit_compaction(
        cid,
        [_leaf(ids[:4])],
        [ContextRef(kind="summary", id="new:0")]
        + [ContextRef(kind="message", id=i) for i in ids[4:]],
    )
    reached: set[str] = set()
    for ref in store.get_context(cid):
        stack = [ref.id]
        while stack:
            item = stack.pop()
            reached.add(item)
            summary = store.get_summary(cid, item)
            stack.extend(summary.source_ids if summary else ())
    assert set(ids) <= reached


def test_a_failed_compaction_leaves_nothing_behind(store: Store) -> None:
    cid = store.open_conversation("s")
    ids = [m.id for m in store.append_messages(cid, history(2), start_seq=0)]
    store.replace_context(cid, [ContextRef(kind="message", id=i) for i in ids])
    with pytest.raises(StoreError):
        store.commit_compaction(
            cid,
            [_leaf(ids[:2]), _leaf(["msg_does_not_exist"])],
            [ContextRef(kind="summary", id="new:0")],
        )
    assert [r.id for r in store.get_context(cid)] == ids
    assert store.parent_summary(cid, ids[0]) is None
    assert store.search(cid, "summary start", scope="summaries").results == []


def test_context_and_summaries_refuse_another_conversations_ids(store: Store) -> None:
    mine = store.open_conversation("mine")
    theirs = store.open_conversation("theirs")
    foreign = store.append_messages(theirs, history(1), start_seq=0)[0].id
    with pytest.raises(StoreError, match="unknown message"):
        store.replace_context(mine, [ContextRef(kind="message", id=foreign)])
    with pytest.raises(StoreError, match="unknown message"):
        store.commit_compaction(mine, [_leaf([foreign])], None)
    assert store.get_message(mine, foreign) is None


def test_large_content_round_trip_is_scoped(store: Store) -> None:
    cid = store.open_conversation("s")
    other = store.open_conversation("other")
    msg = store.append_messages(cid, tool_turn())[1]
    big = "line\n" * 50_000
    record = store.put_large_content(cid, msg.id, big, 50_000)
    assert record.id.startswith("lc_")
    assert store.get_large_content(cid, record.id) == record
    assert store.get_large_content(other, record.id) is None


def test_list_and_delete_conversation(store: Store) -> None:
    a = store.open_conversation("a")
    b = store.open_conversation("b")
    store.append_messages(a, history(2))
    infos = {i.id: i for i in store.list_conversations()}
    assert infos[a].message_count == 5 and infos[a].bytes > 0 and infos[b].message_count == 0
    store.delete_conversation(a)
    assert [i.id for i in store.list_conversations()] == [b]
    assert store.search(b, "question").results == []
    # The key can be used again, and starts from nothing.
    again = store.open_conversation("a")
    assert store.message_count(again) == 0
    assert store.get_context(again) == []


def test_stats_count_rows(store: Store) -> None:
    cid = store.open_conversation("s")
    store.append_messages(cid, history(1))
    stats = store.stats()
    assert stats["conversations"] == 1 and stats["messages"] == 3


def test_data_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with SQLiteStore(path) as first:
        cid = first.open_conversation("s")
        first.append_messages(cid, history(2))
    with SQLiteStore(path) as second:
        assert second.open_conversation("s") == cid
        assert second.append_messages(cid, history(2)) == []
        assert second.search(cid, "answer").results
        assert second.stats()["schema_version"] == max(m.version for m in load_migrations("SQLITE"))


@pytest.mark.parametrize(
    ("spec", "expected_path"),
    [
        pytest.param(":memory:", ":memory:", id="memory"),
        pytest.param("sqlite://", ":memory:", id="sqlite-memory-url"),
        pytest.param("sqlite:///rel/a.db", "rel/a.db", id="sqlite-relative-url"),
    ],
)
def test_open_store_understands_specs(
    spec: str, expected_path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store(spec)
    try:
        assert isinstance(store, SQLiteStore) and store.path == expected_path
        assert open_store(store) is store
    finally:
        store.close()


def test_open_store_defaults_to_the_user_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CONTEXTENGINE_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "archive.db"
    with open_store() as store:
        assert Path(store.path).exists()
    monkeypatch.delenv("CONTEXTENGINE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "contextengine" / "archive.db"


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param("mysql://x/y", id="unknown-scheme"),
        pytest.param("sqlite:/x.db", id="malformed-sqlite-url"),
    ],
)
def test_open_store_refuses_unknown_specs(spec: str) -> None:
    with pytest.raises(StoreError):
        open_store(spec)


def test_postgres_url_names_the_extra_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail as it does without the extra installed.
    monkeypatch.setitem(sys.modules, "contextengine.store.postgres", None)
    with pytest.raises(StoreError, match=r"contextengine\[postgres\]"):
        open_store("postgresql://nobody@127.0.0.1:1/none")


def test_append_context_adds_at_the_end(store: Store) -> None:
    cid = store.open_conversation("s")
    stored = store.append_messages(cid, history(2))
    refs = [ContextRef(kind="message", id=m.id) for m in stored]
    store.replace_context(cid, refs[:2])
    store.append_context(cid, refs[2:])
    assert store.get_context(cid) == refs
    other = store.open_conversation("other")
    with pytest.raises(StoreError):
        store.append_context(other, refs[:1])  # another conversation's message


def _refs(ids: list[str]) -> list[ContextRef]:
    return [ContextRef(kind="message", id=i) for i in ids]


def test_append_to_context_joins_the_active_context_in_the_same_call(store: Store) -> None:
    cid = store.open_conversation("s")
    first = store.append_messages(cid, history(1), start_seq=0, to_context=True)
    # The system prompt at seq 0 stays out of the context: engines send their own copy.
    assert store.get_context(cid) == _refs([m.id for m in first[1:]])
    grown = history(2)
    later = store.append_messages(cid, grown[3:], start_seq=3, to_context=True)
    assert store.get_context(cid) == _refs([m.id for m in first[1:] + later])
    assert store.append_messages(cid, grown, start_seq=0, to_context=True) == []
    assert len(store.get_context(cid)) == 4  # nothing stored, nothing appended


def test_a_splice_replaces_one_run_in_place_and_keeps_the_rest(store: Store) -> None:
    cid = store.open_conversation("s")
    ids = [m.id for m in store.append_messages(cid, history(4), start_seq=0)]
    store.replace_context(cid, _refs(ids[1:]))
    (leaf,) = store.commit_compaction(
        cid,
        [_leaf(ids[2:5])],
        ContextSplice(
            first_id=ids[2],
            last_id=ids[4],
            count=3,
            replacement=[ContextRef(kind="summary", id="new:0")],
        ),
    )
    expected = [*_refs(ids[1:2]), ContextRef(kind="summary", id=leaf.id), *_refs(ids[5:])]
    assert store.get_context(cid) == expected
    # Appends after a splice still land at the end, after the gap it left.
    more = store.append_messages(cid, [{"role": "user", "content": "later"}], to_context=True)
    assert store.get_context(cid) == [*expected, *_refs([more[0].id])]
    assert [type(item).__name__ for item in store.load_context(cid)] == [
        "StoredMessage",
        "SummaryRecord",
        *["StoredMessage"] * (len(ids) - 5 + 1),
    ]


@pytest.mark.parametrize(
    ("first", "last", "count"),
    [
        pytest.param(2, 4, 2, id="wrong-count"),
        pytest.param(4, 2, 3, id="reversed"),
        pytest.param(0, 2, 2, id="first-not-in-context"),
    ],
)
def test_a_splice_that_does_not_match_the_context_is_a_conflict(
    store: Store, first: int, last: int, count: int
) -> None:
    cid = store.open_conversation("s")
    ids = [m.id for m in store.append_messages(cid, history(3), start_seq=0)]
    store.replace_context(cid, _refs(ids[1:]))
    splice = ContextSplice(
        first_id=ids[first],
        last_id=ids[last],
        count=count,
        replacement=[ContextRef(kind="summary", id="new:0")],
    )
    with pytest.raises(StoreConflictError):
        store.commit_compaction(cid, [_leaf(ids[2:5])], splice)
    assert store.get_context(cid) == _refs(ids[1:])
    assert store.parent_summary(cid, ids[2]) is None  # the summary was not written either


def test_a_splice_cannot_grow_the_context(store: Store) -> None:
    cid = store.open_conversation("s")
    ids = [m.id for m in store.append_messages(cid, history(2), start_seq=0)]
    store.replace_context(cid, _refs(ids[1:]))
    splice = ContextSplice(first_id=ids[1], last_id=ids[1], count=1, replacement=_refs(ids[1:3]))
    with pytest.raises(StoreError, match="may only shrink"):
        store.commit_compaction(cid, [], splice)


def test_load_context_resolves_every_reference_in_order(store: Store) -> None:
    cid = store.open_conversation("s")
    ids = [m.id for m in store.append_messages(cid, history(3), start_seq=0)]
    (leaf,) = store.commit_compaction(
        cid, [_leaf(ids[1:3])], [ContextRef(kind="summary", id="new:0"), *_refs(ids[3:])]
    )
    loaded = store.load_context(cid)
    assert loaded[0] == leaf
    assert [item.id for item in loaded[1:]] == ids[3:]
    assert [item.message for item in loaded[1:]] == [  # type: ignore[union-attr]
        m.message for m in store.get_messages(cid, 3)
    ]
    assert store.load_context(store.open_conversation("empty")) == []


def test_sync_is_safe_to_call_on_every_store(store: Store) -> None:
    cid = store.open_conversation("s")
    store.append_messages(cid, history(1), start_seq=0)
    store.sync()
    store.sync()
    assert store.message_count(cid) == 3


@pytest.mark.parametrize("synchronous", ["normal", "full"])
def test_sqlite_durability_modes_keep_every_commit(tmp_path: Path, synchronous: Any) -> None:
    path = tmp_path / "a.db"
    with SQLiteStore(path, synchronous=synchronous) as first:
        cid = first.open_conversation("s")
        first.append_messages(cid, history(2), start_seq=0)
        first.sync()
    with SQLiteStore(path) as second:
        assert second.message_count(cid) == 5


def test_sqlite_refuses_an_unknown_durability_mode(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="synchronous"):
        SQLiteStore(tmp_path / "a.db", synchronous="sometimes")  # type: ignore[arg-type]


def test_a_long_message_is_stored_verbatim_and_found_by_its_last_word(store: Store) -> None:
    cid = store.open_conversation("s")
    long_output = " ".join(f"row {i} ok" for i in range(20_000)) + " then segfault0x7f"
    msg = {"role": "tool", "tool_call_id": "call_1", "content": long_output}
    (stored,) = store.append_messages(cid, [msg], start_seq=0)
    assert store.get_message(cid, stored.id) == stored and stored.message == msg
    (hit,) = store.search(cid, "segfault0x7f").results
    assert hit.id == stored.id and "«segfault0x7f»" in hit.snippet
    assert store.stats()["index_rows"] > 1  # indexed in segments


def test_the_bulk_paths_are_part_of_the_store(store: Store) -> None:
    cid = store.open_conversation("s")
    assert store.import_messages(cid, history(3), start_seq=0, to_context=True) == 7
    assert store.import_messages(cid, history(3), start_seq=0) == 0
    assert [m.seq for m in store.get_messages(cid)] == list(range(7))
    assert len(store.get_context(cid)) == 6
    assert store.copy_messages(cid, store.get_messages(cid)) == 0  # all stored already
    with pytest.raises(StoreError, match="unknown conversation"):
        store.import_messages("conv_nope", history(1))


def test_lineage_follows_links_one_way_and_goes_with_its_conversation(store: Store) -> None:
    assert isinstance(store, LineageStore)
    grandparent, parent, child, stranger = (
        store.open_conversation(key) for key in ("g", "p", "c", "s")
    )
    store.link_conversations(parent, grandparent, reason="reset")
    store.link_conversations(child, parent, reason="reset")
    store.link_conversations(child, parent, reason="reset")  # idempotent
    store.link_conversations(grandparent, child, reason="reset")  # a cycle
    lineage = store.conversation_lineage
    assert lineage(child) == [child, parent, grandparent]
    assert lineage(parent) == [parent, grandparent, child]  # only because of the cycle above
    assert lineage(stranger) == [stranger]
    store.delete_conversation(parent)
    assert lineage(child) == [child]


def test_a_session_alias_opens_the_conversation_it_continues(store: Store) -> None:
    assert isinstance(store, LineageStore)
    conversation = store.open_conversation("before-rotation")
    store.alias_session("after-rotation", conversation)
    assert store.open_conversation("after-rotation") == conversation
    assert store.open_conversation("before-rotation") == conversation
    store.delete_conversation(conversation)
    assert store.open_conversation("after-rotation") != conversation


def test_a_reply_found_through_its_question_says_why(store: Store) -> None:
    cid = store.open_conversation("s")
    said = [
        {"role": "user", "content": "Remember the codeword marmoset for tomorrow's drill."},
        {"role": "assistant", "content": "noted"},
    ]
    store.append_messages(cid, said, start_seq=0)
    question, reply = store.search(cid, "codeword").results
    assert (question.seq, reply.seq) == (0, 1)
    assert "«codeword»" in question.snippet and question.context is None
    # The reply holds no query word: its own text, and the neighbour's words that matched.
    assert reply.snippet == "noted"
    assert reply.context == "Remember the «codeword» marmoset for tomorrow's drill."


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("migration failed", id="words"),
        pytest.param('"staging key"', id="phrase"),
        pytest.param("deploy* succeeded", id="prefix"),
        pytest.param("wifi hunter2 password", id="ctx-neighbours"),
    ],
)
def test_every_hit_shows_the_words_it_matched(store: Store, query: str) -> None:
    cid = store.open_conversation("s")
    texts = [
        "The deploy script lives in tools/deploy.sh and needs the staging key.",
        "ok",
        "Database migration failed: column user_id does not exist.",
        "The database migration finally succeeded after adding the user_id column.",
        "Remember: the wifi password is hunter2.",
        "Got it, stored.",
    ]
    store.append_messages(cid, [{"role": "user", "content": t} for t in texts], start_seq=0)
    hits = store.search(cid, query).results
    assert hits
    for hit in hits:
        # Marked words in the snippet, or else in the neighbour's text: never a bare hit.
        shown = hit.snippet if hit.context is None else hit.context
        assert "«" in shown, (hit.seq, hit.snippet, hit.context)
        if hit.context is not None:
            assert "«" not in hit.snippet and texts[hit.seq or 0].startswith(hit.snippet)


# ---------------------------------------------------------------- turn lock and session stamp


def test_turn_lock_admits_one_turn_per_session_and_is_not_reentrant(store: Store) -> None:
    locks: Any = store  # every store has the turn lock (in-process for SQLite)
    assert locks.try_turn_lock("serve-a")
    assert not locks.try_turn_lock("serve-a"), "a held turn lock was taken again"
    assert locks.try_turn_lock("serve-b"), "sessions do not share a turn lock"
    locks.release_turn_lock("serve-a")
    assert locks.try_turn_lock("serve-a")
    locks.release_turn_lock("serve-a")
    locks.release_turn_lock("serve-b")
    locks.release_turn_lock("never-held")  # nothing happens


def test_turn_lock_waits_for_the_holder_and_times_out(store: Store) -> None:
    import threading

    locks: Any = store
    order: list[str] = []
    assert locks.try_turn_lock("serve-a")
    entered = threading.Event()

    def second_turn() -> None:
        entered.set()
        with locks.turn_lock("serve-a", timeout_s=30):
            order.append("second")

    thread = threading.Thread(target=second_turn)
    thread.start()
    entered.wait(10)
    with pytest.raises(StoreError, match="still held"), locks.turn_lock("serve-a", timeout_s=0.05):
        pass
    order.append("first")
    locks.release_turn_lock("serve-a")
    thread.join(30)
    assert order == ["first", "second"]
    assert locks.try_turn_lock("serve-a"), "the waiting turn did not release the lock"
    locks.release_turn_lock("serve-a")


def test_session_stamp_moves_with_every_write_a_host_would_load(
    store: Store, clock: FakeClock
) -> None:
    stamps: Any = store
    assert stamps.session_stamp("k") is None
    cid = store.open_conversation("k")
    empty = stamps.session_stamp("k")
    assert empty is not None and empty[0] == 0
    clock.now += 1
    stored = store.append_messages(cid, history(1), token_counts=[1, 1, 1])
    appended = stamps.session_stamp("k")
    assert appended is not None and appended[0] == 3 and appended != empty
    assert stamps.session_stamp("k") == appended, "a read moved the stamp"
    clock.now += 1
    store.replace_context(cid, [ContextRef(kind="message", id=m.id) for m in stored])
    assert stamps.session_stamp("k") not in (appended, None)
    if isinstance(store, LineageStore):
        store.alias_session("rotated", cid)
        assert stamps.session_stamp("rotated") == stamps.session_stamp("k")
