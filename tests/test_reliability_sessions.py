"""Whole generated sessions through ContextHost, both engines: every request keeps the invariants.

The property tests of single functions live beside them
(``test_message_integrity.py``: sanitising; ``test_compressor_properties.py``:
one ``compress``; ``test_lossless_view.py``: lcm's view). This one is the
session-level check: ``benchmarks/reliability/sessions.py`` generates whole
agent sessions with hypothesis and drives each through the host's agent-loop
calls on both engines; here at a quick count, the full count is in
docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from contextengine import ContextHost

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "sessions.py"


def _script() -> ModuleType:
    """The benchmark script, imported by path (benchmarks/ is not a package)."""
    name = "_reliability_sessions"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


sessions = _script()


def test_generated_sessions_keep_every_invariant_on_both_engines() -> None:
    result = sessions.run_sessions(60, base_seed=sessions.SEED, chunk=60)
    assert result.sessions == 60
    for name in sessions.ENGINES:
        stats = result.stats[name]
        assert stats.sessions == 60
        assert dict(stats.violations) == {}, stats.examples
        # The run exercised what it claims to: requests, compaction, cuts, refusals.
        assert stats.requests > 300
        assert stats.compactions > 0
        assert stats.window_cuts > 0
    assert result.stats["compressor"].overflows == result.stats["lcm"].overflows > 0


def test_the_table_reports_the_seed_and_zero_violations() -> None:
    figures, result = sessions.run(sessions_count=10)
    assert result.violations == 0
    assert f"hypothesis seed {sessions.SEED}" in figures
    assert "| compressor | 10 |" in figures and "| lcm | 10 |" in figures


def test_the_check_catches_a_host_that_breaks_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the window guarantee, large tool outputs at small windows go out whole:
    # the checker must see it (a checker that cannot fail proves nothing).
    def unfitted(self: Any, request: list[Any], tools: Any) -> list[Any]:
        return request

    monkeypatch.setattr(ContextHost, "_fit", unfitted)
    result = sessions.run_sessions(30, base_seed=sessions.SEED, chunk=30)
    assert result.stats["compressor"].violations["window"] > 0
    assert result.violations > 0


def test_a_lost_latest_user_message_is_a_violation() -> None:
    stats = sessions.Stats("compressor")
    system = {"role": "system", "content": "s"}
    latest = {"role": "user", "content": "the question"}
    request = [system, {"role": "user", "content": "an older question"}]
    sessions._check(
        stats, request, system=system, latest_user=latest, budget=10_000, tools_tokens=0, where="x"
    )
    assert stats.violations["latest user"] == 1
    merged = [system, {"role": "user", "content": "[summary]\n\nthe question"}]
    sessions._check(
        stats, merged, system=system, latest_user=latest, budget=10_000, tools_tokens=0, where="x"
    )
    assert stats.violations["latest user"] == 1, "a summary merged ahead of it keeps it whole"
    changed = [{"role": "system", "content": "s "}, latest]
    sessions._check(
        stats, changed, system=system, latest_user=latest, budget=10_000, tools_tokens=0, where="x"
    )
    assert stats.violations["system"] == 1


def test_the_main_entry_exits_one_on_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ContextHost, "_fit", lambda self, request, tools: request)
    assert sessions.main(["--sessions", "30"]) == 1
