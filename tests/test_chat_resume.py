"""``chat --resume`` restores model, engine and context length; empty sessions are not saved."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from contextengine.chat.session_store import MIGRATIONS, SessionStore
from contextengine.cli import main
from contextengine.testing.openai_server import ScriptedOpenAIServer


def home() -> Path:
    return Path(os.environ["CONTEXTENGINE_HOME"])


def chat(tmp_path: Path, lines: list[str], *args: str) -> Result:
    script = tmp_path / "turns.txt"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return CliRunner().invoke(main, ["chat", "--script", str(script), *args])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedOpenAIServer]:
    """A scripted endpoint, configured the way a user configures theirs: in the environment."""
    with ScriptedOpenAIServer() as scripted:
        monkeypatch.setenv("CONTEXTENGINE_BASE_URL", scripted.base_url)
        yield scripted


def test_the_exit_hint_resumes_with_the_same_model_engine_and_context_length(
    tmp_path: Path, server: ScriptedOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.add_reply("Hello Ada.")
    server.add_reply("You are Ada.")
    first = chat(
        tmp_path,
        ["my name is Ada"],
        "--model",
        "scripted-m",
        "--engine",
        "lcm",
        "--context-length",
        "5000",
    )
    assert first.exit_code == 0, first.output
    hint = first.output.splitlines()[-1]
    session_id = first.output.split()[1]
    assert (
        hint == f"session {session_id} saved; resume with: contextengine chat --resume {session_id}"
    )
    # A configured model is a default for new sessions; the session's own wins.
    monkeypatch.setenv("CONTEXTENGINE_MODEL", "other-model")
    resumed = chat(tmp_path, ["what is my name?", "/status"], *hint.split()[-2:])
    assert resumed.exit_code == 0, resumed.output
    assert resumed.output.splitlines()[0] == (
        f"session {session_id} · model scripted-m · engine lcm · context 5,000 tokens"
    )
    assert "/ 5,000 tokens" in resumed.output and "engine lcm" in resumed.output  # /status
    second = server.requests[1]
    assert second["model"] == "scripted-m"
    assert [m["content"] for m in second["messages"]][-3:] == [
        "my name is Ada",
        "Hello Ada.",
        "what is my name?",
    ]
    assert any(t["function"]["name"] == "lcm_grep" for t in second["tools"])


def test_an_option_given_on_resume_wins_over_the_saved_one(
    tmp_path: Path, server: ScriptedOpenAIServer
) -> None:
    server.add_reply("one")
    server.add_reply("two")
    first = chat(tmp_path, ["hi"], "--model", "m1", "--context-length", "5000")
    session_id = first.output.split()[1]
    resumed = chat(tmp_path, ["again"], "--resume", session_id, "--context-length", "7000")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.output.splitlines()[0].endswith(
        "model m1 · engine compressor · context 7,000 tokens"
    )
    with SessionStore(home() / "sessions.db") as store:
        assert store.info(session_id).context_length == 7000  # saved with what it ran with


def test_a_session_where_nothing_was_said_is_not_saved(
    tmp_path: Path, server: ScriptedOpenAIServer
) -> None:
    result = chat(tmp_path, ["/status", "/engine", "/quit"], "--model", "m")
    assert result.exit_code == 0, result.output
    session_id = result.output.split()[1]
    assert result.output.splitlines()[-1] == f"session {session_id} not saved: nothing was said"
    assert list(home().iterdir()) == []  # not even the session file
    assert server.requests == []


def test_sessions_on_a_fresh_home_creates_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sessions"])
    assert result.exit_code == 0 and result.output == "no saved chat sessions\n"
    listed = CliRunner().invoke(main, ["sessions", "--json"])
    assert json.loads(listed.stdout) == []
    assert list(home().iterdir()) == []


def test_resuming_an_unknown_session_is_one_line_and_creates_nothing() -> None:
    result = CliRunner().invoke(main, ["chat", "--model", "m", "--resume", "nope"])
    assert result.exit_code == 74
    assert result.output == f"error: no chat session 'nope' in {home() / 'sessions.db'}\n"
    assert list(home().iterdir()) == []


def test_listing_reads_an_older_session_file_without_migrating_it(tmp_path: Path) -> None:
    path = home() / "sessions.db"
    with sqlite3.connect(path) as db:
        db.executescript(MIGRATIONS[0])
        db.execute("PRAGMA user_version = 1")
        db.execute("INSERT INTO sessions VALUES ('abc', 1.0, 2.0, 'm', 'lcm', 'old title')")
    db.close()
    result = CliRunner().invoke(main, ["sessions", "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert (row["id"], row["model"], row["context_length"]) == ("abc", "m", 0)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    db.close()
