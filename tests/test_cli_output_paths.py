"""A file a command will write is checked before the command works, never after."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from contextengine.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
AGENT = str(FIXTURES / "agent_session.json")
QA = str(FIXTURES / "locomo_tiny.json")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        pytest.param(["replay", AGENT, "--report", "{nowhere}/x.html"], "--report", id="report"),
        pytest.param(["replay", AGENT, "--timeline", "{nowhere}/t.txt"], "--timeline", id="tl"),
        pytest.param(["replay", AGENT, "--output", "{nowhere}/r.json"], "--output", id="replay"),
        pytest.param(
            ["eval", "recall", "--qa", QA, "--output", "{nowhere}/r.json"],
            "--output",
            id="eval-recall",
        ),
        pytest.param(["count", AGENT, "--output", "{nowhere}/c.json"], "--output", id="count"),
        pytest.param(["demo", "--output", "{nowhere}/d.json"], "--output", id="demo"),
    ],
)
def test_a_missing_output_folder_is_a_usage_error_before_any_work(
    tmp_path: Path, args: list[str], option: str
) -> None:
    folder = tmp_path / "nonexistent" / "dir"
    result = CliRunner().invoke(main, [a.format(nowhere=folder) for a in args])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': folder {folder} does not exist" in result.output
    # Nothing ran: no session was replayed (its progress line), nothing was written.
    assert "session 1" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "nonexistent").exists()


def test_a_folder_given_as_the_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["replay", AGENT, "--report", str(tmp_path)])
    assert result.exit_code == 2
    assert f"Invalid value for '--report': File '{tmp_path}' is a directory" in result.output


def test_a_wrong_report_suffix_is_refused_before_the_replay(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["replay", AGENT, "--report", str(tmp_path / "r.txt")])
    assert result.exit_code == 2 and "expected a .html or .png file name" in result.output
    assert "session 1" not in result.output
