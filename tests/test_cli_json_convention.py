"""One convention for all JSON output: ``--json`` prints it, ``--output FILE`` writes it.

(``archive migrate``, which needs PostgreSQL, is checked in test_archive_migrate.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextengine.cli import main
from contextengine.store import SQLiteStore

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
AGENT = str(FIXTURES / "agent_session.json")
QA = str(FIXTURES / "locomo_tiny.json")
#: Figures that differ between two runs of the same command (timings).
VOLATILE = {
    "duration_s",
    "overhead_ms_median",
    "overhead_ms_p95",
    "created_at",
    "updated_at",
    "last_failure_at",  # a wall-clock time: two runs can straddle a second
}


@pytest.fixture
def archive_path(tmp_path: Path) -> str:
    path = tmp_path / "archive.db"
    with SQLiteStore(path) as store:
        cid = store.open_conversation("session-one")
        store.append_messages(cid, [{"role": "user", "content": "Where is the deploy script?"}])
    return str(path)


COMMANDS = [
    pytest.param(["count", AGENT], id="count"),
    pytest.param(["demo"], id="demo"),
    pytest.param(["engines"], id="engines"),
    pytest.param(["config"], id="config"),
    pytest.param(["sessions"], id="sessions"),
    pytest.param(["archive", "--store", "{archive}", "list"], id="archive-list"),
    pytest.param(["archive", "--store", "{archive}", "grep", "deploy"], id="archive-grep"),
    pytest.param(["archive", "--store", "{archive}", "describe", "{message}"], id="describe"),
    pytest.param(["archive", "--store", "{archive}", "stats"], id="archive-stats"),
    pytest.param(["replay", AGENT, "--context-length", "2048"], id="replay"),
    pytest.param(["eval", "recall", "--qa", QA, "--engine", "lcm"], id="eval-recall"),
]


def steady(value: Any) -> Any:
    """``value`` without the figures that change from run to run."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


@pytest.mark.parametrize("command", COMMANDS)
def test_json_prints_and_output_writes_the_same_document(
    tmp_path: Path, archive_path: str, command: list[str]
) -> None:
    with SQLiteStore(archive_path) as store:
        (conversation,) = store.list_conversations()
        message = store.get_messages(conversation.id)[0].id
    args = [a.format(archive=archive_path, message=message) for a in command]
    runner = CliRunner()
    printed = runner.invoke(main, [*args, "--json"])
    assert printed.exit_code == 0, printed.output
    document = json.loads(printed.stdout)

    target = tmp_path / "out.json"
    written = runner.invoke(main, [*args, "--output", str(target)])
    assert written.exit_code == 0, written.output
    assert steady(json.loads(target.read_text(encoding="utf-8"))) == steady(document)
    if command[-1] not in ("describe", "stats") and "{message}" not in command:
        # Without --json, standard output keeps the command's text (a table, lines, a number).
        assert written.stdout.strip() and written.stdout != printed.stdout


def test_json_is_a_flag_for_eval_recall_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["eval", "recall", "--qa", QA, "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["k"] == 5
