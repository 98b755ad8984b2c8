"""Archives written before migration 3 open with the new code and search as well as new ones.

Each test builds an archive exactly as versions 1-2 of the format left it
(the schema of migrations 1 and 2, rows as the store of that time wrote them:
one index row per message holding its whole text, a generated ``tsv`` on
PostgreSQL), opens it with the current store, and searches.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextengine.store import SQLiteStore, Store
from contextengine.store._common import (
    CONTEXT_CHARS,
    identity_key,
    message_id_for,
    message_search_text,
)
from contextengine.store.ids import conversation_id_for, search_token_for
from contextengine.store.migrations import load_migrations
from contextengine.store.segments import SEGMENT_CHARS
from pg_support import drop_schema, fresh_schema, require_pg

LONG = " ".join(f"line {i} of the build log" for i in range(9_000)) + " finally zanzibar42 failed"
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Why did the nightly build fail?"},
    {"role": "tool", "tool_call_id": "call_1", "content": LONG},
    {"role": "assistant", "content": "The build failed at the very end: zanzibar42."},
    {"role": "user", "content": "Thanks, open a ticket about the orchard-003 crate."},
]


def _old_rows(conversation_id: str) -> list[dict[str, Any]]:
    """The message rows of HISTORY as the version-2 store wrote them."""
    rows = []
    previous = ""
    for seq, msg in enumerate(HISTORY):
        key = identity_key(msg, seq)
        text = message_search_text(msg)
        rows.append(
            {
                "id": message_id_for(conversation_id, key),
                "seq": seq,
                "role": msg["role"],
                "json": json.dumps(msg, ensure_ascii=False, separators=(",", ":")),
                "key": key,
                "body": text,
                "ctx": previous[:CONTEXT_CHARS],
            }
        )
        previous = text
    return rows


def _check_search(store: Store, conversation_id: str) -> None:
    assert store.stats()["schema_version"] >= 3  # migrated at least to segments
    (end,) = store.search(conversation_id, "zanzibar42", scope="messages").results[:1]
    assert end.seq in (1, 2) and "«zanzibar42»" in end.snippet
    assert {h.seq for h in store.search(conversation_id, "zanzibar42").results} >= {1, 2}
    assert [h.seq for h in store.search(conversation_id, '"orchard 003"').results] == [3]
    # The tool output's first words are found, and its message is returned once.
    lines = [h.seq for h in store.search(conversation_id, "build log line").results]
    assert lines.count(1) == 1
    regex = store.search(conversation_id, r"zanzibar\d+", mode="regex", limit=5).results
    assert [h.seq for h in regex] == [1, 2]
    assert store.append_messages(conversation_id, HISTORY, start_seq=0) == []


def test_a_version_2_sqlite_archive_is_resegmented_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conversation_id = conversation_id_for("old")
    token = search_token_for(conversation_id)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE schema_version "
        "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    for migration in load_migrations("SQLITE"):
        if migration.version <= 2:
            for statement in migration.statements:
                db.execute(statement)
            db.execute(
                "INSERT INTO schema_version VALUES (?, ?, 0)",
                (migration.version, migration.description),
            )
    db.execute("INSERT INTO conversations VALUES (?, 'old', ?, 0, 0)", (conversation_id, token))
    for rowid, row in enumerate(_old_rows(conversation_id), start=1):
        db.execute(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, 1, ?, 0)",
            (rowid, row["id"], conversation_id, row["seq"], row["role"], row["json"], row["key"]),
        )
        db.execute(
            "INSERT INTO search_index (rowid, conv, body, ctx) VALUES (?, ?, ?, ?)",
            (rowid, token, row["body"], row["ctx"]),
        )
    db.commit()
    db.close()
    with SQLiteStore(path) as store:
        assert store.stats()["index_rows"] > len(HISTORY)  # the long row is in segments now
        bodies = store._db.execute("SELECT max(length(body)) FROM search_index").fetchone()
        assert bodies[0] <= SEGMENT_CHARS
        _check_search(store, conversation_id)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    require_pg()
    schema = fresh_schema()
    yield schema
    drop_schema(schema)


@pytest.mark.postgres
def test_a_version_2_postgres_archive_is_reindexed_on_open(pg_schema: str) -> None:
    import psycopg
    from psycopg import sql

    from contextengine.store.postgres import PostgresStore
    from contextengine.store.postgres_migrations import load_pg_migrations

    url = require_pg()
    conversation_id = conversation_id_for("old")
    with psycopg.connect(url) as conn:
        ident = sql.Identifier(pg_schema)
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("SET search_path TO {}, public").format(ident))
        conn.execute(
            "CREATE TABLE schema_version (version INTEGER PRIMARY KEY,"
            " description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
        )
        for migration in load_pg_migrations():
            if migration.version <= 2:
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version VALUES (%s, %s, 0)",
                    (migration.version, migration.description),
                )
        conn.execute("INSERT INTO conversations VALUES (%s, 'old', 0, 0)", (conversation_id,))
        for row in _old_rows(conversation_id):
            conn.execute(
                "INSERT INTO messages (id, conversation_id, seq, role, json, token_count,"
                " identity_key, created_at, body, ctx)"
                " VALUES (%s, %s, %s, %s, %s, 1, %s, 0, %s, %s)",
                (
                    row["id"],
                    conversation_id,
                    row["seq"],
                    row["role"],
                    row["json"],
                    row["key"],
                    row["body"],
                    row["ctx"],
                ),
            )
    with PostgresStore(url, schema=pg_schema) as store:
        assert store.stats()["index_rows"] > len(HISTORY)
        _check_search(store, conversation_id)
