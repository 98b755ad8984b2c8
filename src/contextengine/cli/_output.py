"""What every command's output has in common: ``--json``, ``--output FILE``, checked paths.

One convention for every command with machine-readable output:

* ``--json`` is a flag: the command prints its JSON document on standard
  output instead of its text (a table, lines).
* ``--output FILE`` writes that same JSON document to FILE; standard output
  keeps what it would show without it (the text, or the JSON with ``--json``),
  so one run can show a table and keep the figures.

Every option naming a file the command will write (``--output``, ``replay
--report``, ``replay --timeline``) is checked when the command line is
parsed, before any work: a missing or unwritable folder, or a folder given as
the file, is a usage error (exit 2) naming the option and the path, never a
traceback after a long run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = ["dumps", "emit_json", "json_options", "writable_path"]

F = TypeVar("F", bound=Callable[..., Any])


def writable_path(ctx: click.Context, param: click.Parameter, value: Any) -> Path | None:
    """Click callback: ``value`` must be a file this process can create or overwrite."""
    if value is None:
        return None
    path = Path(value).expanduser()
    folder = path.parent
    if path.is_dir():
        raise click.BadParameter(f"{path} is a folder; give a file name", ctx, param)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise click.BadParameter(f"folder {folder} {what}", ctx, param)
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise click.BadParameter(f"cannot write {path}: permission denied", ctx, param)
    return path


def json_options(command: F) -> F:
    """Add ``--json`` and ``--output FILE`` (the module's convention) to a click command."""
    command = click.option(
        "--output",
        "output",
        type=click.Path(dir_okay=False),
        callback=writable_path,
        default=None,
        metavar="FILE",
        help="Also write the JSON document to FILE.",
    )(command)
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON on standard output instead of text."
    )(command)


def dumps(data: Any) -> str:
    """The JSON text of a document, as every command prints it."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


def emit_json(data: Any, *, as_json: bool, output: Path | None) -> bool:
    """Write ``data`` to ``output`` if given, print it if ``as_json``; return ``as_json``.

    The caller prints its text when this returns False.
    """
    text = dumps(data)
    if output is not None:
        try:
            output.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:  # checked when parsed; the disk can still fill up
            raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from None
    if as_json:
        click.echo(text)
    return as_json
