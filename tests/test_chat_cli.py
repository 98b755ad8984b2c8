"""``contextengine chat --script`` end to end against a real scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from contextengine.chat.session_store import SessionStore
from contextengine.cli.chat import chat, sessions
from contextengine.testing.openai_server import ScriptedOpenAIServer
from contextengine.testing.recording_engine import RecordingEngine

NOTES: list[str] = []


def make_engine() -> RecordingEngine:
    """Engine factory used through ``--engine test_chat_cli:make_engine``: one tool, never auto."""

    def remember(args: dict[str, Any]) -> dict[str, Any]:
        NOTES.append(str(args.get("text")))
        return {"stored": args.get("text")}

    return RecordingEngine(name="notes", tools={"ctx_note": remember}, keep_last=2)


def make_eager_engine() -> RecordingEngine:
    """Compacts as soon as the rough estimate passes 250 tokens."""
    return RecordingEngine(
        name="eager", should_compress=lambda tokens: (tokens or 0) > 250, keep_last=2
    )


def run_chat(server: ScriptedOpenAIServer, script: Path, *extra: str) -> Result:
    args = [
        "--base-url",
        server.base_url,
        "--model",
        "scripted",
        "--api-key",
        "test",
        "--script",
        str(script),
        *extra,
    ]
    return CliRunner().invoke(chat, args, catch_exceptions=False)


def write_script(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "turns.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def session_id_of(output: str) -> str:
    first = output.splitlines()[0]
    assert first.startswith("session ")
    return first.split()[1]


def test_chat_script_with_an_engine_tool_compress_and_status(tmp_path: Path) -> None:
    NOTES.clear()
    script = write_script(
        tmp_path,
        "hello",
        "remember that I like tea",
        "/status",
        "/compress tea",
        "/engine",
        "/quit",
        "never reached",
    )
    with ScriptedOpenAIServer() as server:
        server.add_reply("Hi there!")
        server.add_reply("", tool_calls=[{"name": "ctx_note", "arguments": {"text": "likes tea"}}])
        server.add_reply("Noted.")
        result = run_chat(server, script, "--engine", "test_chat_cli:make_engine")
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    assert "Hi there!" in out and "Noted." in out
    assert "[tool] ctx_note" in out and NOTES == ["likes tea"]
    assert "context [" in out and "engine notes" in out  # /status
    assert "[context] Compacted the conversation" in out  # /compress
    assert "tools: ctx_note" in out  # /engine
    assert len(bodies) == 3  # "never reached" was never sent
    assert bodies[0]["stream"] is True
    assert bodies[1]["tools"][0]["function"]["name"] == "ctx_note"
    tool_message = bodies[2]["messages"][-1]
    assert tool_message["role"] == "tool" and json.loads(tool_message["content"]) == {
        "stored": "likes tea"
    }
    session_id = session_id_of(out)
    with SessionStore(Path(_home()) / "sessions.db") as store:
        saved = store.load(session_id)
    assert saved[0]["role"] == "system" and len(saved) < 7  # compacted by /compress


def _home() -> str:
    import os

    return os.environ["CONTEXTENGINE_HOME"]


def test_automatic_compaction_prints_a_one_line_notice(tmp_path: Path) -> None:
    script = write_script(tmp_path, "first " * 40, "second " * 40, "third " * 40)
    with ScriptedOpenAIServer() as server:
        for word in ("one ", "two ", "three "):
            server.add_reply(word * 60)
        result = run_chat(server, script, "--engine", "test_chat_cli:make_eager_engine")
        bodies = server.requests
    assert result.exit_code == 0, result.output
    notices = [line for line in result.output.splitlines() if line.startswith("[context")]
    assert len(notices) == 1 and "compacted automatically" in notices[0]
    assert len(bodies[2]["messages"]) < len(bodies[1]["messages"]) + 2


def test_a_context_overflow_is_compacted_and_retried_once(tmp_path: Path) -> None:
    script = write_script(tmp_path, "first", "second", "third")
    with ScriptedOpenAIServer() as server:
        server.add_reply("one")
        server.add_reply("two")
        server.add_error(400, {"error": {"message": "This model's maximum context length is 10"}})
        server.add_reply("three")
        result = run_chat(server, script, "--engine", "test_chat_cli:make_engine")
        bodies = server.requests
    assert result.exit_code == 0, result.output
    assert "three" in result.output and "[context] Context compacted automatically" in result.output
    assert len(bodies) == 4
    assert len(bodies[3]["messages"]) < len(bodies[2]["messages"])
    assert bodies[3]["messages"][-1]["content"] == "third"


def test_sessions_lists_and_resume_continues(tmp_path: Path) -> None:
    with ScriptedOpenAIServer() as server:
        server.add_reply("first answer")
        server.add_reply("second answer")
        first = run_chat(
            server,
            write_script(tmp_path, "my name is Ada"),
            "--engine",
            "test_chat_cli:make_engine",
        )
        session_id = session_id_of(first.output)
        listing = CliRunner().invoke(sessions, [])
        resumed = run_chat(
            server,
            write_script(tmp_path, "what is my name?"),
            "--engine",
            "test_chat_cli:make_engine",
            "--resume",
            session_id,
        )
        bodies = server.requests
    assert session_id in listing.output and "my name is Ada" in listing.output
    assert resumed.exit_code == 0, resumed.output
    contents = [m.get("content") for m in bodies[1]["messages"]]
    assert contents[1:] == ["my name is Ada", "first answer", "what is my name?"]


@pytest.mark.parametrize(
    ("status", "needle"),
    [pytest.param(500, "provider request failed", id="server-error")],
)
def test_a_failed_turn_is_reported_and_exits_nonzero(
    tmp_path: Path, status: int, needle: str
) -> None:
    with ScriptedOpenAIServer() as server:
        server.add_error(status)
        result = run_chat(
            server, write_script(tmp_path, "hello"), "--engine", "test_chat_cli:make_engine"
        )
    assert result.exit_code == 1 and needle in result.output


def test_the_default_compressor_keeps_what_it_compacts_searchable(tmp_path: Path) -> None:
    filler = "Some background on the project, said at length. " * 12
    lines = ["hello", filler, filler, "the vault code is 7391-alpha", filler, "d", "e", "f"]
    script = write_script(tmp_path, *lines, "/compress", "what was the vault code?")
    with ScriptedOpenAIServer() as server:
        for n in range(len(lines)):
            server.add_reply(f"reply {n}")
        server.add_reply("The user said hello and some letters.")  # the summary (main model)
        server.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "vault"}}])
        server.add_reply("It is 7391-alpha.")
        result = run_chat(server, script)
        bodies = server.requests
    assert result.exit_code == 0, result.output
    assert "[context] Compacted the conversation" in result.output
    last = bodies[-1]
    assert "lcm_grep" in [tool["function"]["name"] for tool in last["tools"]]
    # The fact left the context with the compaction; the archive gave it back.
    assert not any("7391-alpha" in json.dumps(m) for m in bodies[-2]["messages"])
    found = json.loads(last["messages"][-1]["content"])
    assert any("7391-alpha" in hit["snippet"] for hit in found["results"])
    assert (Path(_home()) / "archive.db").is_file()
