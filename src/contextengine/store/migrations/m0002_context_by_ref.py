"""Migration 2: find an item of the active context by its reference.

A compaction step replaces one run of the active context in place
(:class:`~contextengine.store.ContextSplice`), located by the ids of its first
and last items. This index makes that lookup a seek instead of a scan of the
conversation's whole context.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION", "SQLITE", "VERSION"]

VERSION = 2
DESCRIPTION = "active context indexed by reference"

SQLITE: tuple[str, ...] = (
    "CREATE INDEX context_items_by_ref ON context_items(conversation_id, ref_id)",
)
