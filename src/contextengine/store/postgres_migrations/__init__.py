"""Numbered schema migrations of the PostgreSQL archive (the same scheme as the SQLite ones).

Each module ``mNNNN_<name>.py`` here is one step: ``VERSION``, ``DESCRIPTION``,
``POSTGRES`` (statements that must succeed) and optionally
``POSTGRES_OPTIONAL`` (statements that improve the archive but may be refused
by the server, such as ``CREATE EXTENSION pg_trgm`` without the privilege;
each runs in its own savepoint and a refusal is skipped) and ``POSTGRES_STEP``
(a function given the connection, for data conversions SQL alone cannot do;
run last, in the same transaction).

Statements are run with ``search_path`` set to the store's schema, so they
name tables unqualified and one database can hold several archives.
:class:`~contextengine.store.postgres.PostgresStore` applies the missing steps
on open, each in its own transaction under a database-wide
``pg_advisory_xact_lock``, so two processes opening the same archive at once
migrate it exactly once. Released migrations are never edited.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from contextengine.errors import StoreError
from contextengine.store.migrations import Migration, load_migrations

__all__ = [
    "MIGRATION_LOCK",
    "PgMigration",
    "apply_pg_migrations",
    "check_pg_schema",
    "load_pg_migrations",
]

#: Advisory-lock name of migrations: database-wide, so even two schemas never migrate at once
#: (their ``CREATE EXTENSION`` steps would race).
MIGRATION_LOCK = "contextengine.migrate"

#: The PostgreSQL steps are the same :class:`~contextengine.store.migrations.Migration` records.
PgMigration = Migration


def load_pg_migrations() -> list[Migration]:
    """Every migration of this package in order; called by ``PostgresStore`` when it opens."""
    return load_migrations("POSTGRES", __name__)


def _applied(conn: Any, schema: str) -> set[int]:
    from psycopg import sql

    # quote_ident in SQL, not Python: the name is a bound parameter like every other value.
    row = conn.execute("SELECT to_regclass(quote_ident(%s) || '.schema_version')", (schema,))
    if row.fetchone()[0] is None:
        return set()
    query = sql.SQL("SELECT version FROM {}.schema_version").format(sql.Identifier(schema))
    return {int(r[0]) for r in conn.execute(query)}


def check_pg_schema(
    transaction: Callable[[], AbstractContextManager[Any]],
    schema: str,
    *,
    label: str = "PostgreSQL archive",
) -> None:
    """Check, without writing, that ``schema`` holds an archive this code can read.

    Called by a read-only ``PostgresStore`` instead of migrating: a missing
    schema is "no archive" (reading creates none), an older one must be opened
    once writable to be migrated, a newer one is refused.
    """
    latest = max(m.version for m in load_pg_migrations())
    with transaction() as conn:
        applied = _applied(conn, schema)
    if not applied:
        raise StoreError(f"{label}: no archive in schema {schema!r} (reading does not create one)")
    version = max(applied)
    if version > latest:
        raise StoreError(
            f"{label}: schema version {version} is newer than this contextengine knows"
            f" ({latest}); upgrade contextengine"
        )
    if version < latest:
        raise StoreError(
            f"{label}: schema version {version} is older than {latest}; open it once"
            " writable (any archive write command) to migrate it"
        )


def apply_pg_migrations(
    transaction: Callable[[], AbstractContextManager[Any]],
    schema: str,
    clock: Callable[[], float],
    *,
    label: str = "PostgreSQL archive",
) -> None:
    """Bring ``schema`` up to the latest migration; called by ``PostgresStore`` when it opens.

    ``transaction()`` yields a psycopg connection inside a transaction. An
    up-to-date schema costs one query and no lock (and needs no CREATE
    privilege). Otherwise each missing step runs in its own transaction under
    :data:`MIGRATION_LOCK`, re-checking under the lock whether another process
    applied it meanwhile. Optional statements run in savepoints; a refusal
    skips them. A failing required statement is a :class:`StoreError` starting
    with ``label``.
    """
    import psycopg
    from psycopg import sql

    migrations = load_pg_migrations()
    with transaction() as conn:
        if {m.version for m in migrations} <= _applied(conn, schema):
            return
    ident = sql.Identifier(schema)
    for migration in migrations:
        with transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (MIGRATION_LOCK,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(ident))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY,"
                " description TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )
            if migration.version in _applied(conn, schema):
                continue
            try:
                for statement in migration.statements:
                    conn.execute(statement)
            except psycopg.Error as exc:
                raise StoreError(
                    f"{label}: migration {migration.version} ({migration.description})"
                    f" failed: {exc}"
                ) from exc
            for statement in migration.optional:
                try:
                    with conn.transaction():  # a savepoint: a refusal undoes only this step
                        conn.execute(statement)
                except psycopg.Error:
                    continue
            if migration.step is not None:
                try:
                    migration.step(conn)
                except psycopg.Error as exc:
                    raise StoreError(
                        f"{label}: migration {migration.version} ({migration.description})"
                        f" failed: {exc}"
                    ) from exc
            conn.execute(
                "INSERT INTO schema_version VALUES (%s, %s, %s)",
                (migration.version, migration.description, clock()),
            )
