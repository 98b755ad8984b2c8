"""Two proxies sharing one PostgreSQL archive: a fleet serving one conversation between them.

Each proxy is a real server with its own sessions and its own pool on the
same schema; the conversation starts on one and goes on on the other, which
resumes it from the archive (its lcm_grep finds what was said to the first).
"""

from __future__ import annotations

from typing import Any

import pytest

from contextengine.testing import ScriptedOpenAIServer
from pg_support import drop_schema, fresh_schema, require_pg
from serve_support import FACT, SYSTEM, need, opened, proxy

pytestmark = pytest.mark.postgres


def test_a_session_moves_between_two_proxies_on_one_postgres_archive() -> None:
    openai = need("openai")
    url = require_pg()
    schema = fresh_schema()
    store = f"{url}?schema={schema}"
    try:
        with (
            ScriptedOpenAIServer() as upstream,
            proxy(upstream, store=store) as first,
            proxy(upstream, store=store) as second,
        ):

            def client(px: Any) -> Any:
                return opened(
                    openai.OpenAI(
                        base_url=px.base_url,
                        api_key="sk-fleet",
                        max_retries=0,
                        default_headers={"X-Context-Session": "ticket-1"},
                    )
                )

            history: list[dict[str, Any]] = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": FACT},
            ]
            upstream.add_reply("Noted.")
            client(first).chat.completions.create(model="gpt-4o", messages=history)
            history += [
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "The key, please?"},
            ]
            upstream.add_reply(
                "", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "deploy"}}]
            )
            upstream.add_reply("ZEBRA-4417-QUOKKA")
            answer = client(second).chat.completions.create(model="gpt-4o", messages=history)
            assert answer.choices[0].message.content == "ZEBRA-4417-QUOKKA"
            found = upstream.requests[-1]["messages"][-1]
            assert found["role"] == "tool" and "4417-QUOKKA" in found["content"]
    finally:
        drop_schema(schema)
