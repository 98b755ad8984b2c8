"""What the proxy and wrapped-client tests share: the scripted upstream, the proxy, a long chat.

The proxy runs as a real server (uvicorn in a thread on a free 127.0.0.1
port) in front of the scripted server; the clients are the real ``openai``
and ``anthropic`` SDKs (test extra). Without them the tests skip with the
reason; CI installs them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from contextengine.testing import ScriptedOpenAIServer

SYSTEM = "You are a careful assistant. Answer briefly."
FACT = "The deploy key for the staging cluster is ZEBRA-4417-QUOKKA."


def need(module: str) -> Any:
    """Import ``module`` or skip the test, naming the extra that brings it."""
    return pytest.importorskip(module, reason=f"{module} is in the test extra")


@contextmanager
def proxy(upstream: ScriptedOpenAIServer, **settings: Any) -> Iterator[Any]:
    """``contextengine serve`` in front of ``upstream``, as a real server on 127.0.0.1."""
    need("uvicorn")
    need("starlette")
    from contextengine.serve.server import ProxyServer
    from contextengine.serve.settings import ServeSettings

    factory = settings.pop("host_factory", None)
    options = {"engine": "lcm", "store": ":memory:", "context_length": 128_000, **settings}
    settings_ = ServeSettings(upstream=upstream.base_url, **options)
    try:
        with ProxyServer(settings_, host_factory=factory) as px:
            yield px
    finally:
        close_clients()


_OPEN: list[Any] = []


def opened(client: Any) -> Any:
    """Register an SDK client to be closed when the test's proxy stops (no stray sockets)."""
    _OPEN.append(client)
    return client


def close_clients() -> None:
    while _OPEN:
        _OPEN.pop().close()


def filler(turn: int, words: int = 40) -> str:
    """A user message of about ``words`` words, different for every turn."""
    return f"Turn {turn}: " + " ".join(f"note{turn}x{i}" for i in range(words))


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text to {"name{labels}": value}; HELP/TYPE lines must name each family."""
    values: dict[str, float] = {}
    families: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-z_]+)(\{[^}]*\})? (\S+)", line)
        assert match, f"not a Prometheus sample line: {line!r}"
        name = match.group(1)
        assert any(name == f or name.startswith(f + "_") for f in families), name
        values[name + (match.group(2) or "")] = float(match.group(3))
    return values


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results an upstream request carries (either format), as text."""
    found: list[str] = []
    for message in body.get("messages") or []:
        if message.get("role") == "tool":
            found.append(str(message.get("content")))
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append(json.dumps(block.get("content")))
    return found
