"""``contextengine archive``: humans read and maintain the lossless engine's archive.

Commands: ``list``, ``grep``, ``describe``, ``expand``, ``stats``, ``prune``,
``vacuum``, ``migrate``. The archive is chosen by ``--store PATH|URL`` (or the
``CONTEXTENGINE_STORE_URL`` environment variable; default: the file under the
user data directory). Output is plain text, or JSON with ``--json`` (and
``--output FILE``; see :mod:`contextengine.cli._output`).

The read commands (``list``, ``grep``, ``describe``, ``expand``, ``stats``)
open the archive read-only: a missing archive is an error, not a new empty
one, nothing is created beside it and no migration runs, so they work on an
archive in a read-only folder or filesystem
(:mod:`contextengine.store.sqlite_readonly`). ``prune`` and ``vacuum`` open
it for writing. Store errors (a missing archive, a file that is not one, a
schema this version does not read) propagate as
:class:`~contextengine.errors.StoreError`, which ``contextengine.cli.main``
maps to a one-line message and exit code 74.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from contextengine.cli._output import emit_json, json_options
from contextengine.cli.archive_migrate import migrate
from contextengine.store import Store, default_store_path, open_store
from contextengine.store.retention import parse_duration, parse_size, plan_prune

__all__ = ["archive"]


@contextmanager
def _opened(ctx: click.Context, *, write: bool = False) -> Iterator[Store]:
    """The group's archive: read-only unless ``write`` (then it may be created)."""
    spec = ctx.obj["store"] if ctx.obj else None
    # Library errors (StoreError...) propagate: contextengine.cli.main turns them
    # into one-line messages and exit codes for every command group alike.
    store = open_store(spec or default_store_path(), read_only=not write)
    try:
        yield store
    finally:
        store.close()


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _resolve(store: Store, conversation: str | None) -> list[str]:
    """Conversation ids to look in: the one named by id or session key, or all."""
    infos = store.list_conversations()
    if conversation is None:
        return [c.id for c in reversed(infos)]
    for info in infos:
        if conversation in (info.id, info.session_key):
            return [info.id]
    raise click.ClickException(f"no conversation with id or session key {conversation!r}")


@click.group(name="archive")
@click.option(
    "--store",
    "store_spec",
    envvar="CONTEXTENGINE_STORE_URL",
    default=None,
    metavar="PATH|URL",
    help="Archive to open: a path, sqlite:///path or postgresql://... "
    "[default: archive.db under the user data directory]",
)
@click.pass_context
def archive(ctx: click.Context, store_spec: str | None) -> None:
    """Read and maintain the lossless engine's archive."""
    ctx.ensure_object(dict)
    ctx.obj["store"] = store_spec


@archive.command(name="list")
@json_options
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool, output: Path | None) -> None:
    """List conversations, most recently updated last."""
    with _opened(ctx) as store:
        infos = store.list_conversations()
    if emit_json([vars(i) for i in infos], as_json=as_json, output=output):
        return
    for i in infos:
        click.echo(
            f"{i.id}  {_when(i.updated_at)}  {i.message_count:>7} msgs  "
            f"{i.summary_count:>5} sums  {i.bytes:>10} B  {i.session_key}"
        )


@archive.command()
@click.argument("query")
@click.option("--conversation", "-c", default=None, help="Conversation id or session key.")
@click.option("--regex", is_flag=True, help="QUERY is a regular expression.")
@click.option("--scope", type=click.Choice(["all", "messages", "summaries"]), default="all")
@click.option("--limit", "-n", type=int, default=20, show_default=True)
@json_options
@click.pass_context
def grep(
    ctx: click.Context,
    query: str,
    conversation: str | None,
    regex: bool,
    scope: str,
    limit: int,
    as_json: bool,
    output: Path | None,
) -> None:
    """Search messages and summaries (ranked text, or --regex)."""
    found: list[dict[str, Any]] = []
    with _opened(ctx) as store:
        for cid in _resolve(store, conversation):
            page = store.search(
                cid,
                query,
                mode="regex" if regex else "text",
                scope=scope,  # type: ignore[arg-type]  # click.Choice checked it
                limit=limit,
            )
            found.extend({"conversation_id": cid, **vars(hit)} for hit in page.results)
            if len(found) >= limit:
                break
    found = found[:limit]
    if emit_json(found, as_json=as_json, output=output):
        return
    for hit in found:
        where = f"seq {hit['seq']}" if hit["seq"] is not None else "summary"
        line = f"{hit['conversation_id']} {hit['id']} ({where}, {hit['role']}): {hit['snippet']}"
        if hit.get("context"):
            line += f" [matched in the message before: {hit['context']}]"
        click.echo(line)
    if not found:
        click.echo("no match", err=True)


def _find(store: Store, item_id: str, conversation: str | None) -> tuple[str, str, Any]:
    """Locate ``item_id`` (message, summary or large content): (conversation, kind, record)."""
    for cid in _resolve(store, conversation):
        if item_id.startswith("sum_"):
            record: Any = store.get_summary(cid, item_id)
            kind = "summary"
        elif item_id.startswith("lc_"):
            record = store.get_large_content(cid, item_id)
            kind = "large_content"
        else:
            record = store.get_message(cid, item_id)
            kind = "message"
        if record is not None:
            return cid, kind, record
    raise click.ClickException(f"no message, summary or large content with id {item_id!r}")


@archive.command()
@click.argument("item_id", metavar="ID")
@click.option("--conversation", "-c", default=None, help="Conversation id or session key.")
@json_options
@click.pass_context
def describe(
    ctx: click.Context, item_id: str, conversation: str | None, as_json: bool, output: Path | None
) -> None:
    """Metadata of a message, summary or large content (JSON, with or without --json)."""
    with _opened(ctx) as store:
        cid, kind, record = _find(store, item_id, conversation)
        data = {k: v for k, v in vars(record).items() if k not in ("message", "content")}
        data["kind_of_item"] = kind
        data["parent_summary"] = store.parent_summary(cid, item_id)
    # Its text is JSON too: --json is accepted so every command takes the same flags.
    emit_json(data, as_json=True, output=output)


@archive.command()
@click.argument("item_id", metavar="ID")
@click.option("--conversation", "-c", default=None, help="Conversation id or session key.")
@click.pass_context
def expand(ctx: click.Context, item_id: str, conversation: str | None) -> None:
    """Full content: a message's JSON, a large content, or a summary's sources in order."""
    with _opened(ctx) as store:
        cid, kind, record = _find(store, item_id, conversation)
        if kind == "message":
            click.echo(json.dumps(record.message, indent=2, ensure_ascii=False, default=str))
        elif kind == "large_content":
            click.echo(record.content)
        else:
            click.echo(record.content)
            click.echo("--- sources ---")
            for source in record.source_ids:
                if record.kind == "leaf":
                    msg = store.get_message(cid, source)
                    text = json.dumps(msg.message, ensure_ascii=False) if msg else "(missing)"
                    click.echo(f"{source} (seq {msg.seq if msg else '?'}): {text}")
                else:
                    sub = store.get_summary(cid, source)
                    click.echo(f"{source}: {sub.content if sub else '(missing)'}")


@archive.command()
@json_options
@click.pass_context
def stats(ctx: click.Context, as_json: bool, output: Path | None) -> None:
    """Row counts, schema version and size on disk (JSON, with or without --json)."""
    with _opened(ctx) as store:
        figures = store.stats()
    emit_json(figures, as_json=True, output=output)


@archive.command()
@click.option("--older-than", default=None, metavar="AGE", help="e.g. 30d, 12h.")
@click.option("--max-size", default=None, metavar="SIZE", help="e.g. 500MB, 2GB.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@click.pass_context
def prune(ctx: click.Context, older_than: str | None, max_size: str | None, dry_run: bool) -> None:
    """Delete whole conversations by age and/or to fit a size cap (oldest first)."""
    if older_than is None and max_size is None:
        raise click.UsageError("give --older-than and/or --max-size")
    try:
        age = parse_duration(older_than) if older_than is not None else None
        cap = parse_size(max_size) if max_size is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    with _opened(ctx, write=not dry_run) as store:
        doomed = plan_prune(
            store.list_conversations(), now=time.time(), older_than_s=age, max_bytes=cap
        )
        for info in doomed:
            click.echo(
                f"{'would delete' if dry_run else 'deleting'} {info.id} "
                f"({info.message_count} msgs, updated {_when(info.updated_at)}) {info.session_key}"
            )
        if dry_run:
            click.echo(f"{len(doomed)} conversation(s) would be deleted")
            return
        count = store.prune(older_than_s=age, max_bytes=cap)
    click.echo(f"deleted {count} conversation(s); run `contextengine archive vacuum` to shrink")


@archive.command()
@click.pass_context
def vacuum(ctx: click.Context) -> None:
    """Compact the archive file and its search index."""
    with _opened(ctx, write=True) as store:
        store.vacuum()
        after = store.stats()
    click.echo(f"vacuumed; file is {after.get('file_bytes', '?')} bytes")


# `migrate` opens two stores of its own rather than the group's one.
archive.add_command(migrate)
