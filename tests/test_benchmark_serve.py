"""benchmarks/serve.py at CI size: the load benchmark runs, prints its table, and errs nowhere."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from serve_support import need

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "serve.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_serve", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_serve_benchmark_runs_at_ci_size(capsys: pytest.CaptureFixture[str]) -> None:
    need("uvicorn")
    bench = _script()
    assert bench.main(["--sessions", "3", "--turns", "20", "--context-length", "1500"]) == 0
    out = capsys.readouterr().out
    assert "| errors | 0 | 0 |" in out
    assert "| requests | 60 | 60 |" in out
    assert "proxy peak RSS (VmHWM)" in out
    compactions = next(line for line in out.splitlines() if line.startswith("- compactions:"))
    assert not compactions.startswith("- compactions: 0;")  # the load does compact
    # 10% recall turns: 2 of 20 per session, each an lcm_grep round the proxy answered.
    assert "recall turns (6, 10% of the turns; 6 lcm_grep calls answered by the proxy)" in out
    assert "- added latency of a recall turn" in out


def test_run_all_runs_the_serve_benchmark() -> None:
    spec = importlib.util.spec_from_file_location("_bench_run_all", SCRIPT.parent / "run_all.py")
    assert spec is not None and spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run_all
    spec.loader.exec_module(run_all)
    entry = next(b for b in run_all.BENCHMARKS if b[0] == "serve")
    assert entry[2]["sessions"] == 50 and entry[2]["turns"] == 40
    need("uvicorn")
    arguments = {"sessions": 2, "turns": 10, "engines": ("lcm",), "timeout": 60.0}
    text, _seconds = run_all.run_benchmark("serve", quick=False, arguments=arguments)
    assert "| errors | 0 | 0 |" in text and "engine lcm" in text
    assert "One session alone" in text and "| lcm |" in text
