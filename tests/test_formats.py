"""Importers: every recorded-session format becomes valid, paired OpenAI messages."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from contextengine.errors import FormatError
from contextengine.formats import FORMATS, Session, detect_format, load_session, load_sessions
from contextengine.messages import sanitize_tool_pairs, validate_messages

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
DATA = Path(
    os.environ.get(
        "CONTEXTENGINE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"
    )
)


def assert_replayable(session: Session) -> None:
    """What every importer promises: valid messages whose tool calls are already paired."""
    validate_messages(session.messages)
    assert sanitize_tool_pairs(session.messages) == session.messages
    assert session.metadata["tool_messages_dropped"] == 0


def tool_call_ids(messages: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for m in messages for c in m.get("tool_calls") or []]


# --- detection -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("openai_list.json", "openai", id="openai-list"),
        pytest.param("openai_object.json", "openai", id="openai-object"),
        pytest.param("openai_messages.jsonl", "openai", id="openai-jsonl"),
        pytest.param("openai_sessions.jsonl", "openai", id="openai-jsonl-sessions"),
        pytest.param("anthropic_request.json", "anthropic", id="anthropic"),
        pytest.param("claude_code_session.jsonl", "claude-code", id="claude-code"),
        pytest.param("mini_swe_agent.traj.json", "swe-agent", id="swe-agent"),
        pytest.param("tau_bench.json", "tau-bench", id="tau-bench"),
    ],
)
def test_detects_format_from_content(name: str, expected: str, tmp_path: Path) -> None:
    assert detect_format(FIXTURES / name) == expected
    # The extension plays no part: the same bytes under a neutral name detect the same.
    renamed = tmp_path / "session.data"
    renamed.write_bytes((FIXTURES / name).read_bytes())
    assert detect_format(renamed) == expected


def test_registry_names_match_the_cli_names() -> None:
    assert sorted(FORMATS) == ["anthropic", "claude-code", "openai", "swe-agent", "tau-bench"]


# --- OpenAI and Anthropic ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("openai_list.json", id="list"),
        pytest.param("openai_object.json", id="object"),
        pytest.param("openai_messages.jsonl", id="jsonl"),
    ],
)
def test_openai_shapes_give_the_same_messages(name: str) -> None:
    session = load_session(FIXTURES / name)
    expected = json.loads((FIXTURES / "openai_list.json").read_text(encoding="utf-8"))
    assert session.messages == expected
    assert session.format == "openai"
    assert session.source == str(FIXTURES / name)
    assert_replayable(session)


def test_openai_object_keeps_tools_and_model() -> None:
    session = load_session(FIXTURES / "openai_object.json")
    assert session.metadata["model"] == "gpt-4o"
    assert session.metadata["tools"][0]["function"]["name"] == "get_weather"


def test_openai_jsonl_with_one_session_per_line() -> None:
    sessions = load_sessions(FIXTURES / "openai_sessions.jsonl")
    assert [s.id for s in sessions] == ["openai_sessions#1", "openai_sessions#2"]
    assert [len(s.messages) for s in sessions] == [3, 4]
    with pytest.raises(FormatError, match="exactly one session"):
        load_session(FIXTURES / "openai_sessions.jsonl")


def test_openai_jsonl_with_a_single_message(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text('{"role": "user", "content": "hello"}\n', encoding="utf-8")
    assert detect_format(path) == "openai"
    assert load_session(path).messages == [{"role": "user", "content": "hello"}]


def test_anthropic_request_becomes_native_tool_calls() -> None:
    session = load_session(FIXTURES / "anthropic_request.json")
    assert session.format == "anthropic"
    assert session.messages[0] == {"role": "system", "content": "You are a helpful agent."}
    roles = [m["role"] for m in session.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    call = session.messages[2]["tool_calls"][0]
    assert call["id"] == "toolu_1"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert session.messages[3]["tool_call_id"] == "toolu_1"
    assert session.metadata["model"] == "claude-sonnet-4-5"
    assert_replayable(session)


# --- Claude Code ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def claude_session() -> Session:
    return load_session(FIXTURES / "claude_code_session.jsonl")


def test_claude_code_follows_the_active_chain(claude_session: Session) -> None:
    roles = [m["role"] for m in claude_session.messages]
    assert roles == [
        "user", "assistant", "tool", "tool", "assistant",
        "user", "assistant", "tool", "user", "assistant",
    ]  # fmt: skip
    texts = json.dumps(claude_session.messages)
    assert "Explore the repository layout" not in texts  # sidechain
    assert "rewrite the whole module" not in texts  # abandoned branch
    assert claude_session.metadata["skipped_sidechain_records"] == 1
    assert claude_session.metadata["skipped_branch_records"] == 2
    assert claude_session.id == "claude_code_session"
    assert claude_session.metadata["session_id"] == "5e1c0de0-0000-4000-8000-000000000001"
    assert_replayable(claude_session)


def test_claude_code_merges_a_streamed_assistant_message(claude_session: Session) -> None:
    merged = claude_session.messages[1]
    assert merged["content"] == "Let me run the tests and read the module."
    assert merged["reasoning_content"] == "Run the tests first, and read the module."
    assert tool_call_ids([merged]) == ["toolu_A1", "toolu_A2"]
    assert json.loads(merged["tool_calls"][0]["function"]["arguments"]) == {
        "command": "pytest tests/test_api.py -q"
    }
    results = claude_session.messages[2:4]
    assert [m["tool_call_id"] for m in results] == ["toolu_A1", "toolu_A2"]
    assert results[1]["content"] == "1→def get(item):\n2→    return item['id']"


def test_claude_code_keeps_the_recorded_compaction_as_metadata(claude_session: Session) -> None:
    (compaction,) = claude_session.metadata["compactions"]
    assert compaction["index"] == 8
    assert compaction["pre_tokens"] == 151234
    assert compaction["trigger"] == "auto"
    assert compaction["summary"].endswith("fixed KeyError in api.get (tests/test_api.py).")
    assert all("being continued" not in str(m["content"]) for m in claude_session.messages)
    # The boundary falls after the last tool result and before the next user turn.
    assert claude_session.messages[7]["role"] == "tool"
    assert claude_session.messages[8]["content"] == "Now run the tests again.\n\n[image]"


def test_claude_code_records_usage_per_assistant_message(claude_session: Session) -> None:
    usage = {entry["index"]: entry["usage"] for entry in claude_session.metadata["usage"]}
    assert sorted(usage) == [1, 4, 6, 9]
    assert usage[1]["output_tokens"] == 95  # the last streamed record's usage wins
    assert claude_session.metadata["model"] == "claude-opus-4-6"


def test_claude_code_subagent_file_is_its_own_conversation(tmp_path: Path) -> None:
    lines = (FIXTURES / "claude_code_session.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        record["isSidechain"] = True
    path = tmp_path / "agent-a1b2c3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    session = load_session(path)
    assert session.id == "agent-a1b2c3"
    assert session.messages  # all-sidechain records are not skipped
    assert_replayable(session)


# --- mini-swe-agent ------------------------------------------------------------------


def test_swe_agent_bash_blocks_become_tool_calls() -> None:
    session = load_session(FIXTURES / "mini_swe_agent.traj.json")
    assert session.id == "example__api-1"
    roles = [m["role"] for m in session.messages]
    assert roles == [
        "system", "user", "assistant", "tool", "assistant", "user",
        "assistant", "tool", "assistant", "tool",
    ]  # fmt: skip
    first = session.messages[2]
    assert first["content"] == "THOUGHT: Let me find the function."
    assert first["tool_calls"][0]["function"]["name"] == "bash"
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {
        "command": 'grep -n "def get" api.py'
    }
    assert session.messages[3]["content"].startswith("<returncode>0</returncode>")
    # Two bash blocks: the agent rejected the turn, so it stays plain text.
    assert "tool_calls" not in session.messages[4]
    assert "```bash" in session.messages[4]["content"]
    assert tool_call_ids(session.messages) == ["call_0", "call_1", "call_2"]
    assert all("extra" not in m for m in session.messages)
    assert session.metadata["exit_status"] == "Submitted"
    assert session.metadata["bash_calls"] == 3
    assert_replayable(session)


# --- tau-bench ----------------------------------------------------------------------


def test_tau_bench_each_run_is_a_session() -> None:
    sessions = load_sessions(FIXTURES / "tau_bench.json")
    assert [s.id for s in sessions] == ["task0-trial0", "task0-trial1", "task7-trial0"]
    first = sessions[0]
    assert first.metadata["reward"] == 1.0
    assert first.metadata["gold_actions"] == [
        {"name": "cancel_reservation", "kwargs": {"reservation_id": "QX7P2L"}}
    ]
    assert first.metadata["user_id"] == "ana_ruiz_1001"
    assert [m["role"] for m in first.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    for session in sessions:
        assert_replayable(session)


# --- errors ---------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _claude_lines(count: int) -> list[str]:
    return (FIXTURES / "claude_code_session.jsonl").read_text(encoding="utf-8").splitlines()[:count]


@pytest.mark.parametrize(
    ("name", "text", "fmt", "location", "expected"),
    [
        pytest.param(
            "session.jsonl",
            "\n".join([*_claude_lines(6), "{not json", *_claude_lines(2)]) + "\n",
            None,
            "line 7",
            "one JSON object per line",
            id="jsonl-line-not-json",
        ),
        pytest.param(
            "session.jsonl",
            "\n".join([*_claude_lines(3), "[1, 2]"]) + "\n",
            None,
            "line 4",
            "one JSON object per line",
            id="jsonl-line-not-object",
        ),
        pytest.param(
            "session.jsonl",
            "\n".join([*_claude_lines(3), '{"uuid": "x"}']) + "\n",
            None,
            "line 4",
            "a Claude Code record with a 'type' key",
            id="claude-record-no-type",
        ),
        pytest.param(
            "session.jsonl",
            "\n".join([*_claude_lines(3), '{"type": "user", "uuid": "u", "message": 3}']) + "\n",
            None,
            "line 4",
            "'message' has 'content'",
            id="claude-message-wrong-type",
        ),
        pytest.param(
            "run.json",
            (FIXTURES / "tau_bench.json").read_text(encoding="utf-8")[:900],
            None,
            "line ",
            "valid JSON",
            id="truncated-json",
        ),
        pytest.param(
            "chat.json",
            '[{"role": "user", "content": "hi"}, {"content": "no role"}]',
            None,
            "messages[1]",
            "a message object with a 'role'",
            id="openai-message-no-role",
        ),
        pytest.param(
            "runs.json",
            '[{"traj": []}, {"task_id": 1}]',
            None,
            "record 1",
            "a run object",
            id="tau-bench-run-without-traj",
        ),
        pytest.param(
            "notes.txt",
            "just some notes\n",
            None,
            "line 1",
            "a session file in one of",
            id="unknown-text",
        ),
        pytest.param(
            "thing.json",
            '{"foo": 1}',
            None,
            "",
            "a session file in one of",
            id="unknown-json",
        ),
        pytest.param("empty.jsonl", "", None, "line 1", "a session file", id="empty-file"),
        pytest.param(
            "chat.json",
            '{"messages": []}',
            "tau-bench",
            "",
            "a JSON list of tau-bench runs",
            id="wrong-format-named",
        ),
        pytest.param(
            "chat.json",
            '{"messages": []}',
            "pdf",
            "",
            "a format name among",
            id="unknown-name",
        ),
    ],
)
def test_corrupt_input_names_file_location_and_expectation(
    tmp_path: Path, name: str, text: str, fmt: str | None, location: str, expected: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(FormatError) as caught:
        load_sessions(path, format=fmt)
    error = caught.value
    assert error.path == str(path)
    assert error.location.startswith(location)
    assert expected in error.expected
    assert str(path) in str(error) and expected in str(error)


def test_missing_file_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no such file"):
        load_sessions(tmp_path / "absent.jsonl")


# --- the real recordings in ../shared/data ------------------------------------------------------


def _real(pattern: str) -> list[Any]:
    files = sorted(DATA.glob(pattern)) if DATA.is_dir() else []
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{DATA / pattern}: absent"))]
    return [pytest.param(f, id=f.relative_to(DATA).as_posix()) for f in files]


@pytest.mark.parametrize("path", _real("spotter/transcripts/*.jsonl"))
def test_real_claude_code_sessions(path: Path) -> None:
    session = load_session(path)
    assert session.format == "claude-code"
    assert_replayable(session)
    assert session.metadata["unanswered_tool_calls"] == 0
    assert session.metadata["orphan_tool_results"] == 0
    if path.stat().st_size > 1_000_000:  # the 5 big sessions, each with one auto/manual compaction
        (compaction,) = session.metadata["compactions"]
        assert 140_000 < compaction["pre_tokens"] < 175_000
        assert compaction["summary"].startswith("This session is being continued")
        assert 0 < compaction["index"] < len(session.messages)
        assert session.messages[compaction["index"] - 1]["role"] in ("tool", "assistant")


@pytest.mark.parametrize("path", _real("spotter/transcripts/*/subagents/agent-*.jsonl"))
def test_real_claude_code_subagent_files(path: Path) -> None:
    session = load_session(path)
    assert session.messages
    assert_replayable(session)


@pytest.mark.parametrize("path", _real("mini-swe-agent/trajs/*.traj.json"))
def test_real_mini_swe_agent_trajectories(path: Path) -> None:
    session = load_session(path)
    assert session.format == "swe-agent"
    assert session.metadata["bash_calls"] > 0
    assert_replayable(session)


@pytest.mark.parametrize("path", _real("tau-bench/historical_trajectories/*.json"))
def test_real_tau_bench_runs(path: Path) -> None:
    sessions = load_sessions(path)
    assert len(sessions) == 200
    assert len({s.id for s in sessions}) == 200
    for session in sessions:
        assert_replayable(session)
        assert "gold_actions" in session.metadata
