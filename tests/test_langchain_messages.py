"""LangChain messages ⇄ OpenAI messages: exact both ways, by property and by example."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="needs the 'langchain' extra")

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from contextengine import validate_messages
from contextengine.integrations._langchain_messages import from_openai, to_openai

text = st.text(max_size=20)
ident = st.text(alphabet="abcdefghij0123456789_-", min_size=1, max_size=12)
json_scalar = st.none() | st.booleans() | st.integers(-1000, 1000) | text
json_value = st.recursive(
    json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=6,
)
part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(
        lambda url, detail: {"type": "image_url", "image_url": {"url": url, "detail": detail}},
        st.sampled_from(["https://x.test/a.png", "data:image/png;base64,iVBORw0KGgo="]),
        st.sampled_from(["low", "high", "auto"]),
    ),
    st.builds(lambda url: {"type": "image", "url": url}, st.just("https://x.test/b.png")),
)
lc_content = text | st.lists(part | text, max_size=3)
# Keys include ones that collide with OpenAI fields and a key LangChain's OpenAI
# integration really writes.
extra_key = st.sampled_from(
    ["refusal", "reasoning_content", "tool_calls", "name", "role", "audio", "langchain", "x"]
)
additional = st.dictionaries(extra_key, json_value, max_size=3)
lc_tool_call = st.builds(
    lambda name, args, call_id: {"name": name, "args": args, "id": call_id, "type": "tool_call"},
    ident,
    st.dictionaries(text, json_value, max_size=3),
    ident,
)
lc_invalid_call = st.builds(
    lambda name, args, call_id, error: {
        "name": name,
        "args": args,
        "id": call_id,
        "error": error,
        "type": "invalid_tool_call",
    },
    ident,
    st.sampled_from(['{"a": ', "[1, 2]", "not json", '{"ok": true}']),
    ident,
    st.none() | text,
)
common = {"id": st.none() | ident, "name": st.none() | ident, "additional_kwargs": additional}


def _ai(**kw: Any) -> AIMessage:
    return AIMessage(**kw)


lc_message = st.one_of(
    st.builds(HumanMessage, content=lc_content, **common),
    st.builds(SystemMessage, content=lc_content, **common),
    st.builds(
        _ai,
        content=lc_content,
        tool_calls=st.lists(lc_tool_call, max_size=2),
        invalid_tool_calls=st.lists(lc_invalid_call, max_size=2),
        response_metadata=st.dictionaries(text, json_value, max_size=2),
        usage_metadata=st.none()
        | st.just({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}),
        **common,
    ),
    st.builds(
        ToolMessage,
        content=lc_content,
        tool_call_id=ident,
        status=st.sampled_from(["success", "error"]),
        artifact=st.none() | st.dictionaries(text, json_scalar, max_size=2),
        **common,
    ),
    st.builds(
        ChatMessage,
        content=lc_content,
        role=st.sampled_from(["developer", "user", "assistant", "critic"]),
        **common,
    ),
    st.builds(FunctionMessage, content=lc_content, name=ident, id=st.none() | ident),
)


@settings(max_examples=300, deadline=None)
@given(lc_message)
def test_langchain_to_openai_and_back_is_exact(message: BaseMessage) -> None:
    converted = to_openai(message)
    json.dumps(converted)  # what the archive stores must be JSON
    back = from_openai(converted)
    assert type(back) is type(message)
    assert back == message


openai_arguments = st.one_of(
    st.dictionaries(text, json_value, max_size=3).map(json.dumps),
    st.dictionaries(text, json_scalar, max_size=3).map(
        lambda d: json.dumps(d, separators=(",", ":"))
    ),
    st.sampled_from(['{"a": ', "[1, 2]", "", "null"]),
)
openai_call = st.builds(
    lambda call_id, name, arguments: {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    },
    ident,
    ident,
    openai_arguments,
)
openai_content = st.none() | text | st.lists(part, max_size=3)
openai_extra = st.dictionaries(
    st.sampled_from(["refusal", "reasoning_content", "audio", "x"]), json_value, max_size=2
)


def _openai(role: str, content: Any, extra: dict[str, Any], **fields: Any) -> dict[str, Any]:
    message = {"role": role, "content": content, **extra}
    message.update({k: v for k, v in fields.items() if v is not None})
    return message


openai_message = st.one_of(
    st.builds(
        _openai,
        st.sampled_from(["user", "system", "developer"]),
        openai_content,
        openai_extra,
        name=st.none() | ident,
        id=st.none() | ident,
    ),
    st.builds(
        _openai,
        st.just("assistant"),
        openai_content,
        openai_extra,
        id=st.none() | ident,
        tool_calls=st.none() | st.lists(openai_call, max_size=3),
    ),
    st.builds(_openai, st.just("tool"), openai_content, openai_extra, tool_call_id=ident),
)


@settings(max_examples=300, deadline=None)
@given(openai_message)
def test_openai_to_langchain_and_back_is_exact(message: dict[str, Any]) -> None:
    assert to_openai(from_openai(message)) == message


def test_a_tool_call_keeps_its_id_and_arguments_both_ways() -> None:
    call = {"name": "lookup", "args": {"path": "src/a.py", "line": 3}, "id": "call_7"}
    ai = AIMessage(content="", tool_calls=[call], id="run-1")
    result = ToolMessage(content="found", tool_call_id="call_7", id="t-1")
    messages = [to_openai(ai), to_openai(result)]
    validate_messages(messages)
    assert messages[0]["tool_calls"] == [
        {
            "id": "call_7",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"path": "src/a.py", "line": 3}'},
        }
    ]
    assert messages[1] == {
        "role": "tool",
        "content": "found",
        "id": "t-1",
        "tool_call_id": "call_7",
    }


def test_openai_fields_langchain_keeps_in_additional_kwargs_come_back_on_top() -> None:
    message = AIMessage(content="hi", additional_kwargs={"refusal": None, "tool_calls": []})
    converted = to_openai(message)
    assert converted["refusal"] is None
    assert "tool_calls" not in converted  # a LangChain field of that name wins
    assert from_openai(converted) == message


def test_an_engine_cut_wins_over_the_kept_original() -> None:
    message = HumanMessage(content=["look at this", {"type": "text", "text": "x" * 50}])
    converted = to_openai(message)
    converted["content"] = [{"type": "text", "text": "[cut]"}]
    assert from_openai(converted).content == [{"type": "text", "text": "[cut]"}]


def test_a_message_with_no_openai_role_is_refused_by_name() -> None:
    from langchain_core.messages import RemoveMessage

    with pytest.raises(Exception, match="remove"):
        to_openai(RemoveMessage(id="m1"))
