"""contextengine serve with the Anthropic SDK as client, the scripted server speaking Messages."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from contextengine import from_anthropic, validate_messages
from contextengine.testing import ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens
from serve_support import FACT, SYSTEM, filler, need, opened, proxy, tool_results

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _client(px: Any, key: str = "sk-ant-client") -> Any:
    anthropic = need("anthropic")
    return opened(anthropic.Anthropic(base_url=px.url, api_key=key, max_retries=0, timeout=30))


def _ask(client: Any, history: list[dict[str, Any]], **kwargs: Any) -> tuple[Any, Any]:
    raw = client.messages.with_raw_response.create(
        model="claude-test", max_tokens=256, system=SYSTEM, messages=history, **kwargs
    )
    return raw.parse(), raw.headers


def test_a_long_conversation_is_compacted_and_an_lcm_round_finds_the_old_message() -> None:
    window = 3_000
    with (
        ScriptedOpenAIServer(default_reply="Noted.") as upstream,
        proxy(upstream, context_length=window) as px,
    ):
        client = _client(px)
        history: list[dict[str, Any]] = [{"role": "user", "content": FACT}]
        compactions = 0
        for turn in range(24):
            _answer, headers = _ask(client, history)
            compactions += int(headers["x-context-compactions"])
            history += [
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": filler(turn)},
            ]
        assert compactions > 0
        for body in upstream.requests:
            sent = from_anthropic(body["messages"], body.get("system"))
            assert count_message_tokens(sent) <= window

        history[-1] = {"role": "user", "content": "What was the staging deploy key?"}
        upstream.add_reply(
            None, tool_calls=[{"name": "lcm_grep", "arguments": {"query": "deploy key"}}]
        )
        upstream.add_reply("It is ZEBRA-4417-QUOKKA.")
        answer, headers = _ask(client, history)
        assert [block.type for block in answer.content] == ["text"]
        assert answer.content[0].text == "It is ZEBRA-4417-QUOKKA."
        assert answer.stop_reason == "end_turn"
        assert headers["x-context-engine-tool-calls"] == "1"
        assert any("4417-QUOKKA" in result for result in tool_results(upstream.requests[-1]))


def test_a_stream_is_the_anthropic_event_sequence_after_the_engine_round() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _client(px)
        history = [
            {"role": "user", "content": FACT},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Which key?"},
        ]
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "staging"}}])
        upstream.add_reply("The key is ZEBRA-4417-QUOKKA.")
        with client.messages.stream(
            model="claude-test", max_tokens=256, system=SYSTEM, messages=history
        ) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        assert final.content[0].text == "The key is ZEBRA-4417-QUOKKA."
        assert [b.type for b in final.content] == ["text"]
        assert final.stop_reason == "end_turn"
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert "content_block_delta" in kinds and "message_delta" in kinds
        assert any("4417-QUOKKA" in r for r in tool_results(upstream.requests[-1]))


def test_a_streamed_mixed_answer_shows_the_client_only_its_own_call() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _client(px)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
        upstream.add_reply(
            "Let me check.",
            tool_calls=[
                {"id": "toolu_engine", "name": "lcm_grep", "arguments": {"query": "Oslo"}},
                {"id": "toolu_client", "name": "get_weather", "arguments": {"city": "Oslo"}},
            ],
        )
        with client.messages.stream(
            model="claude-test", max_tokens=256, system=SYSTEM, messages=history, tools=[WEATHER]
        ) as stream:
            final = stream.get_final_message()
        assert [b.type for b in final.content] == ["text", "tool_use"]
        assert final.content[1].id == "toolu_client"
        assert final.stop_reason == "tool_use"

        history += [
            {"role": "assistant", "content": [b.model_dump() for b in final.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_client", "content": "Rain, 8C"}
                ],
            },
        ]
        upstream.add_reply("Rain in Oslo.")
        answer, _ = _ask(client, history, tools=[WEATHER])
        assert answer.content[0].text == "Rain in Oslo."
        sent = upstream.requests[-1]
        ours = from_anthropic(sent["messages"], sent.get("system"))
        validate_messages(ours)
        calls = next(m for m in ours if m.get("tool_calls"))["tool_calls"]
        assert [c["id"] for c in calls] == ["toolu_engine", "toolu_client"]
        assert [m["tool_call_id"] for m in ours if m["role"] == "tool"] == [
            "toolu_engine",
            "toolu_client",
        ]


def test_cache_breakpoints_sit_on_the_system_prompt_and_the_last_message_and_the_prefix_holds() -> (
    None
):
    with ScriptedOpenAIServer(default_reply="Fine.") as upstream, proxy(upstream) as px:
        client = _client(px)
        history: list[dict[str, Any]] = []
        for turn in range(3):
            history.append({"role": "user", "content": f"Question {turn}?"})
            _ask(client, history)
            history.append({"role": "assistant", "content": "Fine."})
        bodies = upstream.requests
        for body in bodies:
            assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
            assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
            marked = [
                block
                for message in body["messages"][:-1]
                for block in message["content"]
                if "cache_control" in block
            ]
            assert marked == []
        texts = [r.text for r in upstream.recorded if r.path.endswith("/messages")]
        for before, after in pairwise(texts):
            # Byte for byte up to the earlier request's last message, whose breakpoint moves on.
            cut = before.rfind('{"role":"user"')
            assert cut > 0 and after[:cut] == before[:cut]


@pytest.mark.parametrize("status", [400, 429, 500])
def test_an_upstream_error_reaches_the_anthropic_client_with_its_status(status: int) -> None:
    anthropic = need("anthropic")
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        upstream.add_error(status)
        with pytest.raises(anthropic.APIStatusError) as caught:
            _ask(_client(px), [{"role": "user", "content": "hi"}])
        assert caught.value.status_code == status
        assert caught.value.body["error"]["message"] == f"scripted error {status}"


def test_metadata_user_id_names_the_session() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _client(px)
        upstream.add_reply("Noted.")
        _ask(client, [{"role": "user", "content": FACT}], metadata={"user_id": "u-1"})
        found = []
        for user in ("u-2", "u-1"):
            grep = {"name": "lcm_grep", "arguments": {"query": "deploy key"}}
            upstream.add_reply("", tool_calls=[grep])
            upstream.add_reply("Done.")
            _ask(client, [{"role": "user", "content": "Key?"}], metadata={"user_id": user})
            found.append(any("4417" in r for r in tool_results(upstream.requests[-1])))
        assert found == [False, True]
