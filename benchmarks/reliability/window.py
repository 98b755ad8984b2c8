"""The window guarantee on real sessions: requests over the window, per engine and window.

Every agent session in ``../shared/data`` (the Claude Code sessions of
spotter, the mini-swe-agent SWE-bench trajectories, the tau-bench airline
runs) is replayed with ``contextengine replay --compare compressor,lcm`` at
context windows of 4,000, 8,000 and 32,000 tokens, in one subprocess per
dataset and window (the CLI a user runs, its JSON output). For each engine the
table adds up the requests replayed, the requests sent over the window
(``overflow_requests``: the exact count of what the host returned, against
the window) and the requests refused with ``ContextOverflowError`` before
anything was sent (``refused_requests``: the system prompt, the tool schemas
and the latest user message alone exceed the window), beside the unmanaged
baseline's requests over the window.

The promise (issue 11) is 0 over the window for both engines on every replay;
a refusal is the documented answer when nothing could fit.

Run: ``PYTHONPATH=src python benchmarks/reliability/window.py [--quick]
[--output docs/reliability.md]``. ``--quick`` replays only the first file of
each dataset at 4,000 tokens. Exits 1 when a request went over the window.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

SECTION = "The window guarantee on real sessions"
NAME = "window"
# _page.py lies beside this script; this folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
WINDOWS = (4_000, 8_000, 32_000)
ENGINES = ("compressor", "lcm")


def datasets(data: Path = DATA) -> dict[str, list[Path]]:
    """The agent-session files of each dataset present (LoCoMo is QA, not agent sessions)."""
    found = {
        "Claude Code (spotter)": sorted((data / "spotter" / "transcripts").glob("*.jsonl")),
        "SWE-bench (mini-swe-agent)": sorted((data / "mini-swe-agent" / "trajs").glob("*.json")),
        "tau-bench": sorted((data / "tau-bench" / "historical_trajectories").glob("*.json")),
    }
    return {name: files for name, files in found.items() if files}


def replay(files: Sequence[Path], window: int) -> list[dict[str, object]]:
    """``contextengine replay --compare compressor,lcm --json`` on ``files``: its session rows."""
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(ROOT / "src"))
    command = [sys.executable, "-m", "contextengine", "replay", *map(str, files)]
    command += ["--compare", ",".join(ENGINES), "--context-length", str(window)]
    command += ["--json", "--quiet", "--summary-model", "offline"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"replay failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    rows: list[dict[str, object]] = json.loads(done.stdout)["sessions"]
    return rows


def run(quick: bool = False, data: Path = DATA) -> tuple[str, int]:
    """The markdown table, and the requests over the window in all."""
    found = datasets(data)
    if not found:
        return "`../shared/data` is absent: nothing to replay.", 0
    windows = WINDOWS[:1] if quick else WINDOWS
    lines = [
        "| dataset | window | sessions | engine | requests | over the window | refused"
        " (nothing could fit) | baseline over the window |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    over_all = 0
    started = time.perf_counter()
    for name, files in found.items():
        chosen = files[:1] if quick else files
        for window in windows:
            totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
            for row in replay(chosen, window):
                t = totals[str(row["engine"])]
                t[0] += 1
                t[1] += int(row["requests"])  # type: ignore[call-overload]
                t[2] += int(row["overflow_requests"])  # type: ignore[call-overload]
                t[3] += int(row["refused_requests"])  # type: ignore[call-overload]
                t[4] += int(row["baseline_overflow_requests"])  # type: ignore[call-overload]
            for engine in ENGINES:
                sessions, requests, over, refused, baseline = totals[engine]
                over_all += over
                lines.append(
                    f"| {name} | {window:,} | {sessions:,} | {engine} | {requests:,} |"
                    f" **{over}** | {refused} | {baseline:,} |"
                )
    seconds = time.perf_counter() - started
    lines += [
        "",
        "Each row: every session of the dataset replayed by `contextengine replay --compare"
        " compressor,lcm` at that window with the offline summariser. Over the window: requests"
        " the host returned that are larger than the window, counted exactly with the model's"
        " tokenizer. Refused: `ContextOverflowError` before anything was sent, because the system"
        " prompt, the tool schemas and the latest user message alone exceed the window (the"
        " session's replay goes on with its next request). Baseline: the same requests with no"
        f" management, for scale. {seconds:.0f} s in all.",
    ]
    return "\n".join(lines), over_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one file per dataset, 4,000 only")
    parser.add_argument("--output", default=None, help="rewrite the figures in this page")
    args = parser.parse_args(argv)
    body, over = run(quick=args.quick)
    figures = _page.figures(NAME, " --quick" if args.quick else "", body)
    if args.output is None:
        print(figures)
    else:
        _page.write_figures(Path(args.output), NAME, SECTION, figures)
        print(f"wrote the window figures of {args.output}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
