"""Retention rules of the archive: which whole conversations ``prune`` deletes.

Shared by every store's ``prune`` and by ``contextengine archive prune
--dry-run`` (which shows the plan without deleting). The rule: first every
conversation not updated for ``older_than_s`` seconds; then, while the
remaining conversations hold more than ``max_bytes``, the least recently
updated one. A conversation is deleted whole or not at all, so no summary ever
loses its sources.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from contextengine.store.protocol import ConversationInfo

__all__ = ["parse_duration", "parse_size", "plan_prune"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w|y)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000, "t": 1_000_000_000_000}


def plan_prune(
    conversations: Sequence[ConversationInfo],
    *,
    now: float,
    older_than_s: float | None = None,
    max_bytes: int | None = None,
) -> list[ConversationInfo]:
    """The conversations ``prune`` deletes, oldest updated first."""
    ordered = sorted(conversations, key=lambda c: (c.updated_at, c.id))
    doomed: list[ConversationInfo] = []
    kept: list[ConversationInfo] = []
    for info in ordered:
        if older_than_s is not None and info.updated_at < now - older_than_s:
            doomed.append(info)
        else:
            kept.append(info)
    if max_bytes is not None:
        total = sum(c.bytes for c in kept)
        while kept and total > max_bytes:
            victim = kept.pop(0)
            total -= victim.bytes
            doomed.append(victim)
    return doomed


def parse_duration(text: str) -> float:
    """Seconds in "30d", "12h", "90m", "2w", "45s" (a bare number is seconds)."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (examples: 30d, 12h, 90m)")
    return float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]


def parse_size(text: str) -> int:
    """Bytes in "500MB", "2GB", "100k", "1GiB" (a bare number is bytes)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 500MB, 2GB)")
    unit = (match.group(2) or "").lower()
    binary = "i" in unit
    prefix = unit.rstrip("b").rstrip("i")
    factor = _SIZE_UNITS[prefix]
    if binary:
        factor = 1024 ** (" kmgt".index(prefix))
    return int(float(match.group(1)) * factor)
