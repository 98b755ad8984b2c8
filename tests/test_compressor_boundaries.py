"""Where the compressor cuts: protected head, protected tail, pinned request, previous summary."""

from __future__ import annotations

from typing import Any

import pytest

from compressor_conversations import assistant, call, result, system, user
from contextengine.engines.compressor.boundaries import LazyTokens, Regions, select_regions
from contextengine.engines.compressor.summary import frame_summary, is_summary_message

Message = dict[str, Any]


def regions(
    messages: list[Message],
    *,
    first: int = 1,
    last: int = 2,
    budget: int = 10,
    turn_cap: int = 1_000,
) -> Regions:
    """Every message costs 1 token, except as given by a '#tokens' key."""

    def count(msg: Message) -> int:
        return int(msg.get("#tokens", 1))

    return select_regions(
        messages,
        tokens=LazyTokens(messages, count),
        count=count,
        is_summary=is_summary_message,
        protect_first_n=first,
        protect_last_n=last,
        tail_token_budget=budget,
        turn_cap=turn_cap,
    )


def heavy(msg: Message, tokens: int) -> Message:
    return {**msg, "#tokens": tokens}


def chat(n: int) -> list[Message]:
    out = [system()]
    for i in range(n):
        out.append(user(f"u{i}") if i % 2 == 0 else assistant(f"a{i}"))
    return out


def test_head_is_system_plus_first_n_and_extends_over_tool_results() -> None:
    convo = [system(), user("task"), call(("a", "t", {}), ("b", "t", {})), result("a", "1")]
    convo += [result("b", "2"), *chat(12)[1:]]
    r = regions(convo, first=2)
    assert r.head_end == 5, "the call's results stay with it in the head"


def test_tail_walks_back_within_budget_and_keeps_at_least_protect_last_n() -> None:
    convo = chat(20)
    assert regions(convo, last=2, budget=5).tail_start == len(convo) - 5
    assert regions(convo, last=8, budget=5).tail_start == len(convo) - 8


def test_an_oversized_group_enters_the_tail_whole() -> None:
    convo = [*chat(10), heavy(call(("a", "t", {}), ("b", "t", {})), 50)]
    convo += [heavy(result("a", "x"), 50), result("b", "y"), assistant("done")]
    r = regions(convo, last=2, budget=3, turn_cap=0)
    assert r.tail_start == len(convo) - 4, "call + both results + reply, never split"
    assert r.work[r.tail_start]["tool_calls"]


def test_tail_never_starts_on_a_tool_result() -> None:
    convo = [*chat(9), call(*[(f"c{i}", "t", {}) for i in range(5)])]
    convo += [result(f"c{i}", "r") for i in range(5)]
    for last in range(0, 8):
        r = regions(convo, last=last, budget=0, turn_cap=0)
        if r.tail_start < len(convo):
            assert r.work[r.tail_start]["role"] != "tool"


def test_tail_reaches_back_to_the_latest_user_request() -> None:
    convo = [*chat(6), user("the request")]
    for i in range(10):
        convo += [call((f"c{i}", "t", {})), result(f"c{i}", "r")]
    r = regions(convo, last=2, budget=4)
    assert r.work[r.tail_start]["content"] == "the request"
    assert r.pinned is None


def test_a_turn_too_big_for_the_cap_pins_its_request() -> None:
    convo = [*chat(6), user("the request")]
    for i in range(10):
        convo += [heavy(call((f"c{i}", "t", {})), 100), result(f"c{i}", "r")]
    r = regions(convo, last=2, budget=4, turn_cap=300)
    assert r.pinned == 7 and r.work[7]["content"] == "the request"
    assert r.tail_start > 7
    assert r.work[7] not in r.middle()


def test_previous_summary_is_taken_out_and_the_head_shrinks_to_system() -> None:
    convo = [system(), user("old task"), assistant("ok"), user(frame_summary("earlier facts"))]
    convo += chat(12)[1:]
    r = regions(convo, first=2, last=2, budget=2)
    assert r.previous_summary == "earlier facts"
    assert r.head_end == 1
    assert not any(is_summary_message(m) for m in r.middle())
    assert r.middle()[0]["content"] == "old task", "the old head is summarised now"


def test_a_merged_summary_leaves_its_message() -> None:
    merged = user(frame_summary("earlier") + "\n\nplease continue")
    convo = [system(), merged, *chat(12)[1:]]
    r = regions(convo, first=1, last=2, budget=2)
    assert r.previous_summary == "earlier"
    assert r.work[1] == user("please continue")


@pytest.mark.parametrize("n", [pytest.param(n, id=f"{n}-messages") for n in range(0, 6)])
def test_short_conversations_have_no_middle(n: int) -> None:
    r = regions(chat(n), first=3, last=6)
    assert r.middle() == []


def test_only_the_tail_is_counted() -> None:
    counted: list[int] = []
    convo = chat(2_000)

    def count(msg: Message) -> int:
        counted.append(1)
        return 1

    select_regions(
        convo,
        tokens=LazyTokens(convo, count),
        count=count,
        is_summary=is_summary_message,
        protect_first_n=3,
        protect_last_n=6,
        tail_token_budget=20,
        turn_cap=100,
    )
    assert len(counted) < 40, "work is bounded by the tail, not the history"
