"""Migration 4: the per-turn path indexes in batches, through a list of pending messages.

Until migration 3, ``append_messages`` wrote a message's ``search_index``
rows in the transaction that stored the message. FTS5 writes a new index
segment for every transaction that touches it, which made the index the
largest part of an agent's per-request cost (a few hundred microseconds of
a one-millisecond request). From migration 4 on, the per-turn path stores the
message and its ``index_pending`` row (its rowid, and the context text that
will be indexed beside it) in one transaction; the index rows are written
later, many messages at once (:meth:`SQLiteStore.flush_index`): when enough
are pending, before every search, and when the store closes. A pending row is
never lost: it is part of the database, so a crash leaves it for the next
flush. The bulk path still indexes in the transaction of each chunk.
"""

from __future__ import annotations

__all__ = ["DESCRIPTION", "SQLITE", "VERSION"]

VERSION = 4
DESCRIPTION = "messages waiting to be indexed"

SQLITE: tuple[str, ...] = (
    "CREATE TABLE index_pending (rowid INTEGER PRIMARY KEY, ctx TEXT NOT NULL)",
)
