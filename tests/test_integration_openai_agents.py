"""The OpenAI Agents SDK with ArchiveSession and context_filter, against the scripted server.

A real ``Agent`` on ``OpenAIChatCompletionsModel`` whose ``AsyncOpenAI`` client
points at :class:`ScriptedOpenAIServer` (real HTTP on 127.0.0.1); tracing is
off, so nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs the 'openai-agents' extra")

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from agent_script import CODE, file_text, responder, text_of, tool_message
from contextengine import CompactionEvent
from contextengine.integrations.openai_agents import (
    ArchiveSession,
    ContextFilter,
    context_filter,
    engine_tools,
)
from contextengine.testing import RecordingEngine, ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens
from pg_support import pg_store


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)


@function_tool
def read_file(name: str) -> str:
    """Read a file of the project."""
    return file_text(name)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=responder) as srv:
        yield srv


def _agent(server: ScriptedOpenAIServer, compaction: ContextFilter | None) -> Agent[Any]:
    client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=30)
    tools: list[Any] = [read_file]
    if compaction is not None:
        tools += engine_tools(compaction)
    return Agent(
        name="coder",
        instructions="You are a coding agent.",
        tools=tools,
        model=OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
    )


async def _run(
    agent: Agent[Any], text: str, session: ArchiveSession, compaction: ContextFilter | None
) -> Any:
    config = RunConfig(
        call_model_input_filter=compaction,
        tracing_disabled=True,
        trace_include_sensitive_data=False,
    )
    hooks = compaction.hooks if compaction is not None else None
    return await Runner.run(agent, text, session=session, run_config=config, hooks=hooks)


def test_runs_on_one_session_compact_answer_lcm_grep_and_archive_every_item(
    server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    events: list[Any] = []
    compaction = context_filter(
        "lcm",
        session_id="chat-1",
        context_length=2_000,
        store=":memory:",
        observers=[events.append],
    )
    assert [t.name for t in compaction.tools()] == ["lcm_grep", "lcm_describe", "lcm_expand"]
    agent = _agent(server, compaction)
    session = ArchiveSession("chat-1", store=tmp_path / "sessions.db")
    files = ["notes.txt", *(f"m{i}.py" for i in range(9))]

    async def scenario() -> Any:
        for name in files:
            await _run(agent, f"please read {name}", session, compaction)
        return await _run(agent, f"search for {CODE}", session, compaction)

    result = asyncio.run(scenario())
    compactions = [e for e in events if isinstance(e, CompactionEvent) and e.level == "info"]
    assert compactions, "the window is small enough that lcm must have compacted"
    # The notes.txt result left what was sent; lcm_grep found it in the archive.
    grep_request = server.requests[-1]
    sent_before = [m for m in grep_request["messages"] if m["role"] == "tool"][:-1]
    assert all(CODE not in json.dumps(m) for m in sent_before)
    hits = json.loads(tool_message(grep_request, "lcm_grep")["content"])
    tool_hits = [h for h in hits["results"] if h["role"] == "tool"]
    assert tool_hits and "notes.txt" in tool_hits[0]["snippet"], hits
    assert result.final_output.startswith("Done")

    # The session holds every item of every run, exactly as the SDK made them.
    items = asyncio.run(session.get_items())
    assert items == result.to_input_list()
    kinds = [item.get("type", "message") for item in items]
    assert kinds.count("function_call") == len(files) + 1
    assert kinds.count("function_call_output") == len(files) + 1
    outputs = [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert outputs[: len(files)] == [file_text(n) for n in files]
    session.close()

    # Reopened from the file: the same items.
    again = ArchiveSession("chat-1", store=tmp_path / "sessions.db")
    assert asyncio.run(again.get_items()) == items
    again.close()


def test_the_compressor_keeps_every_request_in_the_window_over_many_runs(
    server: ScriptedOpenAIServer,
) -> None:
    events: list[Any] = []
    compaction = context_filter(
        "compressor",
        session_id="c",
        context_length=4_000,
        observers=[events.append],
        protect_last_n=4,
    )
    assert compaction.tools() == []  # no archive, no tools
    agent = _agent(server, compaction)
    session = ArchiveSession("c", store=":memory:")
    files = [f"m{i}.py" for i in range(8)]

    async def scenario() -> None:
        for name in files:
            await _run(agent, f"please read {name}", session, compaction)

    asyncio.run(scenario())
    assert [e for e in events if isinstance(e, CompactionEvent) and e.level == "info"]
    sizes = [count_message_tokens(r["messages"], "gpt-4o") for r in server.requests]
    assert max(sizes) <= 4_000
    # The instructions are sent as they are, first, on every call.
    assert all(
        r["messages"][0] == {"role": "system", "content": "You are a coding agent."}
        for r in server.requests
    )
    items = asyncio.run(session.get_items())
    outputs = [i["output"] for i in items if i.get("type") == "function_call_output"]
    assert outputs == [file_text(n) for n in files]
    assert len(compaction.host.history) < len(items)
    session.close()


def test_each_model_call_runs_the_hooks_in_order_with_the_real_usage(
    server: ScriptedOpenAIServer,
) -> None:
    engine = RecordingEngine()
    compaction = context_filter(engine, session_id="rec", context_length=100_000)
    agent = _agent(server, compaction)
    session = ArchiveSession("rec", store=":memory:")
    asyncio.run(_run(agent, "please read a.py", session, compaction))
    first, second = server.requests
    assert first["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "please read a.py"},
    ]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": second["messages"][-2]["tool_calls"][0]["id"],
        "content": file_text("a.py"),
    }
    skip = {
        "should_compress_preflight",
        "should_compress",
        "get_tool_schemas",
        "update_model",
        "should_defer_preflight_to_real_usage",
        "prune_tool_results_only",
    }
    assert engine.hook_names(skip=skip) == [
        "on_session_start",
        "select_context",
        "update_from_response",
        "select_context",
        "update_from_response",
        "on_turn_complete",
    ]
    usage = engine.calls_to("update_from_response")[-1]["usage"]
    assert usage["prompt_tokens"] == count_message_tokens(second["messages"], "gpt-4o")
    finished = engine.calls_to("on_turn_complete")[0]["messages"]
    assert [m["role"] for m in finished] == ["system", "user", "assistant", "tool", "assistant"]
    assert text_of(finished[-1]).startswith("Done")
    session.close()


def test_input_that_no_longer_extends_the_last_call_starts_a_new_engine_session(
    server: ScriptedOpenAIServer,
) -> None:
    engine = RecordingEngine()
    compaction = context_filter(engine, session_id="chat", context_length=100_000)
    agent = _agent(server, compaction)
    first = ArchiveSession("chat", store=":memory:")
    asyncio.run(_run(agent, "please read a.py", first, compaction))
    # The same filter on another session: the conversation branched.
    asyncio.run(
        _run(agent, "please read b.py", ArchiveSession("other", store=":memory:"), compaction)
    )
    users = [text_of(m) for m in server.requests[-2]["messages"] if m["role"] == "user"]
    assert users == ["please read b.py"]
    starts = engine.calls_to("on_session_start")
    assert [s["session_id"] for s in starts] == ["chat", "chat~1"]
    assert "on_session_reset" in engine.hook_names()


def test_pop_and_clear_leave_the_archive_whole(server: ScriptedOpenAIServer) -> None:
    session = ArchiveSession("s", store=":memory:")
    agent = _agent(server, None)

    async def scenario() -> tuple[Any, ...]:
        await _run(agent, "please read a.py", session, None)
        before = await session.get_items()
        popped = await session.pop_item()
        after_pop = await session.get_items()
        await session.clear_session()
        cleared = await session.get_items()
        await _run(agent, "please read b.py", session, None)
        return before, popped, after_pop, cleared, await session.get_items(limit=2)

    before, popped, after_pop, cleared, last_two = asyncio.run(scenario())
    assert popped == before[-1]
    assert after_pop == before[:-1]
    assert cleared == []
    assert [i.get("type", "message") for i in last_two] == ["function_call_output", "message"]
    everything = session.archived_items()
    assert everything[: len(before)] == before  # the popped item is still archived
    assert len(everything) == len(before) + 4
    assert asyncio.run(session.pop_item()) is not None
    session.close()


def test_a_session_item_is_stored_by_position_not_deduplicated() -> None:
    session = ArchiveSession("twice", store=":memory:")
    item = {"role": "user", "content": "again"}
    reply = {
        "id": "__fake_id__",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "ok", "annotations": []}],
    }

    async def scenario() -> list[Any]:
        await session.add_items([item, reply])
        await session.add_items([item, reply])
        return await session.get_items()

    assert asyncio.run(scenario()) == [item, reply, item, reply]
    session.close()


@pytest.mark.postgres
def test_archive_session_on_postgresql(server: ScriptedOpenAIServer) -> None:
    with pg_store() as store:
        session = ArchiveSession("pg-chat", store=store)
        agent = _agent(server, None)

        async def scenario() -> Any:
            await _run(agent, "please read notes.txt", session, None)
            return await _run(agent, "please read a.py", session, None)

        result = asyncio.run(scenario())
        items = asyncio.run(session.get_items())
        assert items == result.to_input_list()
        assert len(items) == 8
        # Another session object on the same archive reads the same conversation.
        other = ArchiveSession("pg-chat", store=store)
        assert asyncio.run(other.get_items()) == items
        assert asyncio.run(ArchiveSession("someone-else", store=store).get_items()) == []


def test_importing_the_adapter_without_the_sdk_names_the_extra() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'agents':\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "try:\n"
        "    import contextengine.integrations.openai_agents\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'contextengine[openai-agents]'" in out.stdout
