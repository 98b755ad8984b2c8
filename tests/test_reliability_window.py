"""The window guarantee on real sessions, at CI size: benchmarks/reliability/window.py's replays.

The full table (every shared-data session at 4,000, 8,000 and 32,000 tokens)
is in docs/reliability.md; here one Claude Code session and one SWE-bench
trajectory are replayed at 4,000 tokens through the real ``contextengine
replay`` command, and neither engine may send a request over the window.
Skipped when ``../shared/data`` is absent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "window.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_reliability_window", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


window = _script()
FOUND = window.datasets()
pytestmark = pytest.mark.skipif(not FOUND, reason="../shared/data is absent")


@pytest.mark.parametrize("dataset", ["Claude Code (spotter)", "SWE-bench (mini-swe-agent)"])
def test_no_engine_sends_a_request_over_a_4000_token_window(dataset: str) -> None:
    if dataset not in FOUND:
        pytest.skip(f"{dataset} is absent")
    rows = window.replay(FOUND[dataset][:1], 4_000)
    engines = {row["engine"] for row in rows}
    assert engines == set(window.ENGINES)
    assert all(row["overflow_requests"] == 0 for row in rows), rows
    # The check is not vacuous: unmanaged, the same session goes over the window.
    assert all(row["baseline_overflow_requests"] > 0 for row in rows)
