"""``contextengine engines`` and ``contextengine config``: what is installed, what is in effect.

``engines`` lists every engine registered in the ``contextengine.engines``
entry-point group (built-in and third-party alike), marking the configured
one. ``config`` prints the resolved configuration and where each value came
from (default, pyproject.toml, contextengine.toml, environment variable), with
secrets masked, and which summariser the summary settings add up to and why
(the ``summarizer`` row: ``offline``, ``summary_model``; see
:mod:`contextengine.summarizer_config`).

A configured engine that cannot be loaded (``CONTEXTENGINE_ENGINE=nosuch``)
is reported by both, naming the value and where it came from: ``engines``
warns on standard error; ``config`` prints the configuration (the point is
to see where the value comes from), then exits with the configuration error
(exit 78), since every command that loads the engine would fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from contextengine.cli._output import emit_json, json_options
from contextengine.config import ResolvedConfig, resolve_config
from contextengine.errors import ConfigError
from contextengine.registry import available_engines, engine_problem
from contextengine.summarizer_config import configured_summarizers

__all__ = ["config", "engines"]


def _table(rows: Sequence[tuple[str, ...]], headers: tuple[str, ...]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    return "\n".join(lines)


def _engine_problem(resolved: ResolvedConfig) -> str | None:
    """One line saying that the configured engine cannot load, and where it was set; or None."""
    problem = engine_problem(resolved.engine)
    if problem is None:
        return None
    return (
        f"the configured engine {resolved.engine!r} ({resolved.source('engine')}) "
        f"cannot be loaded: {problem}"
    )


@click.command()
@json_options
def engines(as_json: bool, output: Path | None) -> None:
    """List the installed context engines (the configured one is marked with *)."""
    resolved = resolve_config()
    configured = resolved.engine
    rows = available_engines()
    problem = _engine_problem(resolved)
    if problem is not None:
        click.echo(f"warning: {problem}", err=True)
    data = [{**row._asdict(), "configured": row.name == configured} for row in rows]
    for item in data:
        if item["name"] == "hermes" and item["origin"] == "contextengine":
            from contextengine.hermes import compressor_missing_hooks, unavailable_hooks

            item["unavailable_on_host"] = list(compressor_missing_hooks())
            item["unavailable_in_hermes"] = unavailable_hooks()
    if emit_json(data, as_json=as_json, output=output):
        return
    if not rows:
        click.echo("no context engines are installed")
        return
    table = [
        (("* " if row.name == configured else "  ") + row.name, row.origin, row.description)
        for row in rows
    ]
    click.echo(_table(table, ("  name", "package", "description")))
    for line in _hermes_notes():
        click.echo(line)


def _hermes_notes() -> list[str]:
    """What is unavailable with the installed hermes-agent, both ways; [] without it."""
    from contextengine.hermes import compressor_missing_hooks, hermes_version, unavailable_hooks

    version = hermes_version()
    if version is None:
        return []
    inside = ", ".join(unavailable_hooks()) or "none"
    on_host = ", ".join(compressor_missing_hooks()) or "none"
    return [
        "",
        f"hermes-agent {version} is installed:",
        f"  our engines inside Hermes (context.engine: contextengine-<name>): "
        f"Hermes never calls {inside}",
        f"  the hermes engine here (Hermes's ContextCompressor): it has no {on_host} "
        "(our defaults apply)",
    ]


@click.command()
@json_options
def config(as_json: bool, output: Path | None) -> None:
    """Show the resolved configuration and where each value came from.

    Exits 78 after the table when the configured engine cannot be loaded.
    """
    resolved = resolve_config()
    rows = list(resolved.display_items())
    setup = configured_summarizers(resolved)
    # Not a setting but what the summary settings add up to: which summariser
    # compacts (load_engine, replay, demo, eval) and why. chat differs only when
    # no summary model is set: it summarises with its own model then.
    why = setup.description
    if setup.kind == "offline":
        why += "; contextengine chat summarises with its own model"
    rows.append(("summarizer", setup.kind, why))
    problem = _engine_problem(resolved)
    data: dict[str, dict[str, str]] = {
        key: {"value": value, "source": source} for key, value, source in rows
    }
    if problem is not None:
        data["engine"]["problem"] = problem
    if not emit_json(data, as_json=as_json, output=output):
        click.echo(_table([(k, v or "-", s) for k, v, s in rows], ("setting", "value", "source")))
    if problem is not None:
        raise ConfigError(problem)
