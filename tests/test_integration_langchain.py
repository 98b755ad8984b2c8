"""ContextEngineMiddleware inside a real LangChain v1 agent, against the scripted server.

``create_agent`` runs ``ChatOpenAI`` pointed at :class:`ScriptedOpenAIServer`
(real HTTP on 127.0.0.1); the scripted model reads files with a tool of the
agent's own, and later searches the archive with ``lcm_grep``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="needs the 'langchain' extra")
pytest.importorskip("langchain_openai", reason="needs the 'langchain' extra")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from agent_script import CODE, file_text, responder, text_of, tool_message
from contextengine import CompactionEvent, ContextEngine
from contextengine.integrations.langchain import ContextEngineMiddleware
from contextengine.testing import RecordingEngine, ScriptedOpenAIServer
from contextengine.tokens import count_message_tokens


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing may leave the machine: LangSmith tracing stays off whatever the environment says.
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.setenv(name, "false")
    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)


@tool
def read_file(name: str) -> str:
    """Read a file of the project."""
    return file_text(name)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(responder=responder) as srv:
        yield srv


def _agent(server: ScriptedOpenAIServer, middleware: ContextEngineMiddleware) -> Any:
    model = ChatOpenAI(
        model="gpt-4o", base_url=server.base_url, api_key="test", max_retries=0, timeout=30
    )
    return create_agent(
        model,
        tools=[read_file],
        system_prompt="You are a coding agent.",
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )


def test_a_long_run_compacts_and_lcm_grep_finds_what_left_the_context(
    server: ScriptedOpenAIServer,
) -> None:
    events: list[Any] = []
    middleware = ContextEngineMiddleware(
        "lcm", context_length=2_000, store=":memory:", observers=[events.append]
    )
    assert [t.name for t in middleware.tools] == ["lcm_grep", "lcm_describe", "lcm_expand"]
    agent = _agent(server, middleware)
    config = {"configurable": {"thread_id": "t-1"}}
    files = ["notes.txt", *(f"m{i}.py" for i in range(9))]
    for name in files:
        agent.invoke({"messages": [HumanMessage(f"please read {name}")]}, config)

    compactions = [e for e in events if isinstance(e, CompactionEvent) and e.level == "info"]
    assert compactions, "the window is small enough that lcm must have compacted"
    # What was sent is smaller than the state: the first file left the request.
    state = agent.get_state(config).values["messages"]
    last_request = server.requests[-1]
    assert len(last_request["messages"]) < len(state) + 1
    assert all(CODE not in json.dumps(m) for m in last_request["messages"])

    result = agent.invoke({"messages": [HumanMessage(f"search for {CODE}")]}, config)
    grep_result = tool_message(server.requests[-1], "lcm_grep")
    hits = json.loads(grep_result["content"])
    # The hit is the read_file result that left the context, found by its id.
    tool_hits = [h for h in hits["results"] if h["role"] == "tool"]
    assert tool_hits, hits
    assert "notes.txt" in tool_hits[0]["snippet"]
    assert "ZX" in tool_hits[0]["snippet"] and "4471" in tool_hits[0]["snippet"]
    # The agent's own state is intact: every message LangChain would keep, in order.
    messages = result["messages"]
    humans = [m.content for m in messages if isinstance(m, HumanMessage)]
    assert humans == [f"please read {n}" for n in files] + [f"search for {CODE}"]
    file_results = [m for m in messages if isinstance(m, ToolMessage) and m.name == "read_file"]
    assert [m.content for m in file_results] == [file_text(n) for n in files]
    assert isinstance(messages[-1], AIMessage) and messages[-1].content.startswith("Done")
    host = middleware.host_for("t-1")
    assert host is not None and host.session_id == "t-1"


def test_the_compressor_compacts_its_own_history_and_the_state_keeps_everything(
    server: ScriptedOpenAIServer,
) -> None:
    events: list[Any] = []
    middleware = ContextEngineMiddleware(
        "compressor", context_length=4_000, observers=[events.append], protect_last_n=4
    )
    assert middleware.tools == []  # no archive, no tools
    agent = _agent(server, middleware)
    config = {"configurable": {"thread_id": "c"}}
    files = [f"m{i}.py" for i in range(8)]
    for name in files:
        agent.invoke({"messages": [HumanMessage(f"please read {name}")]}, config)
    assert [e for e in events if isinstance(e, CompactionEvent) and e.level == "info"]
    sizes = [count_message_tokens(r["messages"], "gpt-4o") for r in server.requests]
    assert max(sizes) <= 4_000
    state = agent.get_state(config).values["messages"]
    assert len(state) == 4 * len(files)
    assert [m.content for m in state if isinstance(m, ToolMessage)] == [file_text(n) for n in files]
    # The host kept its compacted history between calls instead of compacting
    # the whole state again each time.
    host = middleware.host_for("c")
    assert host is not None and len(host.history) < len(state)
    assert host.status()["compression_count"] == len(
        [e for e in events if isinstance(e, CompactionEvent) and e.level == "info"]
    )


def test_a_thread_rewound_to_an_earlier_checkpoint_sends_that_checkpoint_s_messages(
    server: ScriptedOpenAIServer,
) -> None:
    middleware = ContextEngineMiddleware("lcm", context_length=50_000, store=":memory:")
    agent = _agent(server, middleware)
    config: dict[str, Any] = {"configurable": {"thread_id": "r"}}
    agent.invoke({"messages": [HumanMessage("please read a.py")]}, config)
    after_first = agent.get_state(config).config
    agent.invoke({"messages": [HumanMessage("please read b.py")]}, config)
    # Time travel: continue from the checkpoint after the first turn.
    agent.invoke({"messages": [HumanMessage("please read c.py")]}, after_first)
    sent = [text_of(m) for m in server.requests[-2]["messages"] if m["role"] == "user"]
    assert sent == ["please read a.py", "please read c.py"]


def test_a_context_overflow_from_the_provider_compacts_and_retries_once(
    server: ScriptedOpenAIServer,
) -> None:
    events: list[Any] = []
    middleware = ContextEngineMiddleware(
        "lcm", context_length=50_000, store=":memory:", observers=[events.append]
    )
    agent = _agent(server, middleware)
    config = {"configurable": {"thread_id": "o"}}
    for name in ("a.py", "b.py", "c.py", "d.py"):
        agent.invoke({"messages": [HumanMessage(f"please read {name}")]}, config)
    overflow = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    server.add_error(400, overflow)
    result = agent.invoke({"messages": [HumanMessage("please read e.py")]}, config)
    assert result["messages"][-1].content.startswith("Done")
    failed, retried = server.requests[-3], server.requests[-2]
    assert count_message_tokens(retried["messages"]) < count_message_tokens(failed["messages"])
    assert any(isinstance(e, CompactionEvent) and e.phase == "overflow" for e in events)


def test_each_model_call_runs_the_hooks_in_order_and_records_the_real_usage(
    server: ScriptedOpenAIServer,
) -> None:
    engine = RecordingEngine()
    middleware = ContextEngineMiddleware(engine, context_length=100_000)
    agent = _agent(server, middleware)
    config = {"configurable": {"thread_id": "u"}}
    agent.invoke({"messages": [HumanMessage("please read a.py")]}, config)
    first, second = server.requests
    assert first["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "please read a.py"},
    ]
    assert second["messages"][-1]["role"] == "tool"
    assert second["messages"][-1]["content"] == file_text("a.py")
    names = engine.hook_names(
        skip={
            "should_compress_preflight",
            "should_compress",
            "get_tool_schemas",
            "update_model",
            "should_defer_preflight_to_real_usage",
            "prune_tool_results_only",
        }
    )
    assert names == [
        "on_session_start",
        "select_context",
        "update_from_response",
        "select_context",
        "update_from_response",
        "on_turn_complete",
    ]
    # The usage the engine got is the server's own count of what it was sent.
    usages = engine.calls_to("update_from_response")
    assert usages[-1]["usage"]["prompt_tokens"] == count_message_tokens(
        second["messages"], "gpt-4o"
    )
    finished = engine.calls_to("on_turn_complete")[0]["messages"]
    assert [m["role"] for m in finished] == ["system", "user", "assistant", "tool", "assistant"]


def test_a_streamed_async_run_goes_through_the_middleware_too(
    server: ScriptedOpenAIServer,
) -> None:
    engine = RecordingEngine()
    middleware = ContextEngineMiddleware(engine, context_length=100_000)
    model = ChatOpenAI(
        model="gpt-4o", base_url=server.base_url, api_key="test", max_retries=0, stream_usage=True
    )
    agent = create_agent(model, tools=[read_file], system_prompt="Hi.", middleware=[middleware])

    async def run() -> list[Any]:
        message = {"messages": [HumanMessage("please read a.py")]}
        return [chunk async for chunk in agent.astream(message, stream_mode="messages")]

    chunks = asyncio.run(run())
    assert chunks
    assert [r["stream"] for r in server.requests] == [True, True]
    usages = [c["usage"]["prompt_tokens"] for c in engine.calls_to("update_from_response")]
    assert usages == [count_message_tokens(r["messages"], "gpt-4o") for r in server.requests]
    assert len(engine.calls_to("on_turn_complete")) == 1
    assert middleware.host_for() is not None  # no thread_id: the "default" thread


def test_threads_get_their_own_engine_and_session(server: ScriptedOpenAIServer) -> None:
    middleware = ContextEngineMiddleware("lcm", context_length=50_000, store=":memory:")
    agent = _agent(server, middleware)
    for thread in ("alpha", "beta"):
        agent.invoke(
            {"messages": [HumanMessage("please read notes.txt")]},
            {"configurable": {"thread_id": thread}},
        )
    alpha, beta = middleware.host_for("alpha"), middleware.host_for("beta")
    assert alpha is not None and beta is not None
    assert alpha.engine is not beta.engine
    assert (alpha.session_id, beta.session_id) == ("alpha", "beta")


def test_one_engine_instance_serves_one_thread_only(server: ScriptedOpenAIServer) -> None:
    from contextengine import load_engine

    engine: ContextEngine = load_engine("compressor", context_length=50_000)
    middleware = ContextEngineMiddleware(engine, context_length=50_000)
    agent = _agent(server, middleware)
    agent.invoke(
        {"messages": [HumanMessage("please read a.py")]}, {"configurable": {"thread_id": "1"}}
    )
    with pytest.raises(Exception, match="one thread"):
        agent.invoke(
            {"messages": [HumanMessage("please read a.py")]}, {"configurable": {"thread_id": "2"}}
        )


def test_importing_the_adapter_without_langchain_names_the_extra() -> None:
    # A meta path hook that refuses the framework, in a fresh interpreter:
    # nothing is uninstalled.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('langchain', 'langchain_core', 'langgraph'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import contextengine\n"
        "try:\n"
        "    import contextengine.integrations.langchain\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ImportError")
    assert "pip install 'contextengine[langchain]'" in out.stdout


def test_importing_contextengine_imports_no_framework() -> None:
    code = (
        "import sys, contextengine, contextengine.integrations\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'langgraph', 'agents', 'openai')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
