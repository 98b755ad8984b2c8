"""Long commands report progress on stderr, in sessions and requests, one line per session."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from contextengine.cli import main
from contextengine.formats import iter_sessions, load_session
from contextengine.replay import replay_session
from contextengine.replay.loop import compare_stream, warm_up

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
AGENT = str(FIXTURES / "agent_session.json")
CLAUDE = str(FIXTURES / "claude_code_compacted.jsonl")
QA = str(FIXTURES / "locomo_tiny.json")
LINE = re.compile(
    r"^(replay|eval recall): session (\d+)(/\d+)? (\S+)(?: \((\w+)\))?: ([\d,]+) requests"
    r" in [\d.]+ s$"
)


def lines(stderr: str) -> list[re.Match[str]]:
    found = [LINE.match(line) for line in stderr.splitlines()]
    assert all(found), stderr
    return [m for m in found if m is not None]


def test_replay_prints_a_line_per_session_on_a_non_terminal() -> None:
    result = CliRunner().invoke(
        main, ["replay", AGENT, CLAUDE, "--compare", "compressor,lcm", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # standard output is the JSON alone
    progress = lines(result.stderr)
    assert [m.group(4) for m in progress] == [
        f"{Path(row['source']).name}#{row['session']}"
        for row in document["sessions"]
        if row["engine"] == "compressor"
    ]
    # Requests are counted once per recorded reply, not once per engine.
    requests = {r["session"]: r["requests"] for r in document["sessions"]}
    assert [int(m.group(6).replace(",", "")) for m in progress] == list(requests.values())
    assert [m.group(2) for m in progress] == ["1", "2"]


def test_quiet_replay_prints_no_progress() -> None:
    result = CliRunner().invoke(main, ["replay", AGENT, "--quiet"])
    assert result.exit_code == 0 and result.stderr == ""


def test_eval_recall_prints_a_line_per_conversation_and_engine() -> None:
    result = CliRunner().invoke(
        main, ["eval", "recall", "--qa", QA, AGENT, "--compare", "compressor,lcm"]
    )
    assert result.exit_code == 0, result.output
    progress = lines(result.stderr)
    assert [m.group(3) for m in progress] == ["/4"] * 4  # (1 conversation + 1 transcript) x 2
    assert [(m.group(4), m.group(5)) for m in progress] == [
        ("locomo_tiny.json#tiny-1", "compressor"),
        ("locomo_tiny.json#tiny-1", "lcm"),
        ("agent_session.json#agent_session", "compressor"),
        ("agent_session.json#agent_session", "lcm"),
    ]
    assert [int(m.group(6)) for m in progress] == [20, 20, 24, 24]
    assert "recall@5" in result.stdout


def test_library_progress_counts_requests() -> None:
    session = load_session(AGENT)
    counted: list[int] = []
    trace = replay_session(
        session.messages, engine="compressor", context_length=2048, progress=counted.append
    )
    assert sum(counted) == len(trace.requests) == 24
    counted.clear()
    (stream,) = iter_sessions(Path(AGENT))
    compare_stream(stream, ["compressor", "lcm"], context_length=2048, progress=counted.append)
    assert sum(counted) == 24


def test_the_warm_up_never_writes_into_an_archive_the_caller_named(tmp_path: Path) -> None:
    archive = tmp_path / "mine.db"
    warm_up(["lcm"], model="gpt-4o-warm-up-test", options={"lcm": {"store": str(archive)}})
    assert not archive.exists()
