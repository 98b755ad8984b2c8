"""Archive ids, derived from what they name so that every store and every run agrees.

Ids are content-derived rather than random for two reasons: a replay of the
same session produces the same archive (and the same summary texts, which
quote the ids they cover, so token counts and compaction points are
reproducible), and an archive copied between stores keeps its ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["conversation_id_for", "large_content_id_for", "search_token_for", "summary_id_for"]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


def conversation_id_for(session_key: str) -> str:
    """``conv_`` + 16 hex of the session key (session keys are unique per archive)."""
    return "conv_" + _digest("conversation", session_key)[:16]


def search_token_for(conversation_id: str) -> str:
    """A digits-only token that scopes full-text matches to one conversation.

    Digits only: stemmers and tokenizers leave such a token alone.
    """
    return "c" + str(int(_digest("search", conversation_id)[:15], 16)).zfill(18)


def summary_id_for(conversation_id: str, kind: str, source_ids: Iterable[str], content: str) -> str:
    """``sum_`` + 16 hex of the conversation, kind, ordered sources and text."""
    return "sum_" + _digest("summary", conversation_id, kind, ",".join(source_ids), content)[:16]


def large_content_id_for(conversation_id: str, message_id: str) -> str:
    """``lc_`` + 16 hex: one large content per message."""
    return "lc_" + _digest("large", conversation_id, message_id)[:16]
