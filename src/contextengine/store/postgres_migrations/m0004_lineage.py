"""Migration 4 of the PostgreSQL archive: conversation lineage and session aliases.

``conversation_links`` records that a conversation continues an earlier one
(``reason`` ``"reset"``: the user started over and the engine carried the old
conversation over, so the model can still search it). A link points one way,
from the new conversation to its parent: search from the new one reaches the
parent's messages, never the reverse, and no link ever reaches a conversation
outside that chain. ``session_aliases`` maps a session key to an existing
conversation: a host that rotates its session id at a compaction keeps one
conversation under two keys, and resuming the new key opens it. Both are
deleted with their conversation.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION", "POSTGRES", "VERSION"]

VERSION = 4
DESCRIPTION = "conversation lineage and session aliases"

POSTGRES: tuple[str, ...] = (
    """
    CREATE TABLE conversation_links (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        parent_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        reason TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (conversation_id, parent_id)
    )
    """,
    "CREATE INDEX conversation_links_by_parent ON conversation_links(parent_id)",
    """
    CREATE TABLE session_aliases (
        session_key TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        created_at DOUBLE PRECISION NOT NULL
    )
    """,
    "CREATE INDEX session_aliases_by_conversation ON session_aliases(conversation_id)",
)
