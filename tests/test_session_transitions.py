"""Session transitions: reset with carry-over, rotation at a compaction, and lcm's lineage.

A reset (the user starts over) ends the old session, resets the engine and
starts the new one with ``old_session_id``; the optional carry-over hook then
lets the engine bring state across. lcm links the new conversation to the old
one so the model can still search it, and that lineage never reaches any
other conversation. A rotation (the host gives the same conversation a new
session id after a compaction) is a continuation, not a reset.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextengine import ContextHost, LosslessEngine
from contextengine.store import Store
from contextengine.testing import RecordingEngine
from store_factories import STORE_FACTORIES, FakeClock, StoreFactory

Message = dict[str, Any]


class CarryingEngine(RecordingEngine):
    """A recording engine that also records the optional carry-over hook."""

    def carry_over_new_session_context(
        self, old_session_id: str, new_session_id: str, messages: list[Message] | None = None
    ) -> None:
        self._record(
            "carry_over_new_session_context",
            old_session_id=old_session_id,
            new_session_id=new_session_id,
            messages=messages,
        )


class TwoArgumentCarryOver(RecordingEngine):
    """Written against the two-argument hook (no ``messages``)."""

    carried: list[tuple[str, str]]

    def carry_over_new_session_context(self, old_session_id: str, new_session_id: str) -> None:
        self.carried = [*getattr(self, "carried", []), (old_session_id, new_session_id)]


def chat(*texts: str) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "You are helpful."}]
    for text in texts:
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": f"Noted: {text}"})
    return messages


# ---------------------------------------------------------------------- the host


def test_reset_passes_the_old_session_and_the_callers_arguments_then_carries_over() -> None:
    engine = CarryingEngine()
    host = ContextHost(engine, model="gpt-4o", context_length=100_000)
    host.start_session("s1")
    history = chat("remember the blue door")
    host.prepare_request(history)
    host.reset_session("s2", platform="cli", user_id="u7")
    names = engine.hook_names()
    tail = names[names.index("on_session_end") :]
    assert tail == [
        "on_session_end",
        "on_session_reset",
        "on_session_start",
        "carry_over_new_session_context",
    ]
    (start,) = [c for c in engine.calls_to("on_session_start") if c["session_id"] == "s2"]
    assert start["old_session_id"] == "s1" and start["boundary_reason"] == "reset"
    assert start["platform"] == "cli" and start["user_id"] == "u7"
    (carry,) = engine.calls_to("carry_over_new_session_context")
    assert (carry["old_session_id"], carry["new_session_id"]) == ("s1", "s2")
    assert carry["messages"] == history


def test_reset_without_carry_over_skips_the_hook() -> None:
    engine = CarryingEngine()
    host = ContextHost(engine, model="gpt-4o", context_length=100_000)
    host.start_session("s1")
    host.reset_session("s2", chat("x"), carry_over=False)
    assert not engine.calls_to("carry_over_new_session_context")


def test_a_two_argument_carry_over_hook_still_works() -> None:
    engine = TwoArgumentCarryOver()
    host = ContextHost(engine, model="gpt-4o", context_length=100_000)
    host.start_session("s1")
    host.reset_session("s2", chat("x"))
    assert engine.carried == [("s1", "s2")]


def test_a_compaction_can_rotate_the_session_id_without_a_reset() -> None:
    engine = RecordingEngine()
    host = ContextHost(
        engine,
        model="gpt-4o",
        context_length=100_000,
        rotate_session_on_compaction=lambda old: f"{old}+1",
    )
    host.start_session("s1")
    history = chat(*(f"point {n}" for n in range(8)))
    compacted = host.compress_now(history)
    assert len(compacted) < len(history)
    assert host.session_id == "s1+1"
    (start,) = [c for c in engine.calls_to("on_session_start") if c["session_id"] == "s1+1"]
    assert start["old_session_id"] == "s1" and start["boundary_reason"] == "compression"
    assert not engine.calls_to("on_session_reset") and not engine.calls_to("on_session_end")


def test_no_rotation_when_the_compaction_changed_nothing() -> None:
    engine = RecordingEngine()
    host = ContextHost(
        engine, model="gpt-4o", context_length=100_000, rotate_session_on_compaction=str.upper
    )
    host.start_session("s1")
    host.compress_now(chat("only one"))
    assert host.session_id == "s1"


# ---------------------------------------------------------------------- lcm


@pytest.fixture(params=STORE_FACTORIES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    factory: StoreFactory = request.param
    opened = factory(tmp_path, FakeClock())
    yield opened
    opened.close()


def lcm(store: Store) -> LosslessEngine:
    return LosslessEngine(context_length=32_000, model="gpt-4o", store=store)


def grep(host: ContextHost, query: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    cursor = None
    while True:
        args: dict[str, Any] = {"query": query, "limit": 2}
        if cursor:
            args["cursor"] = cursor
        page = json.loads(host.handle_tool_call("lcm_grep", args))
        assert "error" not in page, page
        results.extend(page["results"])
        cursor = page["next_cursor"]
        if not cursor:
            return results


def run_session(host: ContextHost, history: list[Message]) -> None:
    host.prepare_request(history)
    host.end_turn(history)


def test_lcm_carries_the_old_conversation_over_and_nothing_else(store: Store) -> None:
    # An unrelated conversation in the same archive: it must never be reachable.
    other = ContextHost(lcm(store), model="gpt-4o", context_length=32_000)
    other.start_session("someone-else")
    run_session(other, chat("the zebra password is kept here", "zebra again"))

    host = ContextHost(lcm(store), model="gpt-4o", context_length=32_000)
    host.start_session("day-1")
    day_one = chat("the pineapple budget is 420 euros", "pineapple delivery on friday")
    run_session(host, day_one)
    host.reset_session("day-2")
    run_session(host, chat("what did we decide about the budget?"))

    found = grep(host, "pineapple")
    assert len(found) >= 2 and all(hit["earlier_session"] for hit in found)
    assert grep(host, "zebra") == []  # another conversation: never in the lineage
    assert grep(host, "budget")[0].get("earlier_session") is None  # the current one first
    expanded = json.loads(host.handle_tool_call("lcm_expand", {"id": found[0]["id"]}))
    assert "pineapple" in expanded["content"]

    zebra = grep(other, "zebra")[0]["id"]
    unknown = json.loads(host.handle_tool_call("lcm_expand", {"id": zebra}))
    assert "error" in unknown
    # The link goes one way: the old conversation does not see the new one.
    again = ContextHost(lcm(store), model="gpt-4o", context_length=32_000)
    again.start_session("day-1")
    assert grep(again, "decide") == []
    assert grep(other, "pineapple") == []


def test_lcm_keeps_one_conversation_across_a_compaction_rotation(store: Store) -> None:
    engine = lcm(store)
    host = ContextHost(
        engine,
        model="gpt-4o",
        context_length=32_000,
        rotate_session_on_compaction=lambda old: f"{old}/next",
    )
    host.start_session("work")
    history = chat(*(f"step {n}: " + "detail " * 80 for n in range(12)))
    run_session(host, history)
    conversation = engine.conversation_id
    host.compress_now(history)
    assert host.session_id == "work/next"
    assert engine.conversation_id == conversation  # a continuation, not a new conversation
    resumed = lcm(store)
    resumed.on_session_start("work/next")  # after a restart, under the new id
    assert resumed.conversation_id == conversation
    assert resumed.store.message_count(conversation) == len(history)
