"""``contextengine replay``: sessions fed through engines, figures, comparison and the chart report.

Fixtures under ``tests/fixtures/replay/`` were written for the project: a
49-message OpenAI-format coding session (24 requests, about 2k tokens of tool
output per turn) and a Claude Code session with one recorded auto-compaction.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextengine.errors import EngineLoadError
from contextengine.formats import load_session
from contextengine.replay import baseline_trace, recorded_trace, replay_session
from contextengine.tokens import count_message_tokens, message_tokens

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
AGENT = str(FIXTURES / "agent_session.json")
CLAUDE = str(FIXTURES / "claude_code_compacted.jsonl")
REQUIRED = (
    "requests",
    "compactions",
    "summarizer_calls",
    "prompt_tokens_total",
    "prompt_tokens_peak",
    "baseline_prompt_tokens_total",
    "cost",
    "baseline_cost",
    "overhead_ms_median",
)


def _invoke(*args: str) -> Any:
    from contextengine.cli.replay import replay

    return CliRunner().invoke(replay, list(args))


def _json(*args: str) -> dict[str, Any]:
    result = _invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_json_reports_every_field_per_session() -> None:
    document = _json(AGENT, "--engine", "compressor", "--context-length", "2048")
    (row,) = document["sessions"]
    for key in REQUIRED:
        assert key in row, key
    assert row["requests"] == 24  # one per recorded assistant message
    assert row["compactions"] >= 1
    assert row["prompt_tokens_total"] < row["baseline_prompt_tokens_total"]
    # the unmanaged baseline hits the window: capped there, and counted as refused
    assert row["baseline_prompt_tokens_peak"] == 2048
    assert row["baseline_overflow_requests"] > 0
    assert document["totals"]["compressor"]["requests"] == 24


@pytest.mark.parametrize("engine", [pytest.param("compressor"), pytest.param("lcm")])
def test_without_compaction_an_engine_sends_exactly_the_baseline(engine: str) -> None:
    """Nothing to compact: same requests byte for byte, so the same tokens, cache hits and cost."""
    (row,) = _json(AGENT, "--engine", engine, "--context-length", "100000")["sessions"]
    assert row["compactions"] == 0
    assert row["prompt_tokens_total"] == row["baseline_prompt_tokens_total"]
    assert row["cost"] == row["baseline_cost"]


def test_usage_is_counted_from_what_is_sent() -> None:
    messages = load_session(AGENT).messages
    trace = replay_session(messages, engine="compressor", context_length=100_000)
    first = trace.requests[0]
    assert first.index == 2  # system, user, then the first reply
    assert first.prompt_tokens == count_message_tokens(messages[:2], "gpt-4o")
    assert first.completion_tokens == message_tokens(messages[2], "gpt-4o")
    assert first.cached_tokens == 0
    # the second request extends the first: its whole prompt is the cached prefix
    assert trace.requests[1].cached_tokens == first.prompt_tokens - 3


def test_compare_runs_every_engine_over_the_same_sessions() -> None:
    document = _json(AGENT, "--compare", "compressor,lcm", "--context-length", "2048")
    assert document["engines"] == ["compressor", "lcm"]
    rows = {row["engine"]: row for row in document["sessions"]}
    assert set(rows) == {"compressor", "lcm"}
    assert rows["compressor"]["baseline_cost"] == rows["lcm"]["baseline_cost"]
    assert rows["lcm"]["compactions"] >= 1
    assert rows["lcm"]["prompt_tokens_total"] < rows["lcm"]["baseline_prompt_tokens_total"]


def test_recorded_claude_code_compaction_is_reported_beside_the_engines() -> None:
    (row,) = _json(CLAUDE, "--engine", "lcm", "--context-length", "2048")["sessions"]
    recorded = row["recorded"]
    assert recorded is not None
    assert recorded["compactions"] == 1
    assert recorded["requests"] == row["requests"]
    assert recorded["prompt_tokens_total"] < row["baseline_prompt_tokens_total"]


def test_recorded_trace_switches_to_the_summary_at_the_boundary() -> None:
    session = load_session(CLAUDE)
    (boundary,) = session.metadata["compactions"]
    trace = recorded_trace(session)
    base = baseline_trace(session.messages, context_length=10**6)
    assert trace is not None
    after = [r for r in trace.requests if r.index >= boundary["index"]]
    before = [r for r in trace.requests if r.index < boundary["index"]]
    assert after[0].compactions == ("auto",)
    assert [r.prompt_tokens for r in before] == [
        r.prompt_tokens for r in base.requests[: len(before)]
    ]
    summary_tokens = message_tokens({"role": "user", "content": boundary["summary"]}, "gpt-4o")
    tail = session.messages[boundary["index"] : after[0].index]
    assert after[0].prompt_tokens == summary_tokens + count_message_tokens(tail, "gpt-4o")
    assert after[0].cached_tokens == 0  # the summary is a new first message: nothing cached


def test_report_html_holds_a_chart_per_engine_with_compaction_marks(tmp_path: Path) -> None:
    report = tmp_path / "replay.html"
    result = _invoke(
        AGENT,
        CLAUDE,
        "--compare",
        "compressor,lcm",
        "--context-length",
        "2048",
        "--report",
        str(report),
    )
    assert result.exit_code == 0, result.output
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    assert page.count("<svg") == 4  # tokens and cumulative cost, for each session
    labels = re.findall(r'<polyline class="series" data-label="([^"]+)"', page)
    for label in ("compressor", "lcm", "baseline (no management)", "recorded (Claude Code)"):
        assert label in labels
    assert 'class="compaction"' in page
    assert 'class="context-length"' in page
    assert "Per session" in page and "summariser calls" in page


def test_png_report_names_the_plot_extra_when_matplotlib_is_missing(tmp_path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is not None:
        pytest.skip("matplotlib is installed: the PNG is drawn instead")
    result = _invoke(AGENT, "--context-length", "2048", "--report", str(tmp_path / "r.png"))
    assert result.exit_code == 1
    assert "contextengine[plot]" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--price", "input=abc"], "not a number", id="bad-price"),
        pytest.param(["--price", "nope"], "unknown price preset", id="unknown-preset"),
        pytest.param(["--report", "out.txt"], ".html or .png", id="bad-report-name"),
        pytest.param(["--option", "novalue"], "key=value", id="bad-option"),
    ],
)
def test_usage_errors_name_the_option(args: list[str], message: str) -> None:
    result = _invoke(AGENT, *args)
    assert result.exit_code == 2
    assert message in result.output


def test_engine_options_reach_the_engine_and_typos_are_errors() -> None:
    scoped = _json(
        AGENT,
        "--compare",
        "compressor,lcm",
        "--context-length",
        "2048",
        "--option",
        "lcm.fresh_tail_tokens=300",
    )
    assert {row["engine"] for row in scoped["sessions"]} == {"compressor", "lcm"}
    result = _invoke(AGENT, "--engine", "lcm", "--option", "fresh_tail_tokenz=300")
    assert isinstance(result.exception, EngineLoadError)
    assert "fresh_tail_tokenz" in str(result.exception)


def test_table_output_lists_reference_and_engine_rows() -> None:
    result = _invoke(CLAUDE, "--compare", "compressor,lcm", "--context-length", "2048")
    assert result.exit_code == 0, result.output
    for word in ("baseline", "recorded", "compressor", "lcm", "total lcm"):
        assert word in result.output
