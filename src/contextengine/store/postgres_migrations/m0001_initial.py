"""Migration 1 of the PostgreSQL archive: the tables of the SQLite schema, plus search columns.

The full-text index is a generated ``tsvector`` column (``tsv``) on
``messages`` and ``summaries`` with a GIN index. Its text-search
configuration ``ce_english`` is English Snowball stemming *without* a stop-word
list, like the SQLite store's ``porter`` tokenizer: stop words are dropped from
queries by :func:`contextengine.store.search.parse_query` only when the query
has other words, so a search for "the who" still finds rows. ``body`` is the
searchable text (message text plus tool-call names and arguments; NUL
characters, which PostgreSQL text cannot hold, become spaces there only).
``ctx`` holds the first characters of the message before it, indexed with
weight D (``body`` has weight A), the SQLite store's document expansion:
words of a question help find its answer. Phrases match ``body`` only.

Before parsing, ASCII punctuation becomes spaces, so words split as the
SQLite store's ``unicode61`` tokenizer splits them: PostgreSQL's own parser
would read ``orchard-003`` as ``orchard`` and the number ``-003``, and
``v1.2`` or ``a@b.com`` as single tokens no query word matches.

Texts that hold NUL characters (``summaries.content``, ``large_contents.content``)
are stored as a JSON string literal with ``nul_escaped`` set, so nothing is lost.

Optional: a pg_trgm GIN index on ``body`` to speed up regex search (``~``).
"""

from __future__ import annotations

__all__ = ["DESCRIPTION", "POSTGRES", "POSTGRES_OPTIONAL", "VERSION"]

VERSION = 1
DESCRIPTION = "initial schema"

#: Characters of ``body`` that go into the tsvector (PostgreSQL caps a tsvector at 1 MB).
_TSV_CHARS = 200_000
#: ASCII punctuation, turned into spaces before parsing (see the module docstring).
_PUNCTUATION = "!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~"
_SPACES = " " * 32


def _words(column: str) -> str:
    return f"translate({column}, '{_PUNCTUATION}', '{_SPACES}')"


_BODY = _words(f"left(body, {_TSV_CHARS})")


POSTGRES: tuple[str, ...] = (
    "CREATE TEXT SEARCH DICTIONARY ce_english_stem (TEMPLATE = pg_catalog.snowball,"
    " LANGUAGE = english)",
    "CREATE TEXT SEARCH CONFIGURATION ce_english (COPY = pg_catalog.english)",
    "ALTER TEXT SEARCH CONFIGURATION ce_english ALTER MAPPING FOR asciiword, asciihword,"
    " hword_asciipart, word, hword, hword_part WITH ce_english_stem",
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        session_key TEXT NOT NULL UNIQUE,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )
    """,
    "CREATE INDEX conversations_by_updated ON conversations (updated_at)",
    f"""
    CREATE TABLE messages (
        pk BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        role TEXT NOT NULL,
        json TEXT NOT NULL,
        token_count INTEGER NOT NULL,
        identity_key TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        body TEXT NOT NULL,
        ctx TEXT NOT NULL DEFAULT '',
        tsv TSVECTOR GENERATED ALWAYS AS (
            setweight(to_tsvector('ce_english'::regconfig, {_BODY}), 'A')
            || setweight(to_tsvector('ce_english'::regconfig, {_words("ctx")}), 'D')
        ) STORED,
        UNIQUE (conversation_id, seq),
        UNIQUE (conversation_id, identity_key)
    )
    """,
    "CREATE INDEX messages_tsv ON messages USING GIN (tsv)",
    f"""
    CREATE TABLE summaries (
        pk BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('leaf', 'condensed')),
        depth INTEGER NOT NULL,
        content TEXT NOT NULL,
        nul_escaped BOOLEAN NOT NULL DEFAULT FALSE,
        token_count INTEGER NOT NULL,
        seq_start BIGINT NOT NULL,
        seq_end BIGINT NOT NULL,
        time_start DOUBLE PRECISION NOT NULL,
        time_end DOUBLE PRECISION NOT NULL,
        descendant_count INTEGER NOT NULL,
        fallback BOOLEAN NOT NULL DEFAULT FALSE,
        created_at DOUBLE PRECISION NOT NULL,
        body TEXT NOT NULL,
        tsv TSVECTOR GENERATED ALWAYS AS
            (setweight(to_tsvector('ce_english'::regconfig, {_BODY}), 'A'))
            STORED
    )
    """,
    "CREATE INDEX summaries_by_conversation ON summaries (conversation_id, depth)",
    "CREATE INDEX summaries_tsv ON summaries USING GIN (tsv)",
    """
    CREATE TABLE summary_sources (
        summary_id TEXT NOT NULL REFERENCES summaries (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        source_kind TEXT NOT NULL CHECK (source_kind IN ('message', 'summary')),
        source_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        PRIMARY KEY (summary_id, position)
    )
    """,
    "CREATE INDEX summary_sources_by_source ON summary_sources (conversation_id, source_id)",
    """
    CREATE TABLE context_items (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('message', 'summary')),
        ref_id TEXT NOT NULL,
        PRIMARY KEY (conversation_id, position)
    )
    """,
    """
    CREATE TABLE large_contents (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        content TEXT NOT NULL,
        nul_escaped BOOLEAN NOT NULL DEFAULT FALSE,
        token_count INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    )
    """,
    "CREATE INDEX large_contents_by_conversation ON large_contents (conversation_id)",
)

# pg_trgm goes to the public schema, never the archive's own: dropping an
# archive's schema must not drop an extension other schemas' indexes use.
POSTGRES_OPTIONAL: tuple[str, ...] = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public",
    "CREATE INDEX messages_body_trgm ON messages USING GIN (body public.gin_trgm_ops)",
    "CREATE INDEX summaries_body_trgm ON summaries USING GIN (body public.gin_trgm_ops)",
)
