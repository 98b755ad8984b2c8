"""The cost-against-recall sweep (benchmarks/tradeoff.py) at CI size.

The full sweep (nine settings, five Claude Code sessions) is in
docs/benchmarks.md. Here one recorded session is replayed at the compressor's
two default settings, without and with an archive: the recoverable default
must get back what it removed and cost less than the plain one, which is the
reason it is the default. Skipped when ``../shared/data`` is absent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from contextengine.replay.cost import PRESETS
from contextengine.summary_request import SummaryRequest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "tradeoff.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_tradeoff", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tradeoff = _script()


def test_the_counting_summarizer_counts_what_a_model_would_be_sent_and_write() -> None:
    counter = tradeoff._CountingSummarizer()
    request = SummaryRequest(
        messages=[{"role": "user", "content": "Fix the bug in src/app.py, please. " * 20}]
    )
    summary = counter.summarize(request)
    assert counter.calls == 1 and counter.input_tokens > 100
    assert counter.output_tokens > 0 and "src/app.py" in summary


@pytest.mark.shared_data
def test_the_recoverable_default_is_cheaper_and_loses_nothing() -> None:
    sessions = tradeoff._spotter_sessions(tradeoff.DATA, quick=True)[:1]
    if not sessions:
        pytest.skip("../shared/data is absent")
    price = PRESETS[tradeoff.PRICE]
    plain = tradeoff._measure("plain", "compressor", {}, sessions, price)
    recoverable = tradeoff._measure(
        "recoverable", "compressor", {"archive": ":memory:"}, sessions, price
    )
    assert recoverable.cost < plain.cost
    assert recoverable.share(recoverable.identifiers, "recoverable") >= 0.99
    assert plain.share(plain.identifiers, "recoverable") < 0.9
    recorded = tradeoff._claude_code(sessions, price)
    assert recorded.compactions >= 1 and recorded.summary_cost > 0
    svg = tradeoff._svg([plain, recoverable], recorded, recorded.cost * 1.4)
    assert svg.count('r="5" fill="white"') == 2 and "Claude Code (recorded)" in svg
