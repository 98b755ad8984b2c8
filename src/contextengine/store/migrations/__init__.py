"""Numbered schema migrations of the archive, shared by every store.

Each module ``mNNNN_<name>.py`` in this package is one migration: ``VERSION``
(its number), ``DESCRIPTION`` and one tuple of SQL statements per dialect
(``SQLITE``; a server store adds its own, e.g. ``POSTGRES``). A store calls
:func:`load_migrations` when it opens, compares the numbers with its
``schema_version`` table and applies the missing ones in order, each in its
own transaction, so a crash mid-migration leaves the previous version intact.

Migrations are never edited once released: a schema change is a new module
with the next number.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

__all__ = ["Migration", "load_migrations"]

_MODULE_NAME = re.compile(r"^m(\d{4})_\w+$")


@dataclass(frozen=True, kw_only=True)
class Migration:
    """One numbered schema step for one SQL dialect."""

    version: int
    description: str
    statements: tuple[str, ...]


def load_migrations(dialect: str) -> list[Migration]:
    """Return the migrations that have statements for ``dialect`` ("SQLITE", ...), in order.

    Called by a store when it opens, before any other query.
    """
    found: list[Migration] = []
    for info in pkgutil.iter_modules(__path__):
        match = _MODULE_NAME.match(info.name)
        if match is None:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        statements = getattr(module, dialect.upper(), None)
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
            )
        )
    found.sort(key=lambda m: m.version)
    return found
