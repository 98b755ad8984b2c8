"""The SQLite archive opened read-only: nothing created, nothing migrated, every message searched.

``SQLiteStore(path, read_only=True)`` (and ``open_store(path, read_only=True)``,
which ``contextengine archive list|grep|describe|expand|stats`` use) opens the
archive through this module. The rules:

* **Nothing is created.** A missing file is :class:`~contextengine.errors.StoreError`
  ("no archive at ..."), not a new empty archive; no folder is made.
* **No ``-wal``/``-shm`` file is created.** An archive is a WAL-mode database.
  SQLite's ``mode=ro`` still opens (and creates, and on a read-only connection
  cannot remove afterwards) the ``-wal`` and ``-shm`` files beside it, and
  fails where the folder is not writable. So the connection is chosen by what
  is on disk (:func:`connect`):

  - a write-ahead log with content (or one with its ``-shm``): a writer is
    working or crashed, and committed rows may still be only in the log. The
    archive is opened ``mode=ro``, which reads the log through the existing
    ``-shm`` and takes SQLite's usual locks, so a concurrent writer is safe.
    If the ``-shm`` is missing and the folder is not writable, SQLite cannot
    read the log: a one-line error says so (open the archive once where its
    folder is writable);
  - no write-ahead log (every writer closed cleanly; everything is in the
    database file): ``mode=ro&immutable=1``, which opens no other file and
    takes no lock, so it works on a read-only folder or filesystem. The cost:
    a writer that *starts* while the read runs is not seen, and one that
    checkpoints a large write during the read could make that read fail;
    a read command is short, and it never writes, so the archive itself is
    never at risk.

* **No migration runs.** An archive whose schema is newer than this code
  knows is refused with the version in the message; an older one is refused
  too, with the advice to open it once writable, which migrates it. (Reading
  an older schema with today's queries would be wrong in quiet ways: before
  migration 3 long texts were single index rows, before migration 4 there was
  no ``index_pending``.) A file that is not a SQLite database, or a SQLite
  database without our ``schema_version`` table, is "not a contextengine
  archive".
* **Search still sees every stored message.** Messages stored by the
  per-turn path wait in ``index_pending`` until a writer indexes them
  (:meth:`SQLiteStore.flush_index`), which a read-only connection cannot do.
  Instead each search copies the waiting messages of its conversation into a
  ``TEMP`` FTS5 table of its own connection (SQLite allows writing the temp
  schema of a read-only connection; it lives in memory and dies with the
  connection) and searches both: text mode ranks the union of both indexes'
  candidates in one ranking (:class:`UnionTextIndex`), so the result is the
  one a flushed archive gives; regex mode scans the waiting messages beside
  the indexed ones and merges the two in conversation order. What waits is
  bounded (the writer indexes every 64 messages), so this costs little.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from contextengine.errors import StoreError
from contextengine.store import ranking as _ranking
from contextengine.store import search as _search
from contextengine.store import sqlite_search as _sqlite_search
from contextengine.store._common import message_search_text
from contextengine.store.protocol import SearchHit
from contextengine.store.segments import segment_text
from contextengine.store.sqlite_bulk import index_rows
from contextengine.store.sqlite_search import SQLiteTextIndex, pack_position, unpack_position

__all__ = [
    "check_version",
    "connect",
    "open_error",
    "refuse_foreign",
    "search_regex",
    "search_text",
]

_PENDING_TABLE = "temp.pending_index"
# Same columns and tokenizer as ``search_index`` (migration 1), so the same
# MATCH expressions mean the same thing in both.
_CREATE_PENDING = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_PENDING_TABLE} USING fts5("
    "conv, body, ctx, tokenize = 'porter unicode61 remove_diacritics 2')"
)


def _uri(path: str, params: str) -> str:
    # ``?``, ``#`` and ``%`` are URI syntax: a path holding them must be quoted.
    return "file:" + quote(os.path.abspath(path), safe="/") + "?" + params


def connect(path: str) -> sqlite3.Connection:
    """A read-only connection to the archive file ``path``, creating no file (see module doc).

    Raises :class:`StoreError` for a missing file or a folder; whether the
    file is an archive is checked by the first query (:func:`check_schema`).
    """
    file = Path(path)
    if not file.exists():
        raise StoreError(f"no archive at {path} (reading does not create one)")
    if file.is_dir():
        raise StoreError(f"{path} is a folder, not an archive file")
    wal, shm = Path(path + "-wal"), Path(path + "-shm")
    live = wal.exists() and (wal.stat().st_size > 0 or shm.exists())
    params = "mode=ro" if live else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(
            _uri(path, params), uri=True, isolation_level=None, check_same_thread=False
        )
        # The temp schema (the waiting messages' index) in memory, not in a file of TMPDIR.
        db.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.Error as exc:
        raise open_error(path, exc, writing=False) from exc
    return db


def open_error(path: str, exc: sqlite3.Error, *, writing: bool) -> StoreError:
    """The one-line :class:`StoreError` for a SQLite error met while opening ``path``."""
    text = str(exc)
    if "file is not a database" in text:
        return StoreError(f"{path} is not a contextengine archive (not a SQLite database)")
    stranded = Path(path + "-wal").exists() and not Path(path + "-shm").exists()
    if not writing and stranded and "unable to open" in text:
        return StoreError(
            f"archive {path}: its write-ahead log {path}-wal holds changes that SQLite "
            f"can read only by creating {path}-shm, and the folder is not writable; "
            "open the archive once where its folder is writable"
        )
    if writing and ("readonly" in text or "read-only" in text or "unable to open" in text):
        return StoreError(f"archive {path} cannot be opened for writing: {text}")
    return StoreError(f"cannot open archive {path}: {text}")


def _tables(db: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def refuse_foreign(db: sqlite3.Connection, path: str) -> None:
    """Refuse a SQLite database that holds tables but is not an archive (before migrating it).

    Without this, opening another application's database writable would add
    the archive's tables to it.
    """
    tables = _tables(db)
    if tables and "schema_version" not in tables:
        raise StoreError(
            f"{path} is a SQLite database but not a contextengine archive (no schema_version table)"
        )


def check_version(version: int, latest: int, path: str, *, read_only: bool) -> None:
    """Refuse a schema newer than ``latest``, and, read-only, an older one (see module doc)."""
    if version > latest:
        raise StoreError(
            f"archive {path} has schema version {version}, newer than this contextengine "
            f"knows ({latest}); upgrade contextengine to read it"
        )
    if read_only and version < latest:
        raise StoreError(
            f"archive {path} has schema version {version} and is opened read-only; this "
            f"contextengine reads version {latest}: open it once writable to migrate it "
            "(e.g. `contextengine archive vacuum`)"
        )


def check_schema(db: sqlite3.Connection, path: str, latest: int) -> int:
    """Check that ``db`` is an archive this code can read as it is; return its version."""
    try:
        tables = _tables(db)
        if not tables:
            raise StoreError(f"{path} is an empty SQLite database, not a contextengine archive")
        refuse_foreign(db, path)
        (version,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    except sqlite3.Error as exc:
        raise open_error(path, exc, writing=False) from exc
    check_version(int(version), latest, path, read_only=True)
    return int(version)


# ------------------------------------------------------------------------------- search


def _load_pending(db: sqlite3.Connection, conversation_id: str, token: str) -> list[int]:
    """Index the conversation's waiting messages into the temp table; their rowids, in order.

    Runs inside the search's read transaction, so it sees the same state as
    the rest of the search: a row a writer indexed meanwhile is either still
    waiting here or already in ``search_index``, never both, never neither.
    """
    db.execute(_CREATE_PENDING)
    db.execute(f"DELETE FROM {_PENDING_TABLE}")
    rows = db.execute(
        "SELECT p.rowid, p.ctx, m.json FROM index_pending p JOIN messages m ON m.rowid = p.rowid"
        " WHERE m.conversation_id = ? ORDER BY p.rowid",
        (conversation_id,),
    ).fetchall()
    fts_rows: list[tuple[int, str, str, str]] = []
    for rowid, ctx, encoded in rows:
        segments = segment_text(message_search_text(json.loads(encoded)))
        fts_rows += index_rows(int(rowid), token, segments, str(ctx))
    db.executemany(
        f"INSERT INTO {_PENDING_TABLE} (rowid, conv, body, ctx) VALUES (?, ?, ?, ?)", fts_rows
    )
    return [int(r[0]) for r in rows]


class _PendingTextIndex(SQLiteTextIndex):
    """:class:`SQLiteTextIndex` over the temp table of waiting messages instead of the archive's."""

    def _rowids(self, match: str, low: int, high: int, limit: int) -> list[int]:
        rows = self.db.execute(
            f"SELECT rowid FROM {_PENDING_TABLE} WHERE pending_index MATCH ?"
            " AND rowid >= ? AND rowid <= ? ORDER BY rowid LIMIT ?",
            (match, low, high, limit),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def texts(self, keys: Sequence[_ranking.Key]) -> dict[_ranking.Key, tuple[str, str]]:
        wanted = {_sqlite_search._rowid(k): k for k in keys}
        out: dict[_ranking.Key, tuple[str, str]] = {}
        for rowid, body, ctx in self.db.execute(f"SELECT rowid, body, ctx FROM {_PENDING_TABLE}"):
            if int(rowid) in wanted:  # a few dozen rows at most: reading them all is cheapest
                out[wanted[int(rowid)]] = (str(body), str(ctx or ""))
        return out

    def highlight(self, key: _ranking.Key) -> str:
        match = self.conv + " AND (" + _search.fts5_match(self.parsed) + ")"
        row = self.db.execute(
            f"SELECT snippet(pending_index, 1, ?, ?, '…', 24) FROM {_PENDING_TABLE}"
            " WHERE pending_index MATCH ? AND rowid = ?",
            (_search.HIGHLIGHT_OPEN, _search.HIGHLIGHT_CLOSE, match, _sqlite_search._rowid(key)),
        ).fetchone()
        return str(row[0]) if row and row[0] else ""


class UnionTextIndex:
    """The archive's index and the waiting messages' temp index as one :class:`TextIndex`.

    The two hold disjoint rows (a message is either indexed or waiting), so a
    probe's answer is the union of both answers, cut again to the newest
    ``cap`` rows of each region: exactly what one index holding both would answer.
    """

    def __init__(self, main: SQLiteTextIndex, pending: _PendingTextIndex) -> None:
        self.main = main
        self.pending = pending

    def probe_many(self, terms: Sequence[str | None], cap: int) -> list[list[_ranking.Key]]:
        merged: list[list[_ranking.Key]] = []
        for ours, theirs in zip(
            self.main.probe_many(terms, cap), self.pending.probe_many(terms, cap), strict=True
        ):
            regions: dict[tuple[int, bool], list[_ranking.Key]] = {}
            for key in [*ours, *theirs]:
                regions.setdefault((key[0], key[2] > 0), []).append(key)
            keys: list[_ranking.Key] = []
            for region, found in regions.items():
                if region[0] == 0:  # messages: newest is the highest row, then segment
                    found = sorted(found, key=lambda k: (k[1], k[2]), reverse=True)
                keys += found[:cap]
            merged.append(keys)
        return merged

    def texts(self, keys: Sequence[_ranking.Key]) -> Mapping[_ranking.Key, tuple[str, str]]:
        return {**self.main.texts(keys), **self.pending.texts(keys)}

    def position(self, key: _ranking.Key) -> int | None:
        return self.main.position(key)

    def size(self) -> int:
        return self.main.size()

    def highlight(self, key: _ranking.Key) -> str:
        return self.pending.highlight(key) or self.main.highlight(key)


def search_text(
    db: sqlite3.Connection,
    conversation_id: str,
    token: str,
    query: str,
    scope: str,
    limit: int,
    offset: int,
) -> tuple[list[SearchHit], bool]:
    """:func:`contextengine.store.sqlite_search.search_text`, waiting messages included."""
    pending = _load_pending(db, conversation_id, token) if scope != "summaries" else []
    if not pending:
        return _sqlite_search.search_text(db, conversation_id, token, query, scope, limit, offset)
    parsed = _search.parse_query(query)
    if parsed.empty:
        return [], False
    index = UnionTextIndex(
        SQLiteTextIndex(db, conversation_id, token, parsed, scope),
        _PendingTextIndex(db, conversation_id, token, parsed, scope),
    )
    return _ranking.hits_page(
        parsed,
        index,
        offset=offset,
        limit=limit,
        owners=lambda keys: _sqlite_search.identities(db, conversation_id, keys),
        highlight=index.highlight,
    )


def _pending_regex_hits(
    db: sqlite3.Connection, rowids: Sequence[int], pattern: str, position: int
) -> list[tuple[int, SearchHit]]:
    """``(position, hit)`` of each waiting message at or after ``position`` that matches."""
    compiled = _search.compile_regex(pattern)
    kind, order, segment = unpack_position(position)
    if kind > 0 or not rowids:
        return []
    marks = ",".join("?" * len(rowids))
    rows = db.execute(
        f"SELECT seq, id, role, json FROM messages WHERE rowid IN ({marks}) AND seq >= ?"
        " ORDER BY seq",
        (*rowids, order),
    ).fetchall()
    found: list[tuple[int, SearchHit]] = []
    for seq, item_id, role, encoded in rows:
        segments = segment_text(message_search_text(json.loads(encoded)))
        start = segment if int(seq) == order else 0
        for k in range(start, len(segments)):
            span = _search.regex_find(
                compiled, segments[k], first=k == 0, last=k == len(segments) - 1
            )
            if span is not None:
                hit = SearchHit(
                    id=str(item_id),
                    kind="message",
                    seq=int(seq),
                    role=str(role),
                    snippet=_search.snippet_around(segments[k], *span),
                    score=0.0,
                )
                found.append((pack_position(0, int(seq), k), hit))
                break
    return found


def search_regex(
    db: sqlite3.Connection,
    conversation_id: str,
    token: str,
    pattern: str,
    scope: str,
    limit: int,
    position: int,
) -> tuple[list[SearchHit], int | None]:
    """:func:`contextengine.store.sqlite_search.search_regex`, waiting messages included.

    The indexed rows are scanned as usual (they stop at ``limit`` hits or the
    scan budget, at a resume position); the waiting messages are scanned
    beside them. The page is the first ``limit`` hits of both in conversation
    order, among those before the indexed scan's resume position; the next
    page starts after the last hit taken, or where the indexed scan stopped.
    """
    pending = _load_pending(db, conversation_id, token) if scope != "summaries" else []
    hits, resume = _sqlite_search.search_regex(
        db, conversation_id, token, pattern, scope, limit, position
    )
    if not pending:
        return hits, resume
    extra = _pending_regex_hits(db, pending, pattern, position)
    stop = resume if resume is not None else 1 << 63
    ordered = sorted(
        [*((pack_position(0 if h.kind == "message" else 1, _order(db, h), 0), h) for h in hits)]
        + [item for item in extra if item[0] < stop],
        key=lambda item: item[0],
    )
    if len(ordered) > limit:
        kind, order, _segment = unpack_position(ordered[limit - 1][0])
        return [h for _, h in ordered[:limit]], pack_position(kind, order + 1, 0)
    return [h for _, h in ordered], resume


def _order(db: sqlite3.Connection, hit: SearchHit) -> int:
    """The scan order of an indexed hit: a message's ``seq``, a summary's rowid."""
    if hit.kind == "message" and hit.seq is not None:
        return hit.seq
    row = db.execute("SELECT rowid FROM summaries WHERE id = ?", (hit.id,)).fetchone()
    return int(row[0]) if row else 0
