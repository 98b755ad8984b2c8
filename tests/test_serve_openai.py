"""contextengine serve with the OpenAI SDK as client: compaction, engine-tool rounds, streaming.

The proxy is a real server in front of the scripted upstream; the client
keeps and resends its whole history, as clients do.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import pytest

from contextengine import validate_messages
from contextengine.testing import ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens
from contextengine.window import count_schemas
from serve_support import FACT, SYSTEM, filler, need, opened, proxy

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _client(px: Any, key: str = "sk-client-a") -> Any:
    openai = need("openai")
    return opened(openai.OpenAI(base_url=px.base_url, api_key=key, max_retries=0, timeout=30))


def _chat(client: Any, history: list[dict[str, Any]], **kwargs: Any) -> tuple[Any, Any]:
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, **kwargs
    )
    return raw.parse(), raw.headers


@pytest.mark.parametrize("engine", ["lcm", "compressor"])
def test_a_long_conversation_is_compacted_and_every_request_fits_the_window(engine: str) -> None:
    window = 3_000
    with (
        ScriptedOpenAIServer(default_reply="Noted.") as upstream,
        proxy(upstream, engine=engine, context_length=window) as px,
    ):
        client = _client(px)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        compactions = 0
        for turn in range(24):
            history.append({"role": "user", "content": filler(turn)})
            answer, headers = _chat(client, history)
            assert answer.choices[0].message.content == "Noted."
            compactions += int(headers["x-context-compactions"])
            history.append({"role": "assistant", "content": "Noted."})
        assert compactions > 0
        for body in upstream.requests:
            size = count_message_tokens(body["messages"], "gpt-4o")
            assert size + count_schemas(body.get("tools"), "gpt-4o") <= window
        last = upstream.requests[-1]["messages"]
        # The client's history outgrew the window; what went upstream did not.
        assert count_message_tokens(history) > window > count_message_tokens(last)
        # The newest request is always there, verbatim.
        assert last[-1] == {"role": "user", "content": filler(23)}


def _long_chat_with_fact(client: Any, upstream: ScriptedOpenAIServer) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FACT},
    ]
    upstream.add_reply("Noted.")
    _chat(client, history)
    history.append({"role": "assistant", "content": "Noted."})
    for turn in range(16):
        history.append({"role": "user", "content": filler(turn)})
        upstream.add_reply("Noted.")
        _chat(client, history)
        history.append({"role": "assistant", "content": "Noted."})
    return history


def test_an_lcm_tool_call_is_answered_by_the_proxy_and_the_client_sees_only_the_answer() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream, context_length=2_000) as px:
        client = _client(px)
        history = _long_chat_with_fact(client, upstream)
        history.append({"role": "user", "content": "What was the staging deploy key?"})
        upstream.add_reply(
            None, tool_calls=[{"name": "lcm_grep", "arguments": {"query": "deploy key staging"}}]
        )
        upstream.add_reply("It is ZEBRA-4417-QUOKKA.")
        answer, headers = _chat(client, history)

        message = answer.choices[0].message
        assert message.content == "It is ZEBRA-4417-QUOKKA."
        assert not message.tool_calls
        assert answer.choices[0].finish_reason == "stop"
        assert headers["x-context-engine-tool-calls"] == "1"
        # The upstream got the grep's result, and it found the message.
        follow_up = upstream.requests[-1]["messages"]
        assert follow_up[-1]["role"] == "tool"
        assert "ZEBRA-4417-QUOKKA" in follow_up[-1]["content"]
        assert follow_up[-2]["tool_calls"][0]["function"]["name"] == "lcm_grep"
        validate_messages(follow_up)


def test_a_streamed_answer_comes_after_the_engine_round_and_without_its_call() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _client(px)
        history = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": FACT},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Which key was it?"},
        ]
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "ZEBRA"}}])
        upstream.add_reply("The key is ZEBRA-4417-QUOKKA.")
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))

        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "The key is ZEBRA-4417-QUOKKA."
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert all(body["stream"] for body in upstream.requests)
        assert "4417-QUOKKA" in upstream.requests[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_response_mixing_engine_and_client_calls_loses_neither(stream: bool) -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _client(px)
        history: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Weather in Paris, and did I mention a key?"},
        ]
        upstream.add_reply(
            "",
            tool_calls=[
                {"id": "call_engine", "name": "lcm_grep", "arguments": {"query": "key"}},
                {"id": "call_client", "name": "get_weather", "arguments": {"city": "Paris"}},
            ],
        )
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model="gpt-4o", messages=history, tools=[WEATHER_TOOL], stream=True
                )
            )
            calls = [
                call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []
            ]
            assert {call.index for call in calls} == {0}
            assert [call.id for call in calls if call.id] == ["call_client"]
            assert chunks[-1].choices[0].finish_reason == "tool_calls"
        else:
            answer, _ = _chat(client, history, tools=[WEATHER_TOOL])
            calls = answer.choices[0].message.tool_calls
            assert [call.id for call in calls] == ["call_client"]
            assert answer.choices[0].finish_reason == "tool_calls"

        # The client answers its own call and comes back.
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_client",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": "call_client", "content": "Sunny, 21C"})
        upstream.add_reply("Sunny in Paris; no key was mentioned.")
        answer, _ = _chat(client, history, tools=[WEATHER_TOOL])
        assert answer.choices[0].message.content == "Sunny in Paris; no key was mentioned."

        sent = upstream.requests[-1]["messages"]
        validate_messages(sent)
        assistant = next(m for m in sent if m.get("tool_calls"))
        assert [c["id"] for c in assistant["tool_calls"]] == ["call_engine", "call_client"]
        answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
        assert answered == ["call_engine", "call_client"]


@pytest.mark.parametrize("engine", ["lcm", "compressor"])
def test_the_request_prefix_is_byte_stable_between_turns(engine: str) -> None:
    with (
        ScriptedOpenAIServer(default_reply="Fine.") as upstream,
        proxy(upstream, engine=engine) as px,
    ):
        client = _client(px)
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for turn in range(4):
            history.append({"role": "user", "content": f"Question {turn}?"})
            _chat(client, history, temperature=0.2)
            history.append({"role": "assistant", "content": "Fine."})
        texts = [r.text for r in upstream.recorded if r.path.endswith("/chat/completions")]
        assert len(texts) == 4
        for before, after in pairwise(texts):
            # The messages array comes last: the whole earlier request, but for its
            # closing "]}", is the start of the next one, byte for byte.
            assert before.endswith("]}")
            assert after.startswith(before[:-2])
            assert (
                json.loads(after)["messages"][: len(json.loads(before)["messages"])]
                == (json.loads(before)["messages"])
            )


def test_a_client_tool_named_like_an_engine_tool_is_the_clients() -> None:
    mine = {
        "type": "function",
        "function": {"name": "lcm_grep", "parameters": {"type": "object", "properties": {}}},
    }
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _client(px)
        upstream.add_reply("", tool_calls=[{"id": "c1", "name": "lcm_grep", "arguments": {}}])
        answer, _ = _chat(client, [{"role": "user", "content": "search"}], tools=[mine])
        assert [c.id for c in answer.choices[0].message.tool_calls] == ["c1"]
        names = [t["function"]["name"] for t in upstream.requests[-1]["tools"]]
        assert names.count("lcm_grep") == 1
        assert upstream.requests[-1]["tools"][0] == mine
