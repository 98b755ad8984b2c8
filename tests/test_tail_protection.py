"""Tail protection: the recent user turns a compaction always keeps verbatim."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from contextengine import ContextCompressor, ContextEngine, ContextHost, LosslessEngine

Message = dict[str, Any]


def agent_conversation(turns: int) -> list[Message]:
    """Short user requests, each followed by a tool call with a sizeable result."""
    messages: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Request {turn}: rename variable v{turn}."})
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "grep", "arguments": json.dumps({"pattern": f"v{turn}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        output = "\n".join(f"src/m{n}.py:{n}: v{turn} = compute({n})" for n in range(40))
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": output})
        messages.append({"role": "assistant", "content": f"Renamed v{turn} in 40 places."})
    return messages


def _compressor(min_users: int) -> ContextEngine:
    return ContextCompressor(
        context_length=16_000,
        model="gpt-4o",
        tail_token_budget=300,
        protect_last_n=2,
        min_tail_user_messages=min_users,
        archive=False,  # the plain compressor's tail budget
    )


def _lcm(min_users: int) -> ContextEngine:
    engine = LosslessEngine(
        context_length=16_000,
        model="gpt-4o",
        store=":memory:",
        fresh_tail_tokens=300,
        min_tail_user_messages=min_users,
    )
    engine.on_session_start("tail")
    return engine


ENGINES = [pytest.param(_compressor, id="compressor"), pytest.param(_lcm, id="lcm")]


def kept_verbatim_from(messages: list[Message], history: list[Message], turn: int) -> bool:
    """Whether the output ends with the history from request ``turn`` on, unchanged."""
    request = {"role": "user", "content": f"Request {turn}: rename variable v{turn}."}
    if request not in messages:
        return False
    start, original = messages.index(request), history.index(request)
    return messages[start:] == history[original:]


@pytest.mark.parametrize("make", ENGINES)
def test_the_tail_keeps_at_least_min_tail_user_messages_real_user_turns(
    make: Callable[[int], ContextEngine],
) -> None:
    history = agent_conversation(12)
    default = make(1).compress(history, force=True)
    assert kept_verbatim_from(default, history, 11)
    assert not kept_verbatim_from(default, history, 9)  # the tail budget alone keeps fewer
    three = make(3).compress(history, force=True)
    assert kept_verbatim_from(three, history, 9)
    assert three != history  # and the rest was compacted


@pytest.mark.parametrize("make", ENGINES)
def test_negative_min_tail_user_messages_is_refused(
    make: Callable[[int], ContextEngine],
) -> None:
    with pytest.raises(ValueError, match="min_tail_user_messages"):
        make(-1)


# ---------------------------------------------------------------------- forced compaction


def small_chat(turns: int) -> list[Message]:
    """A chat with no tools, small enough to fit any tail budget."""
    messages: list[Message] = [{"role": "system", "content": "You are helpful."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"Question {turn}: " + "why " * 60})
        messages.append({"role": "assistant", "content": f"Answer {turn}: " + "because " * 60})
    return messages


def _big_compressor() -> ContextEngine:
    return ContextCompressor(context_length=128_000, model="gpt-4o", protect_last_n=4)


def _big_lcm() -> ContextEngine:
    engine = LosslessEngine(context_length=128_000, model="gpt-4o", store=":memory:")
    engine.on_session_start("small")
    return engine


@pytest.mark.parametrize(
    "make", [pytest.param(_big_compressor, id="compressor"), pytest.param(_big_lcm, id="lcm")]
)
def test_a_forced_compress_of_a_small_chat_still_compacts(
    make: Callable[[], ContextEngine],
) -> None:
    history = small_chat(8)
    assert make().compress(history) == history  # not forced: it all fits the tail
    engine = make()
    assert engine.has_content_to_compress(history)
    compacted = engine.compress(history, force=True)
    assert len(compacted) < len(history)
    assert compacted[-2:] == history[-2:]  # the latest turn, verbatim
    host = ContextHost(make(), model="gpt-4o", context_length=128_000)
    assert len(host.compress_now(history)) < len(history)  # the manual /compress
