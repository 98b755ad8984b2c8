"""The archive of the lossless engine: the ``Store`` protocol, ``SQLiteStore`` and ``open_store``.

``open_store`` is how the engine and the CLI turn a user's ``store=`` setting
into a store: a path, ``":memory:"``, a ``sqlite:///path`` URL, a
``postgresql://`` URL (needs the ``contextengine[postgres]`` extra), a
``Store`` object (returned as is) or None for the default file under the user
data directory (:func:`default_store_path`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contextengine.errors import StoreError
from contextengine.store.protocol import (
    ContextRef,
    ContextSplice,
    ConversationInfo,
    LargeContent,
    LineageStore,
    NewSummary,
    SearchHit,
    SearchPage,
    Store,
    StoredMessage,
    SummaryRecord,
)
from contextengine.store.sqlite import SQLiteStore

__all__ = [
    "ContextRef",
    "ContextSplice",
    "ConversationInfo",
    "LargeContent",
    "LineageStore",
    "NewSummary",
    "SQLiteStore",
    "SearchHit",
    "SearchPage",
    "Store",
    "StoredMessage",
    "SummaryRecord",
    "default_store_path",
    "open_engine_store",
    "open_store",
]


def default_store_path() -> Path:
    """``archive.db`` under ``$CONTEXTENGINE_HOME``, ``$XDG_DATA_HOME/contextengine`` or
    ``~/.local/share/contextengine``, first that is set."""
    home = os.environ.get("CONTEXTENGINE_HOME")
    if home:
        return Path(home).expanduser() / "archive.db"
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "contextengine" / "archive.db"


def open_store(
    spec: str | os.PathLike[str] | Store | None = None, *, read_only: bool = False, **options: Any
) -> Store:
    """Open the store ``spec`` names; ``options`` go to the store's constructor.

    Called by ``LosslessEngine`` for its ``store=`` argument and by
    ``contextengine archive --store``. ``None`` means the default archive file.
    ``sqlite:///rel.db`` is a relative path and ``sqlite:////abs.db`` an
    absolute one (the SQLAlchemy convention); ``sqlite://`` is in memory.

    ``read_only`` opens an existing SQLite archive for reading only: a missing
    file is a :class:`StoreError` rather than a new archive, and nothing is
    created or migrated (see :mod:`contextengine.store.sqlite_readonly`). The
    ``contextengine archive`` read commands use it. It does not apply to a
    ``Store`` object (returned as is) nor to PostgreSQL, whose access rights
    are the server's.
    """
    if spec is None:
        return SQLiteStore(default_store_path(), read_only=read_only, **options)
    if isinstance(spec, Store) and not isinstance(spec, (str, os.PathLike)):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise StoreError(f"store must be a path, URL or Store object, not {type(spec).__name__}")
    text = os.fspath(spec)
    if text.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        try:
            from contextengine.store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]  # written later (issue 7)
        except ImportError as exc:
            raise StoreError(
                "a postgresql:// store needs the PostgreSQL extra: "
                f"pip install 'contextengine[postgres]' ({exc})"
            ) from exc
        store: Store = PostgresStore(text, read_only=read_only, **options)
        return store
    if text.startswith("sqlite:"):
        rest = text[len("sqlite:") :]
        if rest in ("", "//", "///:memory:", "//:memory:"):
            return SQLiteStore(":memory:", read_only=read_only, **options)
        if not rest.startswith("///"):
            raise StoreError(f"malformed SQLite URL {text!r}; use sqlite:///relative/path.db")
        return SQLiteStore(rest[3:], read_only=read_only, **options)
    if "://" in text:
        raise StoreError(f"unsupported store URL {text!r}; use a path, sqlite:/// or postgresql://")
    path = Path(text).expanduser() if text != ":memory:" else text
    return SQLiteStore(path, read_only=read_only, **options)


def open_engine_store(
    spec: str | os.PathLike[str] | Store | None, *, redact_at_rest: bool = False
) -> tuple[Store, bool]:
    """The archive an engine's setting names, and whether the engine owns it (closes it).

    Shared by lcm's ``store=`` and the compressor's ``archive=``, so both
    accept the same values: a path, ``":memory:"``, a URL, a ``Store`` object
    (kept as is, with its own ``redact_at_rest`` setting, and not owned) or
    None for the default archive file (:func:`default_store_path`).
    """
    owns = not isinstance(spec, Store) or isinstance(spec, str | os.PathLike)
    options = {"redact_at_rest": True} if redact_at_rest else {}
    store = open_store(spec if spec is not None else default_store_path(), **options)
    return store, owns
