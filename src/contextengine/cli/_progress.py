"""Progress of the long commands (``replay``, ``eval recall``), on standard error.

Units are named: a command counts *requests* (one per recorded model reply)
within *sessions*. Two renderings of the same events:

* on a terminal, a transient rich bar for the session in progress (its label,
  the requests so far, the sessions done and, when known, how many there are)
  with the line of each finished session printed above it;
* anywhere else (a pipe, a file, CI logs), only the line of each finished
  session, so a log shows one line per session and never a bar's redraws::

      replay: session 2/3 agent_session.json#demo: 24 requests in 0.4 s

Standard output is left to the command's result (its table or JSON).
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

import click

__all__ = ["SessionProgress"]


class SessionProgress:
    """Reports sessions and the units done in each; a context manager.

    ``command`` prefixes each line; ``unit`` names what :meth:`advance`
    counts; ``total`` is the number of sessions when known. ``enabled`` False
    (``--quiet``) reports nothing.
    """

    def __init__(
        self,
        command: str,
        *,
        unit: str = "requests",
        total: int | None = None,
        enabled: bool = True,
    ) -> None:
        self.command = command
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.sessions = 0
        self._label: str | None = None
        self._count = 0
        self._started = 0.0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> SessionProgress:
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TextColumn("{task.completed:,} " + self.unit),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.finish()
        self._label = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def session(self, label: str) -> None:
        """A session starts (the previous one, if any, is finished first)."""
        self.finish()
        self.sessions += 1
        self._label, self._count, self._started = label, 0, time.monotonic()
        if self._bar is not None:
            from rich.markup import escape

            # The description is markup: a file name with brackets must stay literal.
            description = escape(f"{self.command}: {self._position()} {label}")
            if self._task is None:  # the bar appears with the first session
                self._task = self._bar.add_task(description, total=None)
            self._bar.update(self._task, description=description, completed=0)

    def advance(self, count: int = 1) -> None:
        """``count`` more units of the current session are done."""
        self._count += count
        if self._task is not None:
            self._bar.update(self._task, completed=self._count)

    def finish(self) -> None:
        """End the current session: its line (free when no session is open)."""
        if self._label is None or not self.enabled:
            self._label = None
            return
        elapsed = time.monotonic() - self._started
        line = (
            f"{self.command}: {self._position()} {self._label}: "
            f"{self._count:,} {self.unit} in {elapsed:.1f} s"
        )
        self._label = None
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            click.echo(line, err=True)

    def _position(self) -> str:
        return f"session {self.sessions}" + (f"/{self.total}" if self.total else "")
