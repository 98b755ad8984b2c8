"""Chat sessions persisted in SQLite: the data format behind ``--resume`` and ``sessions``.

Location: ``$CONTEXTENGINE_HOME/sessions.db``, else
``$XDG_DATA_HOME/contextengine/sessions.db``, else
``~/.local/share/contextengine/sessions.db``; ``":memory:"`` works for tests.

Rules of the format
    * ``sessions`` holds one row per chat session, keyed by ``id`` (a short
      random hex string); ``created_at`` never changes, ``updated_at`` moves
      on every save. ``model``, ``engine`` (the name or ``module:attribute``
      the engine was loaded by) and ``context_length`` (migration 2; 0 when
      unknown) are what ``chat --resume`` restores.
    * ``messages`` holds the session's *current* history, ``(session_id, seq)``
      being the identity, ``seq`` counting from 0, each message one OpenAI
      chat message as JSON text. A save replaces the whole history in one
      transaction, because a compaction rewrites it; what a compaction drops
      is the engine's business (the lossless engine archives it), not this
      store's.
    * Rows are deleted only by :meth:`SessionStore.delete`, on the user's request.
    * Schema changes are numbered migrations, tracked in ``PRAGMA user_version``,
      applied when the store is first written to.

Nothing is created by reading: the file (and its folder) is created by the
first :meth:`SessionStore.save`; until then reads find no sessions, and reads
of an existing file go through a read-only connection that migrates nothing
(a file of an older version reads as it is, a newer one is refused).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from contextengine.errors import StoreError

__all__ = ["MIGRATIONS", "SessionInfo", "SessionStore", "data_dir"]

Message = dict[str, Any]

#: Numbered migrations: MIGRATIONS[i] brings the schema from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        model TEXT NOT NULL DEFAULT '',
        engine TEXT NOT NULL DEFAULT '',
        title TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        message TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    """,
    "ALTER TABLE sessions ADD COLUMN context_length INTEGER NOT NULL DEFAULT 0;",
)


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The user data directory of contextengine (not created)."""
    env = os.environ if environ is None else environ
    if env.get("CONTEXTENGINE_HOME"):
        return Path(env["CONTEXTENGINE_HOME"])
    if env.get("XDG_DATA_HOME"):
        return Path(env["XDG_DATA_HOME"]) / "contextengine"
    return Path.home() / ".local" / "share" / "contextengine"


@dataclass(frozen=True)
class SessionInfo:
    """One row of :meth:`SessionStore.list_sessions`."""

    id: str
    created_at: float
    updated_at: float
    model: str
    engine: str
    title: str
    message_count: int
    #: The context window the session ran with; 0 when saved before it was recorded.
    context_length: int = 0


def _title(messages: list[Message]) -> str:
    for msg in messages:
        content = msg.get("content")
        if msg.get("role") == "user" and isinstance(content, str) and content.strip():
            line = " ".join(content.split())
            return line[:60] + ("…" if len(line) > 60 else "")
    return ""


class SessionStore:
    """Chat sessions in one SQLite file. Use as a context manager, or call :meth:`close`.

    The file is opened when first needed: read-only for reads (a missing file
    holds no sessions), for writing (created, migrated) by :meth:`save`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            path = data_dir() / "sessions.db"
        self.path = str(path)
        self._db: sqlite3.Connection | None = None
        self._writable = False
        self._version = len(MIGRATIONS)
        if self.path == ":memory:":
            self._writer()

    def _reader(self) -> sqlite3.Connection | None:
        """The connection to read with; None when there is no file (nothing was ever saved)."""
        if self._db is not None:
            return self._db
        if not Path(self.path).is_file():
            return None
        return self._open(write=False)

    def _writer(self) -> sqlite3.Connection:
        """The connection to write with: the file (and folder) created, migrated."""
        if self._db is not None and self._writable:
            return self._db
        return self._open(write=True)

    def _open(self, *, write: bool) -> sqlite3.Connection:
        self.close()
        try:
            if write:
                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path)
            else:
                uri = "file:" + quote(os.path.abspath(self.path), safe="/") + "?mode=ro"
                db = sqlite3.connect(uri, uri=True)
            self._db, self._writable = db, write
            db.execute("PRAGMA foreign_keys = ON")
            self._version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if self._version > len(MIGRATIONS):
                raise StoreError(
                    f"the session store {self.path} has version {self._version}, newer than "
                    f"this contextengine knows ({len(MIGRATIONS)})"
                )
            if write:
                self._migrate(db)
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise StoreError(f"cannot open the session store {self.path}: {exc}") from exc
        except StoreError:
            self.close()
            raise
        return db

    def _migrate(self, db: sqlite3.Connection) -> None:
        for number in range(self._version, len(MIGRATIONS)):
            with db:
                db.executescript(MIGRATIONS[number])
                # PRAGMA does not take parameters; the value is our own integer.
                db.execute(f"PRAGMA user_version = {number + 1}")
        self._version = len(MIGRATIONS)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def save(
        self,
        session_id: str,
        messages: list[Message],
        *,
        model: str = "",
        engine: str = "",
        context_length: int = 0,
    ) -> None:
        """Create or update a session with its current history (replaced as a whole)."""
        db = self._writer()
        now = time.time()
        rows = [(session_id, seq, json.dumps(msg)) for seq, msg in enumerate(messages)]
        try:
            with db:
                db.execute(
                    "INSERT INTO sessions"
                    " (id, created_at, updated_at, model, engine, title, context_length)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                    "updated_at = excluded.updated_at, model = excluded.model, "
                    "engine = excluded.engine, title = excluded.title, "
                    "context_length = excluded.context_length",
                    (session_id, now, now, model, engine, _title(messages), int(context_length)),
                )
                db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
                db.executemany(
                    "INSERT INTO messages (session_id, seq, message) VALUES (?, ?, ?)", rows
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot save session {session_id}: {exc}") from exc

    def _select(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        db = self._reader()
        if db is None:
            return []
        # A file of version 1 (read-only, so not migrated) has no context_length column.
        length = "s.context_length" if self._version >= 2 else "0"
        try:
            return db.execute(sql.replace("{context_length}", length), params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the session store {self.path}: {exc}") from exc

    def info(self, session_id: str) -> SessionInfo:
        """The row of one session; StoreError when there is no such session."""
        rows = self._select(_INFO + " WHERE s.id = ?", (session_id,))
        if not rows:
            raise StoreError(f"no chat session {session_id!r} in {self.path}")
        return SessionInfo(*rows[0])

    def load(self, session_id: str) -> list[Message]:
        """The saved history of a session; StoreError when there is no such session."""
        self.info(session_id)
        rows = self._select(
            "SELECT message FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return [json.loads(row[0]) for row in rows]

    def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first (none when nothing was ever saved)."""
        rows = self._select(_INFO + " ORDER BY s.updated_at DESC, s.id LIMIT ?", (limit,))
        return [SessionInfo(*row) for row in rows]

    def delete(self, session_id: str) -> bool:
        """Delete a session and its messages; False when it did not exist."""
        if self._reader() is None:
            return False
        db = self._writer()
        with db:
            cursor = db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return cursor.rowcount > 0


_INFO = (
    "SELECT s.id, s.created_at, s.updated_at, s.model, s.engine, s.title, "
    "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), {context_length} "
    "FROM sessions s"
)
