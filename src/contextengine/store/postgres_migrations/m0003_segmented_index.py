"""Migration 3 of the PostgreSQL archive: bounded index segments, Porter words written by the store.

Three changes, for search and ingest at scale:

* **Long texts are indexed in segments** (:mod:`contextengine.store.segments`).
  ``messages.body`` and ``summaries.body`` now hold segment 0 of the
  searchable text (at most :data:`~contextengine.store.segments.SEGMENT_CHARS`
  characters plus a small overlap); segments 1, 2... live in
  ``search_segments``, keyed by conversation, ``kind`` (0 message, 1
  summary), ``owner`` (the message's ``seq`` or the summary's ``pk``) and
  ``segment``. Before, ``body`` held the whole text and ``tsv`` indexed only
  its first 200,000 characters, so a word near the end of a 10 MB tool output
  was never found, and search read whole rows.
* **``tsv`` is an ordinary column the store writes**, no longer a generated
  one: the Porter stems of the text at weight A, then of ``ctx`` at weight D
  (:func:`contextengine.store.postgres_text.tsvector`), the words the SQLite
  index holds. Queries are built the same way, so both stores match the same
  rows, and the server no longer parses and stems every row (most of its
  cost per row). The ``ce_english`` configuration of migration 1 stays in the
  schema, unused.
* **``tsv`` is stored in the row** (``STORAGE MAIN``, compressed) rather
  than out of line: testing a common word row by row reads no TOAST table.
* **The full-text indexes hold the conversation** when the server has the
  ``btree_gin`` extension: ``GIN (conversation_id, tsv)`` replaces ``GIN
  (tsv)`` on ``messages`` and ``search_segments``.
* **The trigram indexes are dropped.** They made every insert about twice as
  expensive, and regex search now scans a bounded window of rows per call
  (they remain an option, see ``docs/postgres.md``).

The step rewrites ``tsv`` (and cuts ``body``) of every message and summary:
Python computes the words, one ``UPDATE`` per 5,000 rows. On a million
messages it takes minutes, once. ``DROP EXPRESSION`` needs PostgreSQL 13.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DESCRIPTION", "POSTGRES", "POSTGRES_OPTIONAL", "POSTGRES_STEP", "VERSION"]

VERSION = 3
DESCRIPTION = "long texts indexed in bounded segments; Porter words written by the store"

POSTGRES: tuple[str, ...] = (
    "ALTER TABLE messages ALTER COLUMN tsv DROP EXPRESSION",
    "ALTER TABLE summaries ALTER COLUMN tsv DROP EXPRESSION",
    """
    CREATE TABLE search_segments (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        kind SMALLINT NOT NULL CHECK (kind IN (0, 1)),
        owner BIGINT NOT NULL,
        segment INTEGER NOT NULL CHECK (segment >= 1),
        body TEXT NOT NULL,
        tsv TSVECTOR NOT NULL,
        PRIMARY KEY (conversation_id, kind, owner, segment)
    )
    """,
    "CREATE INDEX search_segments_tsv ON search_segments USING GIN (tsv)",
    # Kept in the row (compressed) rather than in the TOAST table: a probe that
    # tests ``tsv @@`` row by row then reads no second relation per row (4x faster).
    "ALTER TABLE messages ALTER COLUMN tsv SET STORAGE MAIN",
    "ALTER TABLE summaries ALTER COLUMN tsv SET STORAGE MAIN",
    "ALTER TABLE search_segments ALTER COLUMN tsv SET STORAGE MAIN",
    "DROP INDEX IF EXISTS messages_body_trgm",
    "DROP INDEX IF EXISTS summaries_body_trgm",
)

# With the btree_gin extension (contrib, like pg_trgm), the full-text indexes
# hold the conversation too: a probe for a word then reads only this
# conversation's entries, however many other conversations hold the word (a
# schema of 300,000 messages in three conversations: p95 110 ms without, 70
# with). The single-column indexes go once their replacements exist. A server
# that refuses the extension keeps migration 1's indexes.
POSTGRES_OPTIONAL: tuple[str, ...] = (
    "CREATE EXTENSION IF NOT EXISTS btree_gin WITH SCHEMA public",
    "CREATE INDEX messages_conversation_tsv ON messages USING GIN (conversation_id, tsv)",
    "CREATE INDEX search_segments_conversation_tsv ON search_segments"
    " USING GIN (conversation_id, tsv)",
    """
    DO $$ BEGIN
        IF to_regclass('messages_conversation_tsv') IS NOT NULL THEN
            DROP INDEX IF EXISTS messages_tsv;
        END IF;
        IF to_regclass('search_segments_conversation_tsv') IS NOT NULL THEN
            DROP INDEX IF EXISTS search_segments_tsv;
        END IF;
    END $$
    """,
)

_BATCH = 5_000


def _reindex(conn: Any) -> None:
    """Rewrite every row's ``tsv``, cutting oversized ``body`` values (one transaction)."""
    from contextengine.store.postgres_text import tsvector
    from contextengine.store.segments import segment_text

    for table, kind, owner, ctx in (
        ("messages", 0, "seq", "ctx"),
        ("summaries", 1, "pk", "''"),
    ):
        last = 0
        while True:
            rows = conn.execute(
                f"SELECT pk, conversation_id, {owner}, body, {ctx} FROM {table}"
                " WHERE pk > %s ORDER BY pk LIMIT %s",
                (last, _BATCH),
            ).fetchall()
            if not rows:
                break
            last = int(rows[-1][0])
            updates: list[tuple[int, str, str]] = []
            segments_rows: list[tuple[Any, ...]] = []
            for pk, conversation_id, order, body, context in rows:
                segments = segment_text(body)
                updates.append((pk, segments[0], tsvector(segments[0], context)))
                segments_rows += [
                    (conversation_id, kind, order, k, text, tsvector(text))
                    for k, text in enumerate(segments)
                    if k
                ]
            conn.execute(
                f"UPDATE {table} AS t SET body = u.b, tsv = u.v"
                " FROM unnest(%s::bigint[], %s::text[], %s::tsvector[]) AS u(pk, b, v)"
                " WHERE t.pk = u.pk",
                [list(column) for column in zip(*updates, strict=True)],
            )
            if segments_rows:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO search_segments"
                        " (conversation_id, kind, owner, segment, body, tsv)"
                        " VALUES (%s, %s, %s, %s, %s, %s::tsvector)",
                        segments_rows,
                    )


POSTGRES_STEP = _reindex
