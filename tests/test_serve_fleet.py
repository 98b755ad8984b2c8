"""Two proxies sharing one PostgreSQL archive: a fleet serving one conversation between them.

Each proxy is a real server with its own sessions, its own pool and its own
turn-lock connection on the same schema (two processes as far as PostgreSQL
can tell); no sticky routing. The conversation goes back and forth between
them, and the same request goes to both at once: the turn lock serialises
them, a proxy that finds the session served elsewhere resumes it from the
archive, and the archive holds every message once, in order.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from contextengine.serve.sessions import session_key
from contextengine.testing import ScriptedOpenAIServer
from pg_support import drop_schema, fresh_schema, require_pg
from serve_support import FACT, SYSTEM, need, opened, parse_metrics, proxy

pytestmark = pytest.mark.postgres

KEY = "sk-fleet"
TICKET = "ticket-1"


@contextmanager
def archive_url() -> Iterator[str]:
    url = require_pg()
    schema = fresh_schema()
    try:
        yield f"{url}?schema={schema}"
    finally:
        drop_schema(schema)


def client(openai: Any, px: Any) -> Any:
    return opened(
        openai.OpenAI(
            base_url=px.base_url,
            api_key=KEY,
            max_retries=0,
            timeout=60,
            default_headers={"X-Context-Session": TICKET},
        )
    )


def archived(store_url: str) -> list[dict[str, Any]]:
    """The session's messages as the archive holds them, in order."""
    from contextengine.store.postgres import PostgresStore

    key = session_key({"authorization": f"Bearer {KEY}", "x-context-session": TICKET}, None, [])
    with PostgresStore(store_url) as store:
        cid = store.open_conversation(key)
        return [m.message for m in store.get_messages(cid)]


def metric(px: Any, name: str) -> float:
    with urllib.request.urlopen(px.url + "/metrics", timeout=10) as response:
        values = parse_metrics(response.read().decode())
    return values.get(f"contextengine_serve_{name}", 0.0)


def test_a_session_moves_between_two_proxies_on_one_postgres_archive() -> None:
    openai = need("openai")
    with (
        archive_url() as store,
        ScriptedOpenAIServer() as upstream,
        proxy(upstream, store=store) as first,
        proxy(upstream, store=store) as second,
    ):
        history: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": FACT},
        ]
        upstream.add_reply("Noted.")
        client(openai, first).chat.completions.create(model="gpt-4o", messages=history)
        history += [
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "The key, please?"},
        ]
        upstream.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "deploy"}}])
        upstream.add_reply("ZEBRA-4417-QUOKKA")
        answer = client(openai, second).chat.completions.create(model="gpt-4o", messages=history)
        assert answer.choices[0].message.content == "ZEBRA-4417-QUOKKA"
        found = upstream.requests[-1]["messages"][-1]
        assert found["role"] == "tool" and "4417-QUOKKA" in found["content"]


def test_alternating_proxies_see_each_others_turns_and_archive_each_message_once() -> None:
    """B served the session, A added an engine round B never saw: B's next view carries it."""
    openai = need("openai")
    with archive_url() as store:
        _alternate(openai, store)


def _alternate(openai: Any, store: str) -> None:
    with (
        ScriptedOpenAIServer() as upstream,
        proxy(upstream, store=store) as a,
        proxy(upstream, store=store) as b,
    ):
        history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]

        def turn(px: Any, text: str, *replies: dict[str, Any], stream: bool = False) -> str:
            for reply in replies:
                upstream.add_reply(**reply)
            history.append({"role": "user", "content": text})
            sdk = client(openai, px)
            if stream:
                chunks = sdk.chat.completions.create(model="gpt-4o", messages=history, stream=True)
                answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                reply_ = sdk.chat.completions.create(model="gpt-4o", messages=history)
                answer = reply_.choices[0].message.content or ""
            history.append({"role": "assistant", "content": answer})
            return answer

        turn(a, "Hello there.", {"content": "Hello."})
        turn(b, FACT, {"content": "Noted."})  # B's first request: resumed from A's turn
        grep = {"name": "lcm_grep", "arguments": {"query": "deploy key"}, "id": "call_fleet_1"}
        answer = turn(a, "The key, please?", {"tool_calls": [grep]}, {"content": "ZEBRA-4417"})
        assert answer == "ZEBRA-4417"
        # lcm_grep through A found what the client said through B.
        assert "4417-QUOKKA" in upstream.requests[-1]["messages"][-1]["content"]
        assert b.app.state.proxy.fleet.resumed == 0
        turn(b, "Thanks. Anything else?", {"content": "No."}, stream=True)
        # B served the session before A's engine round: it rebuilt its view from the archive.
        assert b.app.state.proxy.fleet.resumed == 1
        view = upstream.requests[-1]["messages"]
        calls = [m for m in view if m.get("tool_calls")]
        results = [m for m in view if m.get("role") == "tool"]
        assert calls and calls[0]["tool_calls"][0]["id"] == "call_fleet_1"
        assert results and "4417-QUOKKA" in results[0]["content"]
        turn(a, "Bye.", {"content": "Bye."})
        assert a.app.state.proxy.fleet.resumed == 2  # after B's turns 2 and 4

    texts = [(m["role"], m.get("content") or "") for m in archived(store)]
    users = [t for role, t in texts if role == "user"]
    assert users == [m["content"] for m in history if m["role"] == "user"]
    assert [role for role, _t in texts] == [
        *["system", "user", "assistant", "user", "assistant", "user"],
        *["assistant", "tool", "assistant", "user", "assistant", "user", "assistant"],
    ]
    assert texts[-1] == ("assistant", "Bye.")


def test_the_same_request_sent_to_both_proxies_at_once_is_served_one_at_a_time() -> None:
    """A hedged request: both proxies get it at the same moment; the turn lock serialises them."""
    openai = need("openai")
    in_flight = 0
    overlapped = 0
    guard = threading.Lock()
    proxies: list[Any] = []

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal in_flight, overlapped
        with guard:
            in_flight += 1
            overlapped = max(overlapped, in_flight)
            first = in_flight == 1 and len(proxies) == 2
        if first and len(body["messages"]) > 3:
            # Hold the first of the pair upstream until the other proxy shows its request
            # waiting on the session's lock: the lock, not timing, kept them apart.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if sum(metric(px, "turn_lock_contended_total") for px in proxies) >= 1:
                    break
                time.sleep(0.02)
        with guard:
            in_flight -= 1
        return {"content": "Answer to " + json.dumps(body["messages"][-1]["content"])[:40]}

    with archive_url() as store:
        _hedge(openai, store, responder, proxies)
        assert overlapped == 1, "two requests of one session were upstream at the same time"
        users = [m.get("content") for m in archived(store) if m["role"] == "user"]
    assert users == [FACT, "Repeat the key.", "Thanks."], "a user message archived twice or lost"


def _hedge(openai: Any, store: str, responder: Any, proxies: list[Any]) -> None:
    with (
        ScriptedOpenAIServer(responder=responder) as upstream,
        proxy(upstream, store=store) as a,
        proxy(upstream, store=store) as b,
    ):
        history: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": FACT},
        ]
        first = client(openai, a).chat.completions.create(model="gpt-4o", messages=history)
        history += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "Repeat the key."},
        ]
        proxies += [a, b]
        answers: dict[str, str] = {}
        start = threading.Barrier(2)

        def send(name: str, px: Any) -> None:
            sdk = client(openai, px)
            start.wait(10)
            reply = sdk.chat.completions.create(model="gpt-4o", messages=history)
            answers[name] = reply.choices[0].message.content or ""

        threads = [threading.Thread(target=send, args=pair) for pair in (("a", a), ("b", b))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(answers) == ["a", "b"], "a request of the pair failed"
        assert sum(metric(px, "turn_lock_contended_total") for px in (a, b)) >= 1
        assert sum(metric(px, "sessions_resumed_total") for px in (a, b)) >= 1
        # The conversation goes on through either proxy.
        history += [
            {"role": "assistant", "content": answers["a"]},
            {"role": "user", "content": "Thanks."},
        ]
        client(openai, b).chat.completions.create(model="gpt-4o", messages=history)


def test_a_session_locked_elsewhere_for_too_long_fails_open_and_is_counted() -> None:
    openai = need("openai")
    from contextengine.store.postgres import PostgresStore

    with (
        archive_url() as store,
        PostgresStore(store) as other_process,
        ScriptedOpenAIServer(default_reply="Fine.") as upstream,
        proxy(upstream, store=store) as px,
    ):
        fleet = px.app.state.proxy.fleet
        fleet.wait_s = 0.2
        headers = {"authorization": f"Bearer {KEY}", "x-context-session": TICKET}
        assert other_process.try_turn_lock(session_key(headers, None, []))
        history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FACT}]
        raw = client(openai, px).chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history
        )
        assert raw.headers["x-context-fail-open"] == "FleetLockTimeout"
        assert raw.parse().choices[0].message.content == "Fine."
        assert "tools" not in upstream.requests[-1], "the engine ran without the lock"
        assert metric(px, "turn_lock_contended_total") == 1
        other_process.release_turn_lock(session_key(headers, None, []))
        raw = client(openai, px).chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history
        )
        assert "x-context-fail-open" not in raw.headers
        assert "tools" in upstream.requests[-1]  # lcm's tools: the engine is back


def test_many_sessions_across_both_proxies_at_once_hold_no_pooled_connection() -> None:
    """12 sessions in flight at once on pools of 4: held turns borrow no pool slot.

    Were the turn locks on pooled connections, the fourth holder would leave
    none for the archive's own writes: requests would wait for the pool's
    timeout and fail open. Every request here is served by the engine.
    """
    openai = need("openai")
    sessions, turns = 12, 4

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.05)  # an upstream that takes a while: the turns of all sessions overlap
        return {"content": f"ok {len(body['messages'])}"}

    failures: list[str] = []
    with (
        archive_url() as store,
        ScriptedOpenAIServer(responder=responder) as upstream,
        proxy(upstream, store=store) as a,
        proxy(upstream, store=store) as b,
    ):

        def converse(index: int) -> None:
            history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
            sdks = [
                opened(
                    openai.OpenAI(
                        base_url=px.base_url,
                        api_key=KEY,
                        max_retries=0,
                        timeout=60,
                        default_headers={"X-Context-Session": f"many-{index}"},
                    )
                )
                for px in (a, b)
            ]
            try:
                for turn in range(turns):
                    history.append({"role": "user", "content": f"session{index}: turn {turn}"})
                    sdk = sdks[(index + turn) % 2]  # every session alternates between proxies
                    raw = sdk.chat.completions.with_raw_response.create(
                        model="gpt-4o", messages=history
                    )
                    if "x-context-fail-open" in raw.headers:
                        failures.append(f"session {index} turn {turn}: fail-open")
                    answer = raw.parse().choices[0].message.content
                    history.append({"role": "assistant", "content": answer})
            except Exception as exc:
                failures.append(f"session {index}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=converse, args=(i,)) for i in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not failures, failures
        assert len(upstream.requests) == sessions * turns
        # Every session moved at every turn: each turn after the first resumed from the archive.
        resumed = sum(metric(px, "sessions_resumed_total") for px in (a, b))
        assert resumed == sessions * (turns - 2)
