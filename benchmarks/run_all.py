"""Run every benchmark and rewrite docs/benchmarks.md with their tables.

Each benchmark is a script in this folder exposing ``run(...) -> str`` (a
markdown table or several); they are imported by path, so this folder needs
no package. A benchmark that is missing or fails gets a section saying so,
and the others still run. The page starts with the machine and the date,
since every timing in it is only meaningful on that machine.

Run: ``PYTHONPATH=src python benchmarks/run_all.py [--quick] [--only NAME ...]``
(``--quick`` passes ``quick=True`` to the benchmarks that accept it, for
smaller sizes; ``--only`` refreshes those sections and keeps the rest of the
page; ``--output -`` prints instead of writing the page).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["BENCHMARKS", "machine", "main", "run_benchmark"]

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs" / "benchmarks.md"

#: (script, section title, arguments of a full run, arguments of a --quick run), in page order.
#: ``quick=True`` is also passed to every ``run`` that accepts it under ``--quick``.
BENCHMARKS: tuple[tuple[str, str, dict[str, Any], dict[str, Any]], ...] = (
    ("tokens", "Token counting", {}, {}),
    ("compressor", "Compressor: compaction quality and speed", {}, {}),
    (
        "store",
        "Archive store (SQLite)",
        {"size": 1_000_000, "turn_sizes": (10_000, 100_000, 1_000_000)},
        {},
    ),
    (
        "store_postgres",
        "Archive store (PostgreSQL)",
        {"size": 100_000, "turn_sizes": (10_000, 100_000)},
        {},
    ),
    (
        "host",
        "Host and engine per request, warm and cold",
        {"sizes": [100, 1_000, 5_000, 50_000]},
        {"sizes": [100, 1_000, 5_000]},
    ),
    ("compaction", "Compaction: one forced, and the requests that compact", {}, {}),
    (
        "serve",
        "contextengine serve under load",
        # The load (50 x 40, both engines, 10% recall turns): about 25 s in all on 2
        # quiet cores; its three phases are bounded at 50 s each (~3 min at the very worst).
        {"sessions": 50, "turns": 40, "engines": ("lcm", "compressor"), "timeout": 50.0},
        {"sessions": 10, "turns": 10, "engines": ("lcm", "compressor"), "timeout": 60.0},
    ),
    ("session_memory", "Memory of a 100,000-message session", {}, {}),
    ("recall_locomo", "lcm_grep retrieval on LoCoMo", {}, {}),
    ("replay", "Replay and recall on real sessions", {}, {}),
    ("replay_memory", "Replay memory and speed on one long session", {}, {}),
    ("identifiers", "Identifiers that survive the summary", {}, {}),
    ("tradeoff", "Cost against recall on the Claude Code sessions", {}, {}),
)
#: Benchmarks that need a service this machine may not run (a PostgreSQL server):
#: when they fail the page says why, and the run still succeeds.
OPTIONAL = frozenset({"store_postgres"})


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return "unknown"


def machine() -> list[tuple[str, str]]:
    """(what, value) rows describing the machine the figures come from."""
    return [
        ("platform", platform.platform()),
        ("CPU", _cpu_model()),
        ("cores", str(os.cpu_count() or "unknown")),
        ("RAM", _ram()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
    ]


def _load(name: str) -> ModuleType:
    path = HERE / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(f"benchmarks/{name}.py does not exist (yet)")
    spec = importlib.util.spec_from_file_location(f"_benchmark_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    # dataclasses and pickling look the module up by name while it executes
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_benchmark(
    name: str, *, quick: bool, arguments: dict[str, Any] | None = None
) -> tuple[str, float]:
    """Run one benchmark; returns its markdown and the seconds it took."""
    module = _load(name)
    run: Callable[..., str] = module.run
    accepted = inspect.signature(run).parameters
    kwargs = {k: v for k, v in (arguments or {}).items() if k in accepted}
    if quick and "quick" in accepted:
        kwargs["quick"] = True
    started = time.perf_counter()
    text = run(**kwargs)
    return str(text).strip(), time.perf_counter() - started


def _existing_sections(page: Path) -> dict[str, str]:
    """The ``## title`` sections of an existing page, by title."""
    if not page.exists():
        return {}
    found = {}
    for chunk in page.read_text(encoding="utf-8").split("\n## ")[1:]:
        title = chunk.split("\n", 1)[0].strip()
        found[title] = "## " + chunk.rstrip() + "\n"
    return found


def _existing_notes(page: Path) -> str:
    """The hand-written paragraphs between the machine table and the first section."""
    if not page.exists():
        return ""
    head = page.read_text(encoding="utf-8").split("\n## ", 1)[0]
    lines = head.splitlines()
    table_end = max((i for i, line in enumerate(lines) if line.startswith("|")), default=-1)
    return "\n".join(lines[table_end + 1 :]).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes where supported")
    parser.add_argument("--only", nargs="*", default=None, help="run only these benchmarks")
    parser.add_argument("--output", default=str(DOCS), help="page to write ('-': print)")
    args = parser.parse_args(argv)
    chosen = [b for b in BENCHMARKS if not args.only or b[0] in args.only]
    failed = 0
    # With --only, the other sections of the existing page are kept as they are.
    kept = _existing_sections(Path(args.output)) if args.only and args.output != "-" else {}
    notes = _existing_notes(Path(args.output)) if args.only and args.output != "-" else ""
    sections = []
    for name, title, full, quick in BENCHMARKS:
        if (name, title, full, quick) not in chosen:
            if title in kept:
                sections.append(kept[title])
            continue
        print(f"running {name}...", file=sys.stderr, flush=True)
        try:
            arguments = quick if args.quick else full
            text, seconds = run_benchmark(name, quick=args.quick, arguments=arguments)
            ran = datetime.now(UTC)
            sections.append(
                f"## {title}\n\n_`benchmarks/{name}.py`, {seconds:.1f} s, "
                f"finished {ran:%Y-%m-%d %H:%M} UTC_\n\n{text}\n"
            )
        except Exception as exc:
            failed += name not in OPTIONAL
            traceback.print_exc()
            sections.append(
                f"## {title}\n\n_`benchmarks/{name}.py` did not run: {type(exc).__name__}: {exc}_\n"
            )
    now = datetime.now(UTC)
    header = [
        "# Benchmarks",
        "",
        "Generated by `PYTHONPATH=src python benchmarks/run_all.py"
        + (" --quick" if args.quick else "")
        + f"` on {now:%Y-%m-%d %H:%M} UTC. Rerun it to refresh this page; timings are only "
        "comparable on the same machine.",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {what} | {value} |" for what, value in machine()],
        "",
        *([notes, ""] if notes else []),
    ]
    page = "\n".join(header) + "\n" + "\n".join(sections)
    if args.output == "-":
        print(page)
    else:
        Path(args.output).write_text(page, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
