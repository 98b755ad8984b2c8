"""Migration 1: the initial archive schema (conversations, messages, summaries, FTS index).

Row ids of the full-text table ``search_index`` point into two tables: a
positive rowid is ``messages.rowid``, a negative one is ``-summaries.rowid``.
Its ``conv`` column holds one token per row, the conversation's search token,
so every query is restricted to one conversation inside the FTS engine itself.
``body`` is the row's searchable text; ``ctx`` holds the first characters of
the message before it (document expansion: an answer is often found by the
words of the question that prompted it; +7 points of recall@5 on LoCoMo).
``rank`` weighs them 0 / 1 / 0.4.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION", "SQLITE", "VERSION"]

VERSION = 1
DESCRIPTION = "initial schema"

SQLITE: tuple[str, ...] = (
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL UNIQUE,
        search_token TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )
    """,
    "CREATE INDEX conversations_by_updated ON conversations(updated_at)",
    """
    CREATE TABLE messages (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        json TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        identity_key TEXT NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (conversation_id, seq),
        UNIQUE (conversation_id, identity_key)
    )
    """,
    """
    CREATE TABLE summaries (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('leaf', 'condensed')),
        depth INTEGER NOT NULL,
        content TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        seq_start INTEGER NOT NULL,
        seq_end INTEGER NOT NULL,
        time_start REAL NOT NULL,
        time_end REAL NOT NULL,
        descendant_count INTEGER NOT NULL,
        fallback INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL
    )
    """,
    "CREATE INDEX summaries_by_conversation ON summaries(conversation_id, depth)",
    """
    CREATE TABLE summary_sources (
        summary_id TEXT NOT NULL REFERENCES summaries(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        source_kind TEXT NOT NULL CHECK (source_kind IN ('message', 'summary')),
        source_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        PRIMARY KEY (summary_id, position)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX summary_sources_by_source ON summary_sources(conversation_id, source_id)",
    """
    CREATE TABLE context_items (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('message', 'summary')),
        ref_id TEXT NOT NULL,
        PRIMARY KEY (conversation_id, position)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE large_contents (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        content TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        created_at REAL NOT NULL
    )
    """,
    "CREATE INDEX large_contents_by_conversation ON large_contents(conversation_id)",
    """
    CREATE VIRTUAL TABLE search_index USING fts5(
        conv, body, ctx, tokenize = 'porter unicode61 remove_diacritics 2'
    )
    """,
    "INSERT INTO search_index(search_index, rank) VALUES ('rank', 'bm25(0.0, 1.0, 0.4)')",
)
