"""Migration 3 of the PostgreSQL archive: bounded index segments; the store writes ``tsv``.

Two changes, both for search and ingest at scale:

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
  one: ``setweight(to_tsvector('ce_english', words(body)), 'A') ||
  setweight(to_tsvector('ce_english', words(ctx)), 'D')`` for messages, weight
  A alone for summaries and segments, where ``words`` turns ASCII punctuation
  into spaces (:func:`contextengine.store.postgres_search.index_words`), as
  migration 1's expression did with SQL ``translate()``. The store computes
  ``words`` in Python: ``translate()`` was most of the server's cost per row
  (an import ran at 3,800 rows/s with the generated column, 9,000 without).
  Rows written before keep their values, which this expression reproduces.

The step moves the text beyond segment 0 of every oversized row into
``search_segments``. ``DROP EXPRESSION`` needs PostgreSQL 13 or later.
"""

from __future__ import annotations

from typing import Any

from contextengine.store.segments import SEGMENT_CHARS, segment_text

__all__ = ["DESCRIPTION", "POSTGRES", "POSTGRES_OPTIONAL", "POSTGRES_STEP", "VERSION"]

VERSION = 3
DESCRIPTION = "long texts indexed in bounded segments; tsv written by the store"

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
)

# Only where migration 1 could install pg_trgm; refused (and skipped) elsewhere.
POSTGRES_OPTIONAL: tuple[str, ...] = (
    "CREATE INDEX search_segments_body_trgm ON search_segments USING GIN"
    " (body public.gin_trgm_ops)",
)


def _resegment(conn: Any) -> None:
    """Cut every oversized ``body`` into segments (in the migration's transaction)."""
    from contextengine.store.postgres_search import BODY_TSV, SEGMENT_TSV, index_words

    for table, kind, owner, ctx in (
        ("messages", 0, "seq", "ctx"),
        ("summaries", 1, "pk", "''"),
    ):
        pks = [
            r[0]
            for r in conn.execute(
                f"SELECT pk FROM {table} WHERE length(body) > %s", (SEGMENT_CHARS,)
            ).fetchall()
        ]
        for pk in pks:
            conversation_id, order, body, context = conn.execute(
                f"SELECT conversation_id, {owner}, body, {ctx} FROM {table} WHERE pk = %s", (pk,)
            ).fetchone()
            segments = segment_text(body)
            conn.execute(
                f"UPDATE {table} SET body = %s, tsv = {BODY_TSV} WHERE pk = %s",
                (segments[0], index_words(segments[0]), index_words(context), pk),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO search_segments (conversation_id, kind, owner, segment, body, tsv)"
                    f" VALUES (%s, %s, %s, %s, %s, {SEGMENT_TSV})",
                    [
                        (conversation_id, kind, order, k, text, index_words(text))
                        for k, text in enumerate(segments)
                        if k
                    ],
                )


POSTGRES_STEP = _resegment
