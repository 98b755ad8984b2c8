"""Redaction on real agent sessions (../shared/data): few redactions, ordinary ids untouched.

The sessions were recorded by others (Claude Code, mini-swe-agent, tau-bench,
LoCoMo; each folder's SOURCE.md says where from). Their messages are what the
engines would send a summariser, so every redaction here is either a real
secret or a false positive that costs the summary a value. Skips when the
shared data folder is absent.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from contextengine import load_sessions
from contextengine.redact import redact_with_kinds

pytestmark = pytest.mark.shared_data


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


@pytest.fixture(scope="module")
def corpora(shared_data: Path) -> dict[str, list[str]]:
    """Every string of every message of every session, by corpus."""
    found: dict[str, list[str]] = {}
    sources = {
        "spotter": sorted((shared_data / "spotter" / "transcripts").rglob("*.jsonl")),
        "mini-swe-agent": sorted((shared_data / "mini-swe-agent" / "trajs").glob("*.json")),
        "tau-bench": sorted((shared_data / "tau-bench" / "historical_trajectories").glob("*.json")),
    }
    for name, files in sources.items():
        texts: list[str] = []
        for file in files:
            for session in load_sessions(file):
                _strings(session.messages, texts)
        found[name] = texts
    locomo = shared_data / "LoCoMo" / "locomo10.json"
    if locomo.is_file():
        turns = [
            turn.get("text", "")
            for sample in json.loads(locomo.read_text())
            for value in sample["conversation"].values()
            if isinstance(value, list)
            for turn in value
        ]
        found["LoCoMo"] = turns
    if not any(found.values()):
        pytest.skip("real-data test: no sessions found in the shared data folder")
    return found


@pytest.fixture(scope="module")
def redacted(corpora: dict[str, list[str]]) -> dict[str, list[tuple[str, str, Counter[str]]]]:
    return {
        name: [(text, *redact_with_kinds(text)) for text in texts]
        for name, texts in corpora.items()
    }


def test_real_sessions_get_few_redactions(
    redacted: dict[str, list[tuple[str, str, Counter[str]]]],
) -> None:
    # Measured when the rules were written (docs/reliability.md): mini-swe-agent's
    # 19 are Django test settings, SECRET_KEY='secret' (a secret by role, a
    # dummy by value); nothing else in about 10 MB of messages.
    counts = {name: Counter[str]() for name in redacted}
    for name, rows in redacted.items():
        for _, _, kinds in rows:
            counts[name].update(kinds)
    total = sum(sum(c.values()) for c in counts.values())
    assert total <= 25, counts
    samples = [
        out
        for rows in redacted.values()
        for _, out, kinds in rows
        if kinds and set(kinds) != {"named-key"}
    ]
    assert not samples, samples[:5]
    for rows in redacted.values():
        for _, out, kinds in rows:
            if kinds:
                assert "SECRET_KEY='[REDACTED]'" in out


# Identifiers a summary must keep exactly: UUIDs, commit hashes and digests
# (7 to 64 hex with a digit and a letter), paths, and any other long token
# mixing letters and digits (ids, base64), the look of a secret without being one.
_IDENTIFIERS = {
    "uuid": re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    "hex": re.compile(r"\b(?=[0-9a-f]{0,63}[0-9])(?=[0-9a-f]{0,63}[a-f])[0-9a-f]{7,64}\b", re.I),
    "path": re.compile(r"(?<![\w:/])(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)+"),
    "token": re.compile(r"(?<![\w-])(?=[\w-]{0,200}[0-9])(?=[\w-]{0,200}[a-zA-Z])[\w-]{16,200}"),
}


def test_hashes_uuids_and_paths_in_real_sessions_are_untouched(
    redacted: dict[str, list[tuple[str, str, Counter[str]]]],
) -> None:
    checked: Counter[str] = Counter()
    for name, rows in redacted.items():
        for text, out, kinds in rows:
            if kinds:
                continue  # the known Django settings: the test above checks them
            for kind, pattern in _IDENTIFIERS.items():
                for match in pattern.finditer(text):
                    assert match.group() in out, (name, kind, match.group())
                    checked[kind] += 1
    # Enough of each for the check to mean something.
    assert min(checked[kind] for kind in _IDENTIFIERS) > 100, checked
