"""The command line: version, count, and errors as one-line messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from contextengine import count_message_tokens
from contextengine.cli import main

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
]


def test_version() -> None:
    outcome = CliRunner().invoke(main, ["--version"])
    assert outcome.exit_code == 0
    assert "contextengine" in outcome.output and "0.1.0" in outcome.output


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "contextengine", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "demo" in result.stdout and "count" in result.stdout


def test_count_json_list_and_jsonl_agree(tmp_path: Path) -> None:
    as_list = tmp_path / "t.json"
    as_list.write_text(json.dumps(MESSAGES))
    as_lines = tmp_path / "t.jsonl"
    as_lines.write_text("\n".join(json.dumps(m) for m in MESSAGES))
    expected = str(count_message_tokens(MESSAGES))
    for path in (as_list, as_lines):
        outcome = CliRunner().invoke(main, ["count", str(path)])
        assert outcome.exit_code == 0, outcome.output
        assert outcome.output.strip() == expected


def test_count_corrupt_file_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(MESSAGES[0]) + "\n{not json\n")
    outcome = CliRunner().invoke(main, ["count", str(bad)])
    assert outcome.exit_code == 65
    assert "bad.jsonl" in outcome.output and "line 2" in outcome.output
    assert "Traceback" not in outcome.output
