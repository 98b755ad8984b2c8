"""Retrieval quality of ``lcm_grep`` text search: recall@5 and recall@10 on LoCoMo.

Each LoCoMo conversation becomes one stored conversation; each dialog turn one
message, in order (seq = turn index across sessions). ``speaker_a`` speaks as
``user`` and ``speaker_b`` as ``assistant``; the content is
``"[<session date>] <Speaker>: <text>"`` (plus ``[shares a photo: <caption>]``
when the turn shares an image), so dates and speaker names are searchable like
any other words. Each question is searched as typed; a question counts as a hit
at k when one of its top-k results is one of its evidence turns. Category 5
(adversarial: the answer is not in the conversation) is reported separately.

A second table applies the same ranking to agent transcripts, so that a gain
on LoCoMo that costs them shows: lcm's anchor recall at 5 and 10 (one
``lcm_grep`` with the four words on each side of an anchor of a message that
left the context) on the Claude Code sessions at a 128k window and the
SWE-bench runs at 32k.

Run: ``PYTHONPATH=src python benchmarks/recall_locomo.py`` (prints markdown tables).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from contextengine.formats import load_sessions
from contextengine.replay.recall import Tally, eval_transcript
from contextengine.store import SQLiteStore

__all__ = ["CATEGORIES", "load_locomo", "locomo_table", "run", "transcripts_table"]

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DATA = SHARED / "LoCoMo" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_SESSION = re.compile(r"^session_(\d+)$")


def load_locomo(path: Path = DATA) -> list[dict[str, Any]]:
    """Per conversation: ``messages`` (OpenAI format), ``seq_of`` (dia_id -> seq) and ``qa``."""
    samples = json.loads(path.read_text())
    out = []
    for sample in samples:
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := _SESSION.match(key)) is not None
        )
        messages: list[dict[str, Any]] = []
        seq_of: dict[str, int] = {}
        for _number, key in sessions:
            date = conv.get(f"{key}_date_time", "")
            for turn in conv[key]:
                role = "user" if turn["speaker"] == conv["speaker_a"] else "assistant"
                text = f"[{date}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                seq_of[turn["dia_id"]] = len(messages)
                messages.append({"role": role, "content": text})
        out.append(
            {"id": sample["sample_id"], "messages": messages, "seq_of": seq_of, "qa": sample["qa"]}
        )
    return out


def locomo_table(path: Path = DATA, ks: tuple[int, int] = (5, 10)) -> str:
    """Measure recall@k per category on an in-memory store; return a markdown table."""
    data = load_locomo(path)
    hits: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    totals: dict[int, int] = defaultdict(int)
    with SQLiteStore(":memory:", token_counter=lambda m: 1) as store:
        for sample in data:
            cid = store.open_conversation(sample["id"])
            stored = store.append_messages(cid, sample["messages"], start_seq=0)
            for qa in sample["qa"]:
                evidence = {
                    sample["seq_of"][d] for d in qa.get("evidence", []) if d in sample["seq_of"]
                }
                if not evidence:
                    continue
                page = store.search(cid, qa["question"], scope="messages", limit=max(ks))
                seqs = [h.seq for h in page.results]
                category = int(qa["category"])
                totals[category] += 1
                for i, k in enumerate(ks):
                    if evidence & set(seqs[:k]):
                        hits[category][i] += 1
            assert len(stored) == len(sample["messages"])
    lines = [
        f"| category | questions | recall@{ks[0]} | recall@{ks[1]} |",
        "|---|---:|---:|---:|",
    ]
    for category in sorted(totals):
        n = totals[category]
        lines.append(
            f"| {category} {CATEGORIES.get(category, '')} | {n} | "
            f"{hits[category][0] / n:.1%} | {hits[category][1] / n:.1%} |"
        )
    main = [c for c in totals if c != 5]
    n = sum(totals[c] for c in main)
    at = [sum(hits[c][i] for c in main) / n for i in range(2)]
    lines.append(f"| **overall (1-4)** | {n} | **{at[0]:.1%}** | **{at[1]:.1%}** |")
    return "\n".join(lines)


def transcripts_table(shared: Path = SHARED, ks: tuple[int, int] = (5, 10)) -> str:
    """lcm's anchor recall at each k on the Claude Code sessions and the SWE-bench runs."""
    sets = (
        (
            "Claude Code sessions",
            sorted(
                p for p in (shared / "spotter" / "transcripts").glob("*.jsonl") if len(p.stem) == 36
            ),
            128_000,
        ),
        (
            "SWE-bench runs",
            sorted((shared / "mini-swe-agent" / "trajs").glob("*.traj.json")),
            32_000,
        ),
    )
    lines = [
        f"| transcripts | context | anchors | search@{ks[0]} | search@{ks[1]} |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, files, window in sets:
        if not files:
            lines.append(f"| {name} | – | not found | – | – |")
            continue
        sessions = [s for f in files for s in load_sessions(f)]
        shares: list[float | None] = []
        questions = 0
        for k in ks:
            total = Tally()
            for session in sessions:
                result = eval_transcript(session, engine="lcm", context_length=window, k=k)
                total.add(result.overall)
            shares.append(total.shares()["search"])
            questions = total.with_evidence
        cells = " | ".join("–" if v is None else f"{v:.1%}" for v in shares)
        lines.append(f"| {name} ({len(sessions)}) | {window:,} | {questions:,} | {cells} |")
    return "\n".join(lines)


def run(path: Path = DATA, shared: Path = SHARED) -> str:
    """Both tables, for docs/benchmarks.md."""
    return "\n\n".join(
        [
            locomo_table(path),
            "The same ranking on agent transcripts (lcm, anchor recall):",
            transcripts_table(shared),
            "Anchors: the paths, URLs, ids, error lines, commands and numbers with units of the "
            "messages that left the context (not in a message that stayed), at most 1,000 per "
            "session; a hit at k: one lcm_grep with the four words on each side of the anchor "
            "returns a message holding it in its top k.",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"LoCoMo not found at {args.data}", file=sys.stderr)
        return 1
    print(run(args.data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
