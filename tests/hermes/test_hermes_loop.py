"""Our engines inside Hermes's own agent loop, selected by Hermes's configuration.

Hermes's ``AIAgent.run_conversation`` (not a re-implementation of it) talks
to the scripted OpenAI-compatible server over real HTTP on 127.0.0.1, runs
its own ``read_file`` tool on files written here, and loads our engine the way
a Hermes user would have it: ``plugins.enabled: [contextengine]`` and
``context.engine: contextengine-<name>`` in ``$HERMES_HOME/config.yaml``.
Thresholds are set low through the ``contextengine:`` section so that a few
turns compact (Hermes refuses windows under 64K, so the window stays real).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextengine import is_summary_message
from contextengine.engines.compressor.prune import DESCRIPTOR_PREFIX
from contextengine.store import open_store
from contextengine.testing import ScriptedOpenAIServer

TURNS = 4


def _write_notes(folder: Path) -> list[Path]:
    paths = []
    for i in range(TURNS):
        rows = "".join(f"row {j}: value {(j * 7919 + i) % 10007} ok\n" for j in range(120))
        path = folder / f"notes{i}.txt"
        path.write_text(f"notes {i}\n{rows}the marker of notes {i} is MARKER-{i}-ZEBRA\n")
        paths.append(path)
    return paths


def _config(engine: str, options: str) -> str:
    return (
        "model:\n  context_length: 65536\n"
        "plugins:\n  enabled: [contextengine]\n"
        f"context:\n  engine: {engine}\n"
        f"contextengine:\n{options}"
    )


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


def _agent(server: ScriptedOpenAIServer) -> Any:
    # Hermes caches plugin discovery per process: rescan for this test's config.
    from hermes_cli.plugins import get_plugin_manager
    from run_agent import AIAgent

    get_plugin_manager().discover_and_load(force=True)
    return AIAgent(
        base_url=server.base_url,
        api_key="test-key",
        provider="custom",
        model="scripted-model",
        quiet_mode=True,
        enabled_toolsets=["file", "context_engine"],
        skip_context_files=True,
        skip_memory=True,
    )


def _tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def _run_session(server: ScriptedOpenAIServer, notes: list[Path]) -> tuple[Any, list[Any]]:
    """Four turns reading a file each, then one asking for the first file's marker."""
    for i, path in enumerate(notes):
        server.add_reply("", tool_calls=[{"name": "read_file", "arguments": {"path": str(path)}}])
        server.add_reply(f"notes {i} read")
    server.add_reply(
        "", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "MARKER-0-ZEBRA"}}]
    )
    server.add_reply("the marker was MARKER-0-ZEBRA")
    agent = _agent(server)
    history: list[Any] | None = None
    for i in range(TURNS):
        result = agent.run_conversation(f"turn {i}: read notes{i}", conversation_history=history)
        assert result["final_response"] == f"notes {i} read"
        history = result["messages"]
    result = agent.run_conversation("what was the marker in notes0?", conversation_history=history)
    assert result["final_response"] == "the marker was MARKER-0-ZEBRA"
    return agent, result["messages"]


def _said(server: ScriptedOpenAIServer) -> list[str]:
    """Every user, assistant and tool text the model was sent or said.

    Our own summaries, reference blocks and pruning descriptors excluded: they
    are the engines' output, not the conversation.
    """
    texts: list[str] = []
    for body in server.requests:
        for message in body["messages"]:
            content = message.get("content")
            if message.get("role") == "system" or not isinstance(content, str) or not content:
                continue
            if "lcm-reference-material" in content or is_summary_message(message):
                continue
            if content.startswith(DESCRIPTOR_PREFIX):  # the compressor's stand-in for a result
                continue
            texts.append(content)
    return texts


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        pytest.param(
            "contextengine-lcm",
            "  lcm:\n    threshold_percent: 0.05\n",
            id="lcm",
        ),
        pytest.param(
            "contextengine-compressor",
            "  compressor:\n    threshold_percent: 0.05\n    protect_first_n: 1\n"
            "    protect_last_n: 2\n    tail_token_budget: 1000\n",
            id="compressor",
        ),
    ],
)
def test_hermes_runs_our_engine_through_compaction_and_lcm_grep(
    hermes_home: Path, tmp_path: Path, engine: str, options: str
) -> None:
    (hermes_home / "config.yaml").write_text(_config(engine, options))
    notes = _write_notes(tmp_path)
    with ScriptedOpenAIServer() as server:
        agent, history = _run_session(server, notes)
        adapter = agent.context_compressor
        # Hermes selected our engine from its configuration and offers our tools.
        assert adapter.name == engine
        assert type(adapter).__mro__[-3].__module__ == "agent.context_engine"
        tools = {t["function"]["name"] for t in agent.tools}
        assert {"lcm_grep", "lcm_describe", "lcm_expand"} <= tools
        # A compaction fired, and the first file left what the model is sent.
        assert adapter.compression_count >= 1
        grep_call = next(
            i
            for i, body in enumerate(server.requests)
            if _tool_messages(body) and "lcm_grep" in json.dumps(body["messages"][-2:])
        )
        asked = server.requests[grep_call - 1]
        assert "MARKER-0-ZEBRA" not in json.dumps(
            [m for m in asked["messages"] if m.get("role") == "tool"]
        )
        # The scripted model's lcm_grep got the right message back.
        answer = json.loads(server.requests[grep_call]["messages"][-1]["content"])
        hits = [hit for hit in answer["results"] if hit["role"] == "tool"]
        assert hits, answer
        assert "notes «0»" in hits[0]["snippet"]
        # Hermes ends the session (as its CLI does on exit): the archive holds everything.
        agent.shutdown_memory_provider(history)
        archive = hermes_home / "contextengine" / f"{engine.removeprefix('contextengine-')}.sqlite"
        store = open_store(str(archive))
        try:
            stored: list[str] = []
            by_id: dict[str, str] = {}
            for conversation in store.list_conversations():
                for record in store.get_messages(conversation.id):
                    content = record.message.get("content")
                    text = content if isinstance(content, str) else json.dumps(content)
                    stored.append(text)
                    by_id[record.id] = text
        finally:
            store.close()
        missing = [text[:80] for text in _said(server) if not any(text in s for s in stored)]
        assert not missing, missing
        # The message lcm_grep pointed at is notes0's read_file result, in full.
        assert "MARKER-0-ZEBRA" in by_id[hits[0]["id"]]
        assert "row 119:" in by_id[hits[0]["id"]]


@pytest.mark.parametrize(
    ("config", "why"),
    [
        pytest.param(
            "plugins:\n  enabled: [contextengine]\ncontext:\n  engine: compressor\n",
            "the plugin is enabled but context.engine names Hermes's own",
            id="enabled-not-selected",
        ),
        pytest.param(
            "context:\n  engine: contextengine-lcm\n",
            "context.engine names ours but the plugin is not enabled",
            id="selected-not-enabled",
        ),
    ],
)
def test_installing_contextengine_never_replaces_a_hermes_users_engine(
    hermes_home: Path, config: str, why: str
) -> None:
    from agent.context_compressor import ContextCompressor
    from hermes_cli.plugins import get_plugin_context_engine

    (hermes_home / "config.yaml").write_text("model:\n  context_length: 65536\n" + config)
    with ScriptedOpenAIServer() as server:
        agent = _agent(server)
    assert type(agent.context_compressor) is ContextCompressor, why
    assert get_plugin_context_engine() is None, why
    assert not {"lcm_grep", "lcm_expand"} & {t["function"]["name"] for t in agent.tools}
