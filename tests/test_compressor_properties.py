"""Properties of compress() over generated conversations, broken ones included.

Whatever comes in — parallel tool calls, results missing or out of order,
orphan results, runs of same-role messages, list contents — what comes out
validates, keeps every tool call next to its results, keeps the system prompt
byte-identical and is never bigger than the input.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compressor_conversations import SYSTEM_PROMPT, tool_pairs_intact
from contextengine.engines.compressor import ContextCompressor
from contextengine.messages import sanitize_tool_pairs, validate_messages
from contextengine.tokens import count_message_tokens

Message = dict[str, Any]

_words = st.sampled_from(
    ["fix", "src/app.py", "ERR_42", "pytest", "ok", "Traceback", "0xdeadbeef", "the", "a"]
)
_text = st.lists(_words, min_size=1, max_size=400).map(" ".join)


@st.composite
def _event(draw: st.DrawFn, index: int) -> list[Message]:
    kind = draw(st.sampled_from(["user", "assistant", "tools", "tools", "parts", "orphan"]))
    if kind == "user":
        return [{"role": "user", "content": draw(_text)}]
    if kind == "assistant":
        return [{"role": "assistant", "content": draw(_text)}]
    if kind == "parts":
        return [{"role": "user", "content": [{"type": "text", "text": draw(_text)}]}]
    if kind == "orphan":
        return [{"role": "tool", "tool_call_id": f"ghost{index}", "content": draw(_text)}]
    n = draw(st.integers(1, 3))
    ids = [f"call_{index}_{k}" for k in range(n)]
    calls = [
        {
            "id": cid,
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": draw(_text)})},
        }
        for cid in ids
    ]
    out: list[Message] = [
        {"role": "assistant", "content": draw(st.none() | _text), "tool_calls": calls}
    ]
    answered = draw(
        st.permutations(ids).flatmap(lambda p: st.lists(st.sampled_from(p), unique=True))
    )
    out += [{"role": "tool", "tool_call_id": cid, "content": draw(_text)} for cid in answered]
    return out


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": SYSTEM_PROMPT})
    for index in range(draw(st.integers(0, 30))):
        messages += draw(_event(index))
    return messages


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    convo=conversations(),
    first=st.integers(0, 4),
    last=st.integers(0, 8),
    context_length=st.sampled_from([1_000, 3_000, 20_000]),
    force=st.booleans(),
)
def test_compress_output_always_validates_and_keeps_pairs(
    convo: list[Message], first: int, last: int, context_length: int, force: bool
) -> None:
    snapshot = copy.deepcopy(convo)
    engine = ContextCompressor(
        context_length=context_length, protect_first_n=first, protect_last_n=last
    )
    out = engine.compress(convo, force=force)
    assert convo == snapshot, "the input is never mutated"
    validate_messages(out)
    assert sanitize_tool_pairs(out) == out
    assert tool_pairs_intact(out)
    if convo and convo[0]["role"] == "system":
        assert out[0] == convo[0]
    # Never larger than the input it was given. (A broken input is not
    # validated up front, which would walk the whole history on every call;
    # the output is, and is repaired when needed.)
    assert count_message_tokens(out) <= count_message_tokens(convo)
    # A second compaction of the output is just as safe (summary replaced, not nested).
    again = engine.compress(out, force=True)
    validate_messages(again)
    assert tool_pairs_intact(again)
