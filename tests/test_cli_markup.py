"""Text from users, models and files is shown as it is: rich never reads it as markup."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from contextengine.cli import main
from contextengine.testing.openai_server import ScriptedOpenAIServer

FIXTURES = Path(__file__).parent / "fixtures" / "replay"


def test_the_demo_table_shows_pruned_tool_outputs() -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    final = result.output[result.output.index("Final context") :]
    assert "[tool output pruned: bash(command=" in final
    assert "[CONTEXT SUMMARY]" in final


def test_chat_prints_markup_in_messages_literally(tmp_path: Path) -> None:
    script = tmp_path / "turns.txt"
    script.write_text("[bold]my words[/bold] stay\n", encoding="utf-8")
    with ScriptedOpenAIServer() as server:
        server.add_reply("[red]the reply[/] stays [link=x]too[/link]")
        result = CliRunner().invoke(
            main,
            ["chat", "--base-url", server.base_url, "--model", "m", "--script", str(script)],
        )
    assert result.exit_code == 0, result.output
    assert "> [bold]my words[/bold] stay" in result.output
    assert "[red]the reply[/] stays [link=x]too[/link]" in result.output


def test_replay_and_eval_tables_show_bracketed_names_literally(tmp_path: Path) -> None:
    session = tmp_path / "[red]run.json"
    shutil.copy(FIXTURES / "agent_session.json", session)
    replayed = CliRunner().invoke(main, ["replay", str(session), "--context-length", "2048"])
    assert replayed.exit_code == 0, replayed.output
    assert "[red]run (openai" in replayed.stdout  # the table's title
    assert "[red]run.json" in replayed.stderr  # the progress line
    qa = tmp_path / "[i]qa.json"
    shutil.copy(FIXTURES / "locomo_tiny.json", qa)
    evaluated = CliRunner().invoke(main, ["eval", "recall", "--qa", str(qa), "--engine", "lcm"])
    assert evaluated.exit_code == 0, evaluated.output
    assert "[i]qa.json" in evaluated.stdout
