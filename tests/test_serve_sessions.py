"""contextengine serve: which session a request reaches, and who may reach it.

Isolation is checked the way a user would notice a leak: a session's
``lcm_grep`` must never find what was said in another.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from contextengine.testing import ScriptedOpenAIServer
from serve_support import SYSTEM, need, opened, proxy

SECRET = "The vault code is ORCHID-8812."


def _openai(px: Any, key: str, **headers: str) -> Any:
    openai = need("openai")
    return opened(
        openai.OpenAI(
            base_url=px.base_url, api_key=key, max_retries=0, timeout=30, default_headers=headers
        )
    )


def _grep_finds_secret(client: Any, upstream: ScriptedOpenAIServer, **kwargs: Any) -> bool:
    """Ask, in the client's session, for an lcm_grep of the secret; whether it found it."""
    upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "ORCHID"}}])
    upstream.add_reply("Done.")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Code?"}],
        **kwargs,
    )
    result = upstream.requests[-1]["messages"][-1]
    assert result["role"] == "tool"
    return "8812" in result["content"]


def _tell_secret(client: Any, upstream: ScriptedOpenAIServer, **kwargs: Any) -> None:
    upstream.add_reply("Noted.")
    client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": SECRET}],
        **kwargs,
    )


def test_the_session_header_separates_conversations_and_joins_them() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        alice = _openai(px, "sk-same", **{"X-Context-Session": "alice"})
        bob = _openai(px, "sk-same", **{"X-Context-Session": "bob"})
        _tell_secret(alice, upstream)
        assert not _grep_finds_secret(bob, upstream)
        assert _grep_finds_secret(alice, upstream)


def test_the_same_session_key_under_two_credentials_is_two_sessions() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        mine = _openai(px, "sk-mine", **{"X-Context-Session": "shared-name"})
        theirs = _openai(px, "sk-theirs", **{"X-Context-Session": "shared-name"})
        _tell_secret(mine, upstream)
        assert not _grep_finds_secret(theirs, upstream)
        assert _grep_finds_secret(mine, upstream)


def test_the_openai_user_field_names_the_session() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _openai(px, "sk-one")
        _tell_secret(client, upstream, user="u-17")
        assert _grep_finds_secret(client, upstream, user="u-17")
        assert not _grep_finds_secret(client, upstream, user="u-18")


def test_without_a_key_the_first_messages_name_the_session() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        client = _openai(px, "sk-one")
        first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SECRET}]
        _tell_secret(client, upstream)
        # The same conversation going on: same system prompt and first user message.
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "ORCHID"}}])
        upstream.add_reply("Done.")
        client.chat.completions.create(
            model="gpt-4o",
            messages=[
                *first,
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "Code?"},
            ],
        )
        assert "8812" in upstream.requests[-1]["messages"][-1]["content"]
        # Another conversation (another first message) is another session.
        assert not _grep_finds_secret(client, upstream)


def test_with_an_api_key_a_client_without_it_is_refused() -> None:
    openai = need("openai")
    with (
        ScriptedOpenAIServer(default_reply="Hi.") as upstream,
        proxy(upstream, api_key="proxy-key", upstream_api_key="sk-upstream") as px,
    ):
        with pytest.raises(openai.AuthenticationError) as caught:
            _openai(px, "wrong-key").chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == 401
        assert httpx.post(px.base_url + "/chat/completions", json={}).status_code == 401
        assert upstream.requests == []  # nothing went upstream

        answer = _openai(px, "proxy-key").chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
        assert answer.choices[0].message.content == "Hi."
        # Upstream gets the proxy's upstream key, never the client's key.
        assert upstream.recorded[-1].headers["authorization"] == "Bearer sk-upstream"

        anthropic = need("anthropic")
        claude = opened(anthropic.Anthropic(base_url=px.url, api_key="proxy-key", max_retries=0))
        reply = claude.messages.create(
            model="claude-test", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.content[0].text == "Hi."
        assert upstream.recorded[-1].headers["x-api-key"] == "sk-upstream"
        assert "authorization" not in upstream.recorded[-1].headers


def test_without_proxy_keys_the_clients_credential_goes_upstream() -> None:
    with ScriptedOpenAIServer(default_reply="Hi.") as upstream, proxy(upstream) as px:
        _openai(px, "sk-client-own").chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
        assert upstream.recorded[-1].headers["authorization"] == "Bearer sk-client-own"


def test_logs_at_the_default_level_hold_no_key_and_no_message_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    with (
        ScriptedOpenAIServer(default_reply="Hi.") as upstream,
        proxy(upstream, upstream_api_key="sk-upstream-secret", context_length=3_000) as px,
    ):
        client = _openai(px, "sk-client-secret", **{"X-Context-Session": "session-name-77"})
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        for turn in range(12):
            history.append({"role": "user", "content": f"{SECRET} turn {turn} " + "word " * 150})
            client.chat.completions.create(model="gpt-4o", messages=history)
            history.append({"role": "assistant", "content": "Hi."})
    logged = caplog.text
    assert "chat_completions 200" in logged  # the proxy does log its requests
    for secret in ("sk-client-secret", "sk-upstream-secret", "ORCHID", "session-name-77"):
        assert secret not in logged


def test_healthz_and_models_pass_through() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream) as px:
        assert httpx.get(px.url + "/healthz").json()["status"] == "ok"
        models = _openai(px, "sk-one").models.list()
        assert [m.id for m in models.data] == ["scripted-model"]


def test_evicted_sessions_end_and_resume_from_the_archive() -> None:
    with ScriptedOpenAIServer() as upstream, proxy(upstream, max_sessions=1) as px:
        first = _openai(px, "sk-one", **{"X-Context-Session": "first"})
        second = _openai(px, "sk-one", **{"X-Context-Session": "second"})
        _tell_secret(first, upstream)
        _tell_secret(second, upstream)  # evicts "first": its engine stores what is left
        metrics = httpx.get(px.url + "/metrics").text
        assert "contextengine_serve_sessions_evicted_total 1" in metrics
        assert _grep_finds_secret(first, upstream)  # resumed from the shared archive
