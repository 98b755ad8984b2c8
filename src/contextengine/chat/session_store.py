"""Chat sessions persisted in SQLite: the data format behind ``--resume`` and ``sessions``.

Location: ``$CONTEXTENGINE_HOME/sessions.db``, else
``$XDG_DATA_HOME/contextengine/sessions.db``, else
``~/.local/share/contextengine/sessions.db``; ``":memory:"`` works for tests.

Rules of the format
    * ``sessions`` holds one row per chat session, keyed by ``id`` (a short
      random hex string); ``created_at`` never changes, ``updated_at`` moves
      on every save.
    * ``messages`` holds the session's *current* history, ``(session_id, seq)``
      being the identity, ``seq`` counting from 0, each message one OpenAI
      chat message as JSON text. A save replaces the whole history in one
      transaction, because a compaction rewrites it; what a compaction drops
      is the engine's business (the lossless engine archives it), not this
      store's.
    * Rows are deleted only by :meth:`SessionStore.delete`, on the user's request.
    * Schema changes are numbered migrations applied on open, tracked in
      ``PRAGMA user_version``.
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


def _title(messages: list[Message]) -> str:
    for msg in messages:
        content = msg.get("content")
        if msg.get("role") == "user" and isinstance(content, str) and content.strip():
            line = " ".join(content.split())
            return line[:60] + ("…" if len(line) > 60 else "")
    return ""


class SessionStore:
    """Chat sessions in one SQLite file. Use as a context manager, or call :meth:`close`."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        if path is None:
            path = data_dir() / "sessions.db"
        location = str(path)
        if location != ":memory:":
            Path(location).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(location)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the session store {location}: {exc}") from exc
        self.path = location

    def _migrate(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        for number in range(version, len(MIGRATIONS)):
            with self._db:
                self._db.executescript(MIGRATIONS[number])
                # PRAGMA does not take parameters; the value is our own integer.
                self._db.execute(f"PRAGMA user_version = {number + 1}")

    def close(self) -> None:
        self._db.close()

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
        self, session_id: str, messages: list[Message], *, model: str = "", engine: str = ""
    ) -> None:
        """Create or update a session with its current history (replaced as a whole)."""
        now = time.time()
        rows = [(session_id, seq, json.dumps(msg)) for seq, msg in enumerate(messages)]
        try:
            with self._db:
                self._db.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, model, engine, title) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                    "updated_at = excluded.updated_at, model = excluded.model, "
                    "engine = excluded.engine, title = excluded.title",
                    (session_id, now, now, model, engine, _title(messages)),
                )
                self._db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
                self._db.executemany(
                    "INSERT INTO messages (session_id, seq, message) VALUES (?, ?, ?)", rows
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot save session {session_id}: {exc}") from exc

    def load(self, session_id: str) -> list[Message]:
        """The saved history of a session; StoreError when there is no such session."""
        found = self._db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if found is None:
            raise StoreError(f"no chat session {session_id!r}")
        rows = self._db.execute(
            "SELECT message FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first."""
        rows = self._db.execute(
            "SELECT s.id, s.created_at, s.updated_at, s.model, s.engine, s.title, "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) "
            "FROM sessions s ORDER BY s.updated_at DESC, s.id LIMIT ?",
            (limit,),
        ).fetchall()
        return [SessionInfo(*row) for row in rows]

    def delete(self, session_id: str) -> bool:
        """Delete a session and its messages; False when it did not exist."""
        with self._db:
            cursor = self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return cursor.rowcount > 0
