"""The summariser fault matrix (benchmarks/reliability/faults.py) at CI size.

Every fault is served by a real HTTP server on 127.0.0.1 to a real
``OpenAICompatibleSummarizer``; the assertions are the invariants of issue 11:
no message lost, no request over the window, no failure reported as a
success, and a failing summariser called a bounded number of times.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TURNS = 8


def _load() -> ModuleType:
    path = ROOT / "benchmarks" / "reliability" / "faults.py"
    spec = importlib.util.spec_from_file_location("_reliability_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while it executes
    spec.loader.exec_module(module)
    return module


faults = _load()


@pytest.fixture(scope="module")
def rows() -> dict[tuple[str, str], Any]:
    _body, rows = faults.run(quick=True, turns=TURNS)
    return {(row.fault, row.engine): row for row in rows}


ENGINES = [pytest.param(name, id=name) for name in ("compressor", "lcm")]


def test_the_quick_matrix_covers_what_ci_must(rows: dict[tuple[str, str], Any]) -> None:
    assert {fault for fault, _ in rows} == {"healthy", "401", "429 long", "timeout", "drop"}
    assert {engine for _, engine in rows} == {"compressor", "lcm"}
    assert not faults.failed(rows.values())


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("fault", ["healthy", "401", "429 long", "timeout", "drop"])
def test_nothing_is_lost_or_misreported(
    rows: dict[tuple[str, str], Any], fault: str, engine: str
) -> None:
    row = rows[(fault, engine)]
    assert (row.lost, row.over_window, row.misreported) == (0, 0, 0), row.problems
    assert row.events, "the session never needed a compaction: the fault was not exercised"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_healthy_summariser_compacts_without_a_warning(
    rows: dict[tuple[str, str], Any], engine: str
) -> None:
    row = rows[("healthy", engine)]
    assert row.compacted >= 1 and row.requests >= 1
    assert set(row.events) == {("info", "ok")}  # no false alarm (lcm's "below_threshold" was one)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("fault", "level", "reason", "max_requests"),
    [
        # Auth is never retried: one request per compaction, and a cooldown between them.
        pytest.param("401", "error", "auth", 2, id="auth"),
        # Retry-After 600 s is beyond the 3 s cap: no sleep, no retry, 600 s of cooldown.
        pytest.param("429 long", "warning", "rate_limited", 1, id="rate-limit-beyond-cap"),
        # Two attempts fit the 3 s cap; the 60 s cooldown allows one more compaction.
        pytest.param("timeout", "warning", "timeout", 4, id="timeout"),
        # Three attempts (max_retries 2) per compaction, the same cooldown.
        pytest.param("drop", "warning", "server_error", 6, id="drop"),
    ],
)
def test_a_failing_summariser_is_called_a_bounded_number_of_times(
    rows: dict[tuple[str, str], Any],
    engine: str,
    fault: str,
    level: str,
    reason: str,
    max_requests: int,
) -> None:
    row = rows[(fault, engine)]
    assert 1 <= row.requests <= max_requests, row
    failures = {key for key in row.events if key[1] not in ("ok", "cooldown")}
    assert failures == {(level, reason)}, row.events
    assert all(level != "info" for level, reason in row.events if reason != "ok")
    assert ("info", "ok") not in row.events  # no compaction of a failing summariser is "ok"
    assert f"last: {reason}" in row.status


@pytest.mark.parametrize("engine", ENGINES)
def test_a_retry_after_beyond_the_cap_cools_down_that_long(
    rows: dict[tuple[str, str], Any], engine: str
) -> None:
    row = rows[("429 long", engine)]
    assert row.request_turns == row.request_turns[:1]  # one turn of requests, then the cooldown
    assert row.status.startswith("cooling down")


def test_a_row_exposes_a_misreported_failure() -> None:
    # The judge is what makes the matrix fail: it must flag an info event for a fallback.
    from contextengine.events import CompactionEvent

    quiet = CompactionEvent(phase="auto", fallback_used=True, level="info")
    assert faults._judge_event(quiet, None)
    unexplained = CompactionEvent(phase="auto", level="info")
    assert faults._judge_event(unexplained, False)  # its last request was served a fault
    assert faults._judge_event(CompactionEvent(phase="auto", reason="auth", level="warning"), None)
    alarm = CompactionEvent(
        phase="preflight", aborted=True, reason="below_threshold", level="warning"
    )
    assert faults._judge_event(alarm, None)
    honest = CompactionEvent(phase="auto", fallback_used=True, reason="timeout", level="warning")
    assert faults._judge_event(honest, False) is None
