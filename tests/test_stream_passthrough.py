"""Streams are passed through as they arrive, never buffered: the proxy and contextengine.wrap.

The scripted upstream holds the last event of a streamed answer
(``hold_last_chunk``) until the test has seen the first piece of content
through the proxy (or the wrapped client). A relay that buffered the answer
would deliver nothing before the last event was sent, and the client would
time out: the test fails instead of hanging. No wall-clock time is measured.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import contextengine
from contextengine.testing import ScriptedOpenAIServer
from serve_support import FACT, SYSTEM, need, opened, proxy

ANSWER = "The deploy key is ZEBRA-4417-QUOKKA, as you said earlier."
#: Long enough for a loaded machine, short enough that a buffering relay fails the test soon.
CLIENT_TIMEOUT_S = 20.0


@pytest.fixture
def upstream() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as server:
        yield server


def _history() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": FACT},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Which key?"},
    ]


def _read_openai(chunks: Any, gate: threading.Event) -> str:
    """The streamed text; the gate opens at the first content, which must come before it."""
    pieces: list[str] = []
    for chunk in chunks:
        text = chunk.choices[0].delta.content if chunk.choices else None
        if text and not gate.is_set():
            gate.set()  # the upstream has not sent its last chunk yet: it waits for this
        pieces.append(text or "")
    return "".join(pieces)


def _read_anthropic(stream: Any, gate: threading.Event) -> str:
    pieces: list[str] = []
    for event in stream:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            gate.set()
            pieces.append(event.delta.text)
    return "".join(pieces)


@pytest.mark.parametrize("engine_round", [False, True], ids=["plain", "after-an-engine-round"])
def test_the_proxy_streams_openai_chunks_as_the_upstream_sends_them(
    upstream: ScriptedOpenAIServer, engine_round: bool
) -> None:
    openai = need("openai")
    gate = threading.Event()
    with proxy(upstream) as px:
        client = opened(
            openai.OpenAI(
                base_url=px.base_url, api_key="sk-test", max_retries=0, timeout=CLIENT_TIMEOUT_S
            )
        )
        if engine_round:
            grep = {"name": "lcm_grep", "arguments": {"query": "deploy"}}
            upstream.add_reply("", tool_calls=[grep])
        upstream.add_reply(ANSWER, hold_last_chunk=gate)
        chunks = client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "system", "content": SYSTEM}, *_history()],
            stream=True,
        )
        assert _read_openai(chunks, gate) == ANSWER
        assert gate.is_set()
        assert len(upstream.requests) == (2 if engine_round else 1)


def test_the_proxy_streams_anthropic_events_as_the_upstream_sends_them(
    upstream: ScriptedOpenAIServer,
) -> None:
    anthropic = need("anthropic")
    gate = threading.Event()
    with proxy(upstream) as px:
        client = opened(
            anthropic.Anthropic(
                base_url=px.url, api_key="sk-ant", max_retries=0, timeout=CLIENT_TIMEOUT_S
            )
        )
        upstream.add_reply(ANSWER, hold_last_chunk=gate, stream_delay_s=0.001)
        stream = client.messages.create(
            model="claude-test", max_tokens=256, system=SYSTEM, messages=_history(), stream=True
        )
        assert _read_anthropic(stream, gate) == ANSWER
        assert gate.is_set()


def test_wrap_streams_openai_chunks_as_the_upstream_sends_them(
    upstream: ScriptedOpenAIServer,
) -> None:
    openai = need("openai")
    gate = threading.Event()
    sdk = openai.OpenAI(
        base_url=upstream.base_url, api_key="sk-test", max_retries=0, timeout=CLIENT_TIMEOUT_S
    )
    client = contextengine.wrap(sdk, engine="lcm", session="s1", store=":memory:")
    with sdk, client:
        upstream.add_reply(ANSWER, hold_last_chunk=gate)
        chunks = client.chat.completions.create(model="gpt-4o", messages=_history(), stream=True)
        assert _read_openai(chunks, gate) == ANSWER


def test_wrap_streams_anthropic_events_as_the_upstream_sends_them(
    upstream: ScriptedOpenAIServer,
) -> None:
    anthropic = need("anthropic")
    gate = threading.Event()
    sdk = anthropic.Anthropic(
        base_url=upstream.url, api_key="sk-ant", max_retries=0, timeout=CLIENT_TIMEOUT_S
    )
    client = contextengine.wrap(sdk, engine="lcm", session="s1", store=":memory:")
    with sdk, client:
        upstream.add_reply(ANSWER, hold_last_chunk=gate)
        stream = client.messages.create(
            model="claude-test", max_tokens=256, messages=_history(), stream=True
        )
        assert _read_anthropic(stream, gate) == ANSWER
