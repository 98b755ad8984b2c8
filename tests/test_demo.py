"""``contextengine demo``: the main job runs offline and shows compaction working."""

from __future__ import annotations

import json

from click.testing import CliRunner

from contextengine import count_message_tokens, validate_messages
from contextengine.cli import main
from contextengine.demo import DEMO_FACT, load_demo_session, run_demo


def test_bundled_session_is_valid_and_big_enough_to_compact() -> None:
    session = load_demo_session()
    validate_messages(session)
    assert count_message_tokens(session) > 2 * 8_000


def test_compressor_demo_compacts_several_times_and_stays_in_the_window() -> None:
    result = run_demo(engine="compressor", context_length=8_000)
    assert len(result.compactions) >= 3
    # Every compaction that ran succeeded; skips (passes == 0) are reported, not run.
    assert all(not event.aborted for event in result.compactions if event.passes)
    assert max(step.context_tokens for step in result.requests) <= 8_000
    validate_messages(result.final_context)
    # The latest request is what the model must answer.
    assert "staging database use again" in result.final_context[-1]["content"]
    assert result.status["host_compactions"] == sum(1 for e in result.compactions if not e.aborted)


def test_lcm_demo_recovers_the_fact_that_left_the_view() -> None:
    result = run_demo(engine="lcm", context_length=8_000)
    assert result.compactions
    first_request = load_demo_session()[1]
    assert first_request not in result.final_context  # it left the view as a raw message
    tools = [step.tool for step in result.recall]
    assert tools[0] == "lcm_grep" and "lcm_expand" in tools
    assert DEMO_FACT in json.dumps(result.recall[-1].result)


def test_demo_command_prints_compactions_and_status() -> None:
    outcome = CliRunner().invoke(main, ["demo"])
    assert outcome.exit_code == 0, outcome.output
    assert "compaction" in outcome.output
    assert "Status" in outcome.output


def test_demo_json_is_machine_readable() -> None:
    outcome = CliRunner().invoke(main, ["demo", "--engine", "lcm", "--json"])
    assert outcome.exit_code == 0, outcome.output
    data = json.loads(outcome.output)
    assert data["engine"] == "lcm"
    assert data["compactions"] and data["requests"] and data["final_context"]


def test_demo_with_an_unknown_engine_is_a_one_line_error() -> None:
    outcome = CliRunner().invoke(main, ["demo", "--engine", "nope"])
    assert outcome.exit_code == 78
    assert "no context engine named 'nope'" in outcome.output
    assert "Traceback" not in outcome.output
