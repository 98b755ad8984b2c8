"""``contextengine archive migrate``: copy an archive into PostgreSQL, idempotently.

Attached to the ``archive`` group by :mod:`contextengine.cli.archive`. The
copy itself is :func:`contextengine.store.migrate.migrate_archive`; this
module only opens the two stores and prints what was copied. The source is
opened read-only (it must exist; nothing is created beside it), the target
for writing. Progress goes to standard error, one line per conversation.
Store errors propagate as :class:`~contextengine.errors.StoreError`, which
``contextengine.cli.main`` turns into a one-line message and exit code.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import click

from contextengine.cli._output import emit_json, json_options
from contextengine.errors import StoreError
from contextengine.store import default_store_path, open_store
from contextengine.store.migrate import migrate_archive

__all__ = ["migrate"]


@click.command(name="migrate")
@click.option(
    "--from",
    "source_spec",
    default=None,
    metavar="PATH|URL",
    help="Archive to copy from: a path, sqlite:///path or postgresql://... "
    "[default: archive.db under the user data directory]",
)
@click.option(
    "--to",
    "target_spec",
    required=True,
    metavar="URL",
    help="PostgreSQL archive to copy into: postgresql://user@host:port/db[?schema=name]",
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the totals.")
@json_options
def migrate(
    source_spec: str | None, target_spec: str, quiet: bool, as_json: bool, output: Path | None
) -> None:
    """Copy every conversation into a PostgreSQL archive; running it again copies nothing new."""
    source = open_store(source_spec or default_store_path(), read_only=True)
    try:
        target = open_store(target_spec)
        try:

            def progress(line: str) -> None:
                click.echo(line, err=True)

            try:
                report = migrate_archive(source, target, progress=None if quiet else progress)
            except sqlite3.Error as exc:  # the copy reads the source through its own connection
                raise StoreError(f"cannot read the source archive: {exc}") from exc
        finally:
            target.close()
    finally:
        source.close()
    totals = {
        "conversations": report.conversations,
        "messages": report.messages,
        "summaries": report.summaries,
        "edges": report.edges,
        "context_items": report.context_items,
        "large_contents": report.large_contents,
        "skipped": report.skipped,
    }
    if emit_json(totals, as_json=as_json, output=output):
        return
    click.echo(
        f"copied {report.conversations} conversations, {report.messages} messages, "
        f"{report.summaries} summaries, {report.edges} edges, "
        f"{report.context_items} context items, {report.large_contents} large contents"
    )
    for key in report.skipped:
        click.echo(
            f"skipped {key!r}: the target holds another history under this session key",
            err=True,
        )
