"""ScriptedOpenAIServer's Anthropic side: POST /v1/messages from the same script."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from contextengine.testing import ScriptedOpenAIServer
from serve_support import need

BODY: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 100,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "Weather in Rome?"}],
}


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_reply_with_a_tool_call_is_a_message_with_a_tool_use_block() -> None:
    with ScriptedOpenAIServer() as server:
        server.add_reply(
            "Checking.",
            tool_calls=[{"id": "toolu_1", "name": "weather", "arguments": {"city": "Rome"}}],
        )
        message = httpx.post(server.url + "/v1/messages", json=BODY).json()
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Rome"}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["input_tokens"] > 0 and message["usage"]["output_tokens"] > 0
    assert server.requests == [BODY]


def test_a_streamed_reply_is_anthropics_event_sequence() -> None:
    with ScriptedOpenAIServer() as server:
        server.add_reply(
            "Sunny and warm.",
            reasoning="Rome in June.",
            tool_calls=[{"id": "toolu_2", "name": "weather", "arguments": {"c": 1}}],
        )
        response = httpx.post(server.url + "/v1/messages", json={**BODY, "stream": True})
    assert response.headers["content-type"] == "text/event-stream"
    events = _events(response.text)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in events)
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    text = "".join(
        d["delta"]["text"] for n, d in events if d.get("delta", {}).get("type") == "text_delta"
    )
    assert text == "Sunny and warm."
    arguments = "".join(
        d["delta"]["partial_json"]
        for n, d in events
        if d.get("delta", {}).get("type") == "input_json_delta"
    )
    assert json.loads(arguments) == {"c": 1}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_errors_on_the_messages_path_have_anthropics_shape() -> None:
    with ScriptedOpenAIServer() as server:
        server.add_error(429)
        response = httpx.post(server.url + "/v1/messages", json=BODY)
        assert response.status_code == 429
        assert response.json() == {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "scripted error 429"},
        }
        # Exhausted script: a loud 500, as on the chat path.
        assert httpx.post(server.url + "/v1/messages", json=BODY).status_code == 500


def test_the_anthropic_sdk_reads_it() -> None:
    anthropic = need("anthropic")
    with (
        ScriptedOpenAIServer() as server,
        anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0) as client,
    ):
        server.add_reply("Hello.")
        with client.messages.stream(**BODY) as stream:
            final = stream.get_final_message()
        assert final.content[0].text == "Hello."
        assert final.stop_reason == "end_turn"


def test_a_held_anthropic_stream_keeps_message_stop_until_the_gate_opens() -> None:
    gate = threading.Event()
    names: list[str] = []
    with ScriptedOpenAIServer() as server, httpx.Client(timeout=30) as http:
        server.add_reply("Sunny and warm.", hold_last_chunk=gate, stream_delay_s=0.001)
        body = {**BODY, "stream": True}
        with http.stream("POST", server.url + "/v1/messages", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("event: "):
                    names.append(line[len("event: ") :])
                    if names[-1] == "message_delta":
                        names.append("gate opened")
                        gate.set()
    assert names[-3:] == ["message_delta", "gate opened", "message_stop"]
    assert names.count("content_block_delta") == 3
