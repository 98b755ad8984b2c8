"""Agents SDK input items ⇄ OpenAI chat messages: exact both ways, by property and by example.

The conversion is plain dicts and needs no SDK: these tests run everywhere.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contextengine import validate_messages
from contextengine.integrations._agents_items import (
    ITEMS_KEY,
    items_to_messages,
    messages_to_items,
    strip_items,
)

text = st.text(max_size=20)
ident = st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=10)
input_part = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, text),
    st.builds(
        lambda url, detail: {"type": "input_image", "image_url": url, "detail": detail},
        st.just("https://x.test/a.png"),
        st.sampled_from(["low", "high", "auto"]),
    ),
    st.builds(lambda f: {"type": "input_file", "file_id": f}, ident),
)
output_part = st.one_of(
    st.builds(lambda t: {"type": "output_text", "text": t, "annotations": []}, text),
    st.builds(lambda t: {"type": "refusal", "refusal": t}, text),
)
user_item = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "system", "developer"]),
    text | st.lists(input_part, max_size=3),
)
typed_user_item = user_item.map(lambda item: {"type": "message", **item})
assistant_item = st.one_of(
    st.builds(lambda t: {"role": "assistant", "content": t}, text),
    st.builds(
        lambda item_id, parts: {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": parts,
        },
        st.just("__fake_id__") | ident,
        st.lists(output_part, min_size=1, max_size=2),
    ),
)
call_item = st.builds(
    lambda call_id, name, args: {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "id": "__fake_id__",
    },
    ident,
    ident,
    st.dictionaries(text, text, max_size=2).map(json.dumps),
)
output_item = st.builds(
    lambda call_id, output: {"type": "function_call_output", "call_id": call_id, "output": output},
    ident,
    text | st.lists(input_part, max_size=2),
)
reasoning_item = st.builds(
    lambda rid, summary: {
        "type": "reasoning",
        "id": rid,
        "summary": [{"type": "summary_text", "text": summary}],
    },
    ident,
    text,
)
other_item = st.builds(
    lambda call_id: {"type": "web_search_call", "id": call_id, "status": "completed"}, ident
)
any_item = st.one_of(
    user_item, typed_user_item, assistant_item, call_item, output_item, reasoning_item, other_item
)


@settings(max_examples=400, deadline=None)
@given(st.lists(any_item, max_size=8))
def test_items_to_messages_and_back_is_exact(items: list[dict[str, Any]]) -> None:
    messages = items_to_messages(items)
    json.dumps(messages)
    assert messages_to_items(messages) == items


def _turn(call_ids: list[str], answer: str) -> list[dict[str, Any]]:
    calls = [
        {"type": "function_call", "call_id": c, "name": "read", "arguments": "{}"} for c in call_ids
    ]
    outputs = [
        {"type": "function_call_output", "call_id": c, "output": f"out {c}"} for c in call_ids
    ]
    return [
        {"role": "user", "content": "go"},
        *calls,
        *outputs,
        {"role": "assistant", "content": answer},
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(ident, min_size=0, max_size=3, unique=True), max_size=4), text)
def test_a_paired_run_gives_valid_messages(turns: list[list[str]], answer: str) -> None:
    items = [
        item
        for index, ids in enumerate(turns)
        for item in _turn([f"{index}_{c}" for c in ids], answer)
    ]
    messages = [strip_items(m) for m in items_to_messages(items)]
    validate_messages(messages)


canonical_message = st.one_of(
    st.builds(
        lambda role, content: {"role": role, "content": content},
        st.sampled_from(["system", "developer", "user"]),
        text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2),
    ),
    st.builds(lambda t: {"role": "assistant", "content": t}, text),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(canonical_message, max_size=6), st.lists(ident, max_size=3, unique=True))
def test_messages_to_items_and_back_is_exact(
    messages: list[dict[str, Any]], call_ids: list[str]
) -> None:
    if call_ids:
        # An assistant text right before tool calls is one chat message with them,
        # as a model sends it (the module docstring says so): not two.
        if messages and messages[-1]["role"] == "assistant":
            messages = [*messages, {"role": "user", "content": "go on"}]
        messages = [
            *messages,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    for c in call_ids
                ],
            },
            *({"role": "tool", "tool_call_id": c, "content": f"r{c}"} for c in call_ids),
        ]
    back = [strip_items(m) for m in items_to_messages(messages_to_items(messages))]
    assert back == messages


def test_parallel_calls_share_one_assistant_message_with_their_reasoning() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    items = [
        {"role": "user", "content": "read both"},
        reasoning,
        {"type": "function_call", "call_id": "a", "name": "read", "arguments": '{"f": 1}'},
        {"type": "function_call", "call_id": "b", "name": "read", "arguments": '{"f": 2}'},
        {"type": "function_call_output", "call_id": "a", "output": "one"},
        {"type": "function_call_output", "call_id": "b", "output": "two"},
    ]
    messages = [strip_items(m) for m in items_to_messages(items)]
    assert messages == [
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"f": 1}'},
                },
                {
                    "id": "b",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"f": 2}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "one"},
        {"role": "tool", "tool_call_id": "b", "content": "two"},
    ]
    validate_messages(messages)


def test_a_message_the_engine_changed_is_converted_anew() -> None:
    items = [{"type": "function_call_output", "call_id": "a", "output": "x" * 100}]
    (message,) = items_to_messages(items)
    message["content"] = "[cut: 100 chars]"
    assert ITEMS_KEY in message
    assert messages_to_items([message]) == [
        {"type": "function_call_output", "call_id": "a", "output": "[cut: 100 chars]"}
    ]
    summary = {"role": "user", "content": "[Summary of earlier turns] ..."}
    assert messages_to_items([summary]) == [summary]
