"""Bounded resources: a huge tool output and a long session stay within the window and in memory.

Runs ``benchmarks/reliability/resources.py`` in quick mode (a 1 MB tool
output, a 5,000-message session), each case in a fresh interpreter as the
script does, and asserts what must hold whatever the machine: every request
fits the window, ``lcm_grep`` finds the word in the middle of the output,
and peak memory stays under a generous multiple of the input. Memory, never
time: the full figures are in docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "resources.py"

MB = 1_000_000


def _script() -> ModuleType:
    """The benchmark script, imported by path (benchmarks/ is not a package)."""
    name = "_reliability_resources"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


resources = _script()

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ru_maxrss in KiB and /proc are Linux's"
)


@pytest.fixture(scope="module", params=["compressor", "lcm"])
def big(request: pytest.FixtureRequest) -> dict[str, Any]:
    result: dict[str, Any] = resources.spawn(
        "big", request.param, resources.QUICK_OUTPUT_MB * MB, 120
    )
    return result


def test_a_huge_tool_output_in_the_tail_fits_the_window(big: dict[str, Any]) -> None:
    assert big["fits"] and big["request_tokens"] <= resources.CONTEXT
    # It went out cut or replaced, never whole (it is ~250k tokens).
    assert big["how"].startswith(("excerpt with marker", "replaced by a reference"))


def test_a_huge_tool_output_costs_a_bounded_multiple_of_its_size(big: dict[str, Any]) -> None:
    grown_kib = big["peak_kib"] - big["baseline_kib"]
    assert grown_kib * 1024 < 20 * big["output_bytes"]


def test_lcm_grep_finds_the_word_in_the_middle_of_the_output(big: dict[str, Any]) -> None:
    if big["engine"] != "lcm":
        pytest.skip("only lcm has lcm_grep")
    assert big["grep_found"] is True


@pytest.mark.parametrize("engine", ["compressor", "lcm"])
def test_a_long_session_stays_in_the_window_and_in_bounded_memory(engine: str) -> None:
    result = resources.spawn("long", engine, resources.QUICK_MESSAGES, 300)
    assert result["messages"] >= resources.QUICK_MESSAGES and not result["stopped"]
    assert result["over_window"] == 0
    assert result["compactions"] > 0
    grown_kib = result["peak_kib"] - result["baseline_kib"]
    assert grown_kib * 1024 < 20 * result["input_bytes"]
    if engine == "lcm":
        assert result["archive_bytes"] > result["input_bytes"] // 2  # every message is kept


def test_the_tables_and_the_verdict_come_from_the_results(big: dict[str, Any]) -> None:
    broken = {**big, "fits": False}
    assert resources.failures([broken], []) != []
    assert resources.failures([big], []) == []
    assert "| " + big["engine"] + " |" in "\n".join(resources._big_table([big]))
