"""Migration 3: long texts are indexed in bounded segments.

Until migration 2 every message and summary had exactly one ``search_index``
row holding its whole searchable text, however long (a 10 MB tool output made
one 10 MB row, and search read all of it). From migration 3 on, a text longer
than :data:`~contextengine.store.segments.SEGMENT_CHARS` is indexed in
segments (:mod:`contextengine.store.segments`): segment 0 stays at the row's
own rowid (with the ``ctx`` column as before), segments 1, 2... are rows at
``SEGMENT_BASE + (owner << 20) + k`` (negated for summaries) with an empty
``ctx``. Short texts, nearly all of them, are untouched.

The step re-indexes the rows of an existing archive whose text is longer than
one segment. It reads the index once to find them (a full scan: seconds for a
million messages) and rewrites only those.
"""

from __future__ import annotations

import sqlite3

from contextengine.store.segments import SEGMENT_CHARS, segment_rowid, segment_text

__all__ = ["DESCRIPTION", "SQLITE", "SQLITE_STEP", "VERSION"]

VERSION = 3
DESCRIPTION = "long texts indexed in bounded segments"

SQLITE: tuple[str, ...] = ()


def _resegment(db: sqlite3.Connection) -> None:
    """Cut every oversized index row into segments (in the migration's transaction)."""
    long_rows = [
        r[0]
        for r in db.execute(
            "SELECT rowid FROM search_index WHERE length(body) > ?", (SEGMENT_CHARS,)
        ).fetchall()
    ]
    for rowid in long_rows:
        conv, body = db.execute(
            "SELECT conv, body FROM search_index WHERE rowid = ?", (rowid,)
        ).fetchone()
        segments = segment_text(str(body))
        db.execute("UPDATE search_index SET body = ? WHERE rowid = ?", (segments[0], rowid))
        db.executemany(
            "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, '')",
            [(segment_rowid(rowid, k), conv, text) for k, text in enumerate(segments) if k],
        )


SQLITE_STEP = _resegment
