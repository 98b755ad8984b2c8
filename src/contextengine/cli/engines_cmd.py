"""``contextengine engines`` and ``contextengine config``: what is installed, what is in effect.

``engines`` lists every engine registered in the ``contextengine.engines``
entry-point group (built-in and third-party alike), marking the configured
one. ``config`` prints the resolved configuration and where each value came
from (default, pyproject.toml, contextengine.toml, environment variable), with
secrets masked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from contextengine.config import resolve_config
from contextengine.registry import available_engines

__all__ = ["config", "engines"]


def _table(rows: Sequence[tuple[str, ...]], headers: tuple[str, ...]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    return "\n".join(lines)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def engines(as_json: bool) -> None:
    """List the installed context engines (the configured one is marked with *)."""
    configured = resolve_config().engine
    rows = available_engines()
    if as_json:
        data = [{**row._asdict(), "configured": row.name == configured} for row in rows]
        click.echo(json.dumps(data, indent=2))
        return
    if not rows:
        click.echo("no context engines are installed")
        return
    table = [
        (("* " if row.name == configured else "  ") + row.name, row.origin, row.description)
        for row in rows
    ]
    click.echo(_table(table, ("  name", "package", "description")))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def config(as_json: bool) -> None:
    """Show the resolved configuration and where each value came from."""
    resolved = resolve_config()
    rows = list(resolved.display_items())
    if as_json:
        click.echo(
            json.dumps(
                {key: {"value": value, "source": source} for key, value, source in rows},
                indent=2,
            )
        )
        return
    click.echo(_table([(k, v or "-", s) for k, v, s in rows], ("setting", "value", "source")))
