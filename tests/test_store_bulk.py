"""The bulk path (``import_messages``, ``copy_messages``) stores what the per-turn path stores.

Runs on every store. "The same" means the same rows: ids, seqs, identity
keys, token counts, JSON, the active context, and what search finds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextengine.errors import InvalidMessagesError, StoreError
from contextengine.store import Store, StoredMessage
from store_factories import STORE_FACTORIES, FakeClock, StoreFactory


@pytest.fixture(params=STORE_FACTORIES)
def factory(request: pytest.FixtureRequest) -> StoreFactory:
    chosen: StoreFactory = request.param
    return chosen


@pytest.fixture
def store(factory: StoreFactory, tmp_path: Path) -> Iterator[Store]:
    opened = factory(tmp_path, FakeClock())
    yield opened
    opened.close()


def _rows(store: Store, cid: str) -> list[tuple[Any, ...]]:
    return [
        (m.id, m.seq, m.role, m.message, m.token_count, m.identity_key)
        for m in store.get_messages(cid)
    ]


def _session(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"open ticket {i} about the flaky build"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",  # recycled, as real providers do
                        "type": "function",
                        "function": {"name": "grep", "arguments": f'{{"q": "t{i}"}}'},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": "call_1", "content": f"ticket {i}: open"})
        msgs.append({"role": "assistant", "content": f"Ticket {i} is open.", "id": f"resp_{i}"})
    return msgs


def _per_turn(store: Store, cid: str, msgs: list[dict[str, Any]], turn: int) -> None:
    for lo in range(0, len(msgs), turn):
        store.append_messages(cid, msgs[lo : lo + turn], start_seq=lo, to_context=True)


def test_import_stores_what_turns_store(store: Store) -> None:
    msgs = _session(30)
    turns = store.open_conversation("turns")
    _per_turn(store, turns, msgs, 2)
    # Same session key in a second store would give the same ids; here the
    # conversation differs, so compare everything but the ids' conversation part.
    bulk = store.open_conversation("bulk")
    assert store.import_messages(bulk, msgs, start_seq=0, to_context=True) == len(msgs)
    a, b = _rows(store, turns), _rows(store, bulk)
    assert [r[1:] for r in a] == [r[1:] for r in b]
    assert len(store.get_context(bulk)) == len(msgs) - 1  # the system prompt stays out
    for query in ("flaky build", "ticket 7", "grep"):
        found_a = [h.seq for h in store.search(turns, query).results]
        found_b = [h.seq for h in store.search(bulk, query).results]
        assert found_a == found_b and found_a


def test_the_same_conversation_through_either_path_has_the_same_ids(
    factory: StoreFactory, tmp_path: Path
) -> None:
    msgs = _session(10)
    per_turn = factory(tmp_path / "a", FakeClock())
    bulk = factory(tmp_path / "b", FakeClock())
    try:
        cid = per_turn.open_conversation("s")
        _per_turn(per_turn, cid, msgs, 3)
        other = bulk.open_conversation("s")
        assert other == cid
        bulk.import_messages(other, msgs, start_seq=0, to_context=True)
        assert _rows(bulk, other) == _rows(per_turn, cid)
        assert bulk.get_context(other) == per_turn.get_context(cid)
    finally:
        per_turn.close()
        bulk.close()


def test_importing_again_adds_nothing_and_a_longer_history_adds_its_tail(store: Store) -> None:
    msgs = _session(5)
    cid = store.open_conversation("s")
    assert store.import_messages(cid, msgs[:8]) == 8
    assert store.import_messages(cid, msgs[:8]) == 0
    assert store.import_messages(cid, msgs) == len(msgs) - 8  # aligned by content
    assert [m.seq for m in store.get_messages(cid)] == list(range(len(msgs)))


def test_an_invalid_message_stops_the_import_and_importing_again_completes_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextengine.store import bulk

    monkeypatch.setattr(bulk, "_FIRST_CHUNK", 4)
    msgs = _session(10)
    cid = store.open_conversation("s")
    broken = [*msgs[:20], {"role": "user", "content": {1, 2}}, *msgs[21:]]
    with pytest.raises(InvalidMessagesError):
        store.import_messages(cid, broken, start_seq=0)
    kept = store.message_count(cid)
    assert 0 < kept <= 20  # whole chunks before the bad message, nothing after it
    assert store.import_messages(cid, msgs, start_seq=0) == len(msgs) - kept
    assert _rows(store, cid)[-1][3] == msgs[-1]


def test_bulk_token_counts_are_exact(store: Store) -> None:
    from contextengine.tokens import message_tokens

    msgs = _session(3)
    cid = store.open_conversation("s")
    store.import_messages(cid, msgs)
    assert [m.token_count for m in store.get_messages(cid)] == [message_tokens(m) for m in msgs]
    given = store.open_conversation("given")
    store.import_messages(given, msgs, token_counts=list(range(len(msgs))))
    assert [m.token_count for m in store.get_messages(given)] == list(range(len(msgs)))
    with pytest.raises(StoreError, match="one entry per message"):
        store.import_messages(given, msgs, token_counts=[1])


def test_copy_keeps_every_field_and_refuses_a_gap(factory: StoreFactory, tmp_path: Path) -> None:
    source = factory(tmp_path / "a", FakeClock(1_000.0))
    target = factory(tmp_path / "b", FakeClock(2_000.0))
    try:
        cid = source.open_conversation("s")
        source.append_messages(cid, _session(4), start_seq=0)
        records = source.get_messages(cid)
        assert target.open_conversation("s") == cid
        assert target.copy_messages(cid, records[:5]) == 5
        assert target.copy_messages(cid, records) == len(records) - 5  # stored ones skipped
        assert target.get_messages(cid) == records  # ids, seqs, keys, counts, times
        gap = StoredMessage(
            id="msg_0000000000000000",
            conversation_id=cid,
            seq=len(records) + 3,
            role="user",
            message={"role": "user", "content": "later"},
            token_count=1,
            identity_key="h:99:x",
            created_at=0.0,
        )
        with pytest.raises(StoreError, match="continues at"):
            target.copy_messages(cid, [gap])
        assert target.message_count(cid) == len(records)
        assert [h.seq for h in target.search(cid, "ticket 2").results][:1] == [
            h.seq for h in source.search(cid, "ticket 2").results
        ][:1]
    finally:
        source.close()
        target.close()


_MESSAGE = st.one_of(
    st.builds(
        lambda role, text: {"role": role, "content": text},
        st.sampled_from(["user", "assistant"]),
        st.text(alphabet="abc xyz\n", max_size=30),
    ),
    st.builds(
        lambda n: {"role": "assistant", "content": "ok", "id": f"resp_{n}"},
        st.integers(0, 5),  # repeated provider ids: stored once
    ),
    st.builds(
        lambda text: {"role": "tool", "tool_call_id": "call_1", "content": text},
        st.text(alphabet="abc ", max_size=9_000),  # some longer than a segment
    ),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(msgs=st.lists(_MESSAGE, max_size=25), turn=st.integers(1, 4))
def test_any_history_is_stored_alike_by_turns_and_in_bulk(
    store: Store, msgs: list[dict[str, Any]], turn: int
) -> None:
    suffix = f"{len(msgs)}-{turn}-{abs(hash(repr(msgs))) % 10**9}"
    turns = store.open_conversation("turns-" + suffix)
    bulk = store.open_conversation("bulk-" + suffix)
    _per_turn(store, turns, msgs, turn)
    store.import_messages(bulk, msgs, start_seq=0, to_context=True)
    assert [r[1:] for r in _rows(store, turns)] == [r[1:] for r in _rows(store, bulk)]
    assert len(store.get_context(turns)) == len(store.get_context(bulk))
