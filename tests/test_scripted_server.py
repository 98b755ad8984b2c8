"""ScriptedOpenAIServer: the OpenAI-compatible test double users run their agents against."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contextengine.testing import ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as scripted:
        yield scripted


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as http:
        yield http


def _chat(client: httpx.Client, server: ScriptedOpenAIServer, **body: Any) -> httpx.Response:
    payload = {"model": "gpt-4o", "messages": MESSAGES, **body}
    return client.post(f"{server.base_url}/chat/completions", json=payload)


def _stream(client: httpx.Client, server: ScriptedOpenAIServer, **body: Any) -> list[Any]:
    payload = {"model": "gpt-4o", "messages": MESSAGES, "stream": True, **body}
    events: list[Any] = []
    with client.stream("POST", f"{server.base_url}/chat/completions", json=payload) as response:
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_reply_is_a_chat_completion_with_realistic_usage(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    server.add_reply("Sunny, 21 °C.")
    answer = _chat(client, server).json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "Sunny, 21 °C."}
    assert answer["choices"][0]["finish_reason"] == "stop"
    usage = answer["usage"]
    assert usage["prompt_tokens"] == count_message_tokens(MESSAGES, "gpt-4o")
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_scripted_usage_replaces_the_computed_one(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    usage = {"prompt_tokens": 100_000, "completion_tokens": 5, "total_tokens": 100_005}
    server.add_reply("ok", usage=usage)
    assert _chat(client, server).json()["usage"] == usage


def test_tool_call_reply(server: ScriptedOpenAIServer, client: httpx.Client) -> None:
    server.add_reply(None, tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    choice = _chat(client, server).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function"
    assert call["id"].startswith("call_")
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_streaming_sends_content_deltas_then_done(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    server.add_reply("It is sunny in Paris today.")
    events = _stream(client, server)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks)
    assert text == "It is sunny in Paris today."
    assert len(chunks) > 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert "usage" not in chunks[-1]


def test_streaming_tool_calls_and_usage(server: ScriptedOpenAIServer, client: httpx.Client) -> None:
    arguments = {"city": "Paris", "unit": "celsius", "days": 3}
    server.add_reply("", tool_calls=[{"id": "call_w1", "name": "forecast", "arguments": arguments}])
    events = _stream(client, server, stream_options={"include_usage": True})
    *chunks, usage_chunk, done = events
    assert done == "[DONE]"
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["prompt_tokens"] == count_message_tokens(MESSAGES, "gpt-4o")
    deltas = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert deltas[0]["id"] == "call_w1"
    assert deltas[0]["function"]["name"] == "forecast"
    joined = "".join(d["function"].get("arguments", "") for d in deltas)
    assert json.loads(joined) == arguments
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_records_every_request_with_headers(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    server.add_reply("one")
    server.add_reply("two")
    client.post(
        f"{server.base_url}/chat/completions",
        json={"model": "a", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-abc"},
    )
    _chat(client, server, temperature=0)
    assert [r["model"] for r in server.requests] == ["a", "gpt-4o"]
    assert server.requests[1]["temperature"] == 0
    assert server.recorded[0].headers["authorization"] == "Bearer sk-abc"
    assert server.pending == 0


def test_errors_carry_status_body_and_headers(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    server.add_error(429, headers={"Retry-After": "2"})
    response = _chat(client, server)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    assert response.json()["error"]["type"] == "rate_limit_exceeded"


def test_malformed_body_is_sent_as_is(server: ScriptedOpenAIServer, client: httpx.Client) -> None:
    server.add_malformed("not json at all")
    assert _chat(client, server).text == "not json at all"


def test_dropped_connection_gives_no_response(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    server.add_drop()
    server.add_reply("after")
    with pytest.raises(httpx.RemoteProtocolError):
        _chat(client, server)
    assert _chat(client, server).json()["choices"][0]["message"]["content"] == "after"


def test_delay_applies_to_the_next_item(server: ScriptedOpenAIServer, client: httpx.Client) -> None:
    server.add_delay(2.0)
    server.add_reply("slow")
    with pytest.raises(httpx.ReadTimeout):
        client.post(
            f"{server.base_url}/chat/completions",
            json={"model": "m", "messages": MESSAGES},
            timeout=0.1,
        )
    assert server.pending == 0


def test_fallbacks_responder_then_default_then_500() -> None:
    seen: list[int] = []

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(len(body["messages"]))
        return {"content": f"{len(body['messages'])} messages"}

    with httpx.Client(timeout=5.0) as client:
        with ScriptedOpenAIServer(responder=responder) as dynamic:
            assert _chat(client, dynamic).json()["choices"][0]["message"]["content"] == "1 messages"
        with ScriptedOpenAIServer(default_reply="default") as fixed:
            assert _chat(client, fixed).json()["choices"][0]["message"]["content"] == "default"
        with ScriptedOpenAIServer() as empty:
            response = _chat(client, empty)
            assert response.status_code == 500
            assert "script exhausted" in response.json()["error"]["message"]
    assert seen == [1]


def test_reasoning_is_returned_as_reasoning_content(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    server.add_reply("42", reasoning="think think")
    message = _chat(client, server).json()["choices"][0]["message"]
    assert message["reasoning_content"] == "think think"


def test_models_endpoint_and_unknown_routes(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    models = client.get(f"{server.base_url}/models").json()
    assert models["data"][0]["id"] == "scripted-model"
    assert client.post(f"{server.base_url}/embeddings", json={}).status_code == 404
    bad = client.post(f"{server.base_url}/chat/completions", content=b"{nope")
    assert bad.status_code == 400


def test_close_is_idempotent_and_frees_the_port() -> None:
    server = ScriptedOpenAIServer()
    server.close()
    server.close()
    with httpx.Client() as client, pytest.raises(httpx.ConnectError):
        client.get(f"{server.base_url}/models", timeout=1.0)


def test_a_held_stream_sends_everything_but_its_last_chunk_until_the_gate_opens(
    server: ScriptedOpenAIServer, client: httpx.Client
) -> None:
    gate = threading.Event()
    server.add_reply("one two three", hold_last_chunk=gate, stream_delay_s=0.001)
    seen: list[Any] = []
    payload = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    with client.stream("POST", f"{server.base_url}/chat/completions", json=payload) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            seen.append(data if data == "[DONE]" else json.loads(data))
            delta = seen[-1]["choices"][0]["delta"] if isinstance(seen[-1], dict) else {}
            if delta.get("content") == "three":
                # Every content chunk arrived; the last chunk (finish_reason) is held.
                seen.append("gate opened")
                gate.set()
    # Only the held chunk and the terminator came after the gate opened.
    assert seen.index("gate opened") == len(seen) - 3
    assert seen[-2]["choices"][0]["finish_reason"] == "stop" and seen[-1] == "[DONE]"


def test_closing_the_server_ends_a_stream_held_on_a_gate_nobody_opens() -> None:
    with ScriptedOpenAIServer() as server, httpx.Client(timeout=30) as http:
        server.add_reply("never finished", hold_last_chunk=threading.Event())
        payload = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
        with http.stream("POST", f"{server.base_url}/chat/completions", json=payload) as response:
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            server.close()  # returns: the held handler gives up when the server closes
            rest = list(lines)
    assert "data: [DONE]" not in rest
