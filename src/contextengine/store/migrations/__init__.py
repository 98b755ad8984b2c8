"""Numbered schema migrations of the archive, and the one loader every store uses.

Each module ``mNNNN_<name>.py`` in a migrations package is one migration:
``VERSION`` (its number), ``DESCRIPTION`` and one tuple of SQL statements per
dialect (``SQLITE`` here; :mod:`contextengine.store.postgres_migrations` holds
``POSTGRES``), optionally with ``<DIALECT>_OPTIONAL`` statements a server may
refuse and a ``<DIALECT>_STEP`` function for what SQL alone cannot do
(re-indexing rows in Python, migration 3), run after the statements in the
same transaction with the store's connection. A store calls
:func:`load_migrations` with its dialect (and package) when it opens,
compares the numbers with its ``schema_version`` table and applies the
missing ones in order, each in its own transaction, so a crash
mid-migration leaves the previous version intact.

Migrations are never edited once released: a schema change is a new module
with the next number.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Migration", "load_migrations"]

_MODULE_NAME = re.compile(r"^m(\d{4})_\w+$")


@dataclass(frozen=True, kw_only=True)
class Migration:
    """One numbered schema step for one SQL dialect.

    ``optional`` statements improve the archive but may be refused by the
    server (e.g. ``CREATE EXTENSION`` without the privilege); a store runs each
    in a savepoint and skips a refusal. ``step``, when set, is called with the
    migration's connection (sqlite3 or psycopg) after the statements, inside
    the same transaction.
    """

    version: int
    description: str
    statements: tuple[str, ...]
    optional: tuple[str, ...] = ()
    step: Callable[[Any], None] | None = None


def load_migrations(dialect: str, package: str = __name__) -> list[Migration]:
    """Return the migrations of ``package`` with statements for ``dialect``, in order.

    ``dialect`` names the statements attribute ("SQLITE", "POSTGRES");
    ``package`` is the dotted name of the migrations package (default: this
    one, the SQLite migrations). Called by a store when it opens, before any
    other query.
    """
    found: list[Migration] = []
    attribute = dialect.upper()
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        match = _MODULE_NAME.match(info.name)
        if match is None:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        statements = getattr(module, attribute, None)
        if statements is None:
            continue
        version = int(match.group(1))
        if getattr(module, "VERSION", version) != version:
            raise RuntimeError(f"migration {info.name} declares VERSION {module.VERSION}")
        found.append(
            Migration(
                version=version,
                description=str(getattr(module, "DESCRIPTION", info.name)),
                statements=tuple(statements),
                optional=tuple(getattr(module, f"{attribute}_OPTIONAL", ())),
                step=getattr(module, f"{attribute}_STEP", None),
            )
        )
    found.sort(key=lambda m: m.version)
    return found
