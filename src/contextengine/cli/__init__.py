"""The ``contextengine`` command line.

One module per command group; this module only wires them together. Commands
are imported when they are invoked, so ``contextengine --version`` does not pay
for the chat client or the archive. Errors of the library's own hierarchy are
turned into one-line messages and exit codes (see :data:`EXIT_CODES`), never
tracebacks.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from contextengine.errors import (
    ConfigError,
    ContextEngineError,
    EngineLoadError,
    EngineNotFoundError,
    FormatError,
    InvalidMessagesError,
    StoreError,
    SummarizerError,
)

__all__ = ["EXIT_CODES", "main"]

#: Exit codes by error class, most specific first (the BSD sysexits values).
EXIT_CODES: tuple[tuple[type[ContextEngineError], int], ...] = (
    (FormatError, 65),  # EX_DATAERR
    (InvalidMessagesError, 65),
    (ConfigError, 78),  # EX_CONFIG
    (EngineNotFoundError, 78),
    (EngineLoadError, 78),
    (SummarizerError, 69),  # EX_UNAVAILABLE
    (StoreError, 74),  # EX_IOERR
    (ContextEngineError, 1),
)

#: Command name -> "module:attribute" of the click command implementing it.
COMMANDS: dict[str, str] = {
    "count": "contextengine.cli.count:count",
    "demo": "contextengine.cli.demo:demo",
    "chat": "contextengine.cli.chat:chat",
    "sessions": "contextengine.cli.chat:sessions",
    "engines": "contextengine.cli.engines_cmd:engines",
    "config": "contextengine.cli.engines_cmd:config",
    "archive": "contextengine.cli.archive:archive",
    "replay": "contextengine.cli.replay:replay",
    "eval": "contextengine.cli.replay:eval_group",
    "serve": "contextengine.cli.serve:serve",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ContextEngineError as error:
            code = next(code for cls, code in EXIT_CODES if isinstance(error, cls))
            click.echo(f"error: {error}", err=True)
            sys.exit(code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="contextengine", prog_name="contextengine")
def main() -> None:
    """Manage the conversation context of LLM agents.

    Start with `contextengine demo`: an offline coding-agent session compacted
    as it goes.
    """
