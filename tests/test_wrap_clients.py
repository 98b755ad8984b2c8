"""contextengine.wrap: the real OpenAI and Anthropic SDK clients, with the host inside.

The wrapped client talks to the scripted server through the SDK's own
transport; the caller keeps sending its whole history, as with the plain SDK.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import contextengine
from contextengine import validate_messages
from contextengine.testing import ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens
from serve_support import FACT, SYSTEM, filler, need


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(default_reply="Noted.") as server:
        yield server


def _openai(upstream: ScriptedOpenAIServer, **options: Any) -> Any:
    openai = need("openai")
    sdk = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test", max_retries=0)
    return contextengine.wrap(sdk, engine="lcm", session="s1", store=":memory:", **options), sdk


def test_importing_contextengine_imports_no_sdk() -> None:
    code = (
        "import sys, contextengine; contextengine.wrap;"
        "names = ('openai', 'anthropic', 'starlette', 'uvicorn');"
        "print(sorted(m for m in names if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_wrap_refuses_what_is_not_an_sdk_client() -> None:
    with pytest.raises(TypeError, match="OpenAI or Anthropic SDK client"):
        contextengine.wrap(object())


def test_openai_sync_compacts_and_answers_an_lcm_round(upstream: ScriptedOpenAIServer) -> None:
    client, sdk = _openai(upstream, context_length=3_000)
    with sdk, client:
        history: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": FACT},
        ]
        compactions = 0
        for turn in range(24):
            answer = client.chat.completions.create(model="gpt-4o", messages=history)
            assert answer.choices[0].message.content == "Noted."
            compactions += client.last_actions.compactions
            history += [
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": filler(turn)},
            ]
        assert compactions > 0
        assert (
            count_message_tokens(upstream.requests[-1]["messages"])
            <= 3_000
            < (count_message_tokens(history))
        )
        history[-1] = {"role": "user", "content": "The staging deploy key?"}
        upstream.add_reply(
            None, tool_calls=[{"name": "lcm_grep", "arguments": {"query": "deploy"}}]
        )
        upstream.add_reply("ZEBRA-4417-QUOKKA.")
        answer = client.chat.completions.create(model="gpt-4o", messages=history)
        assert type(answer).__name__ == "ChatCompletion"
        assert answer.choices[0].message.content == "ZEBRA-4417-QUOKKA."
        assert answer.choices[0].message.tool_calls is None
        assert client.last_actions.engine_tool_calls == 1
        assert "4417-QUOKKA" in upstream.requests[-1]["messages"][-1]["content"]
        assert client.models.list().data[0].id == "scripted-model"  # the rest is the SDK's


def test_openai_sync_stream_after_an_engine_round(upstream: ScriptedOpenAIServer) -> None:
    client, sdk = _openai(upstream)
    with sdk, client:
        history = [
            {"role": "user", "content": FACT},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": "Which key?"},
        ]
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "staging"}}])
        upstream.add_reply("The key is ZEBRA-4417-QUOKKA.")
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
        assert type(chunks[0]).__name__ == "ChatCompletionChunk"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "The key is ZEBRA-4417-QUOKKA."
        assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        assert "4417-QUOKKA" in upstream.requests[-1]["messages"][-1]["content"]


def test_openai_async_whole_and_streamed(upstream: ScriptedOpenAIServer) -> None:
    openai = need("openai")

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(
            base_url=upstream.base_url, api_key="sk-test", max_retries=0
        ) as sdk:
            client = contextengine.wrap(sdk, session="async-1", store=":memory:")
            history: list[dict[str, Any]] = [{"role": "user", "content": FACT}]
            upstream.add_reply(
                "", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "ZEBRA"}}]
            )
            upstream.add_reply("Whole answer.")
            whole = await client.chat.completions.create(model="gpt-4o", messages=history)
            history += [
                {"role": "assistant", "content": "Whole answer."},
                {"role": "user", "content": "Again, streamed."},
            ]
            upstream.add_reply("Streamed answer.")
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=history, stream=True
            )
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            await client.aclose()
            return str(whole.choices[0].message.content), "".join(pieces)

    whole, streamed = asyncio.run(run())
    assert (whole, streamed) == ("Whole answer.", "Streamed answer.")
    # The second request carried the engine round of the first, paired.
    sent = upstream.requests[-1]["messages"]
    validate_messages(sent)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]


def test_anthropic_whole_and_streamed_with_an_engine_round(upstream: ScriptedOpenAIServer) -> None:
    anthropic = need("anthropic")
    with anthropic.Anthropic(base_url=upstream.url, api_key="sk-ant", max_retries=0) as sdk:
        client = contextengine.wrap(sdk, engine="lcm", session="claude-1", store=":memory:")
        history: list[dict[str, Any]] = [{"role": "user", "content": FACT}]
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "staging"}}])
        upstream.add_reply("Found it.")
        answer = client.messages.create(
            model="claude-test", max_tokens=100, system=SYSTEM, messages=history
        )
        assert type(answer).__name__ == "Message"
        assert [b.type for b in answer.content] == ["text"]
        assert answer.content[0].text == "Found it."
        assert answer.stop_reason == "end_turn"
        assert client.last_actions.engine_tool_calls == 1

        history += [
            {"role": "assistant", "content": "Found it."},
            {"role": "user", "content": "Stream the key."},
        ]
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "QUOKKA"}}])
        upstream.add_reply("ZEBRA-4417-QUOKKA")
        events = list(
            client.messages.create(
                model="claude-test", max_tokens=100, system=SYSTEM, messages=history, stream=True
            )
        )
        kinds = [e.type for e in events]
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
        assert text == "ZEBRA-4417-QUOKKA"
        assert not any(
            e.type == "content_block_start" and e.content_block.type == "tool_use" for e in events
        )
        body = upstream.requests[-1]
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        client.close()


def test_anthropic_async_streamed(upstream: ScriptedOpenAIServer) -> None:
    anthropic = need("anthropic")

    async def run() -> str:
        async with anthropic.AsyncAnthropic(
            base_url=upstream.url, api_key="sk-ant", max_retries=0
        ) as sdk:
            client = contextengine.wrap(sdk, session="claude-async", store=":memory:")
            grep = {"name": "lcm_grep", "arguments": {"query": "staging"}}
            upstream.add_reply("", tool_calls=[grep])
            upstream.add_reply("Streamed after the round.")
            stream = await client.messages.create(
                model="claude-test",
                max_tokens=100,
                messages=[{"role": "user", "content": FACT}],
                stream=True,
            )
            text = "".join([e.delta.text async for e in stream if e.type == "content_block_delta"])
            await client.aclose()
            return text

    assert asyncio.run(run()) == "Streamed after the round."
    assert len(upstream.requests) == 2 and all(b["stream"] for b in upstream.requests)
