"""Slash commands an engine adds to ``contextengine chat``: the types of the hook.

An engine offers commands for the *person* at the terminal (its tools,
:meth:`~contextengine.ContextEngine.get_tool_schemas`, are for the model) by
overriding :meth:`~contextengine.ContextEngine.chat_commands`::

    def chat_commands(self) -> dict[str, ChatCommand]:
        return {"grep": ChatCommand(help="/grep WORDS  search the archive", handler=self._grep)}

    def _grep(self, call: ChatCommandInput) -> str:
        ...                      # call.text is what followed "/grep "
        return "3 matches: ..."  # printed as it is

``contextengine chat`` asks once, when it starts; lists the commands in
``/help``; and runs a handler when the person types its name. The rules:

* Names are lowercase (letters, digits, ``-`` and ``_``, starting with a
  letter), without the slash. A name the chat rejects is skipped with a
  one-line notice naming the engine.
* Built-in commands (``/compress``, ``/status``, ``/help``...) cannot be
  overridden: an engine command with a built-in's name is skipped, with a
  one-line notice at start, and the built-in runs.
* A handler observes: it gets a copy of the history and cannot change the
  conversation. What it returns is printed (None prints nothing); an
  exception it raises becomes one line, ``error: /NAME failed: ...``, never a
  traceback, and the chat goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextengine.host import ContextHost

__all__ = ["ChatCommand", "ChatCommandInput"]

Message = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ChatCommandInput:
    """What a command handler receives; new fields may be added, none removed.

    ``text`` is the rest of the line after the command name, stripped;
    ``messages`` a copy of the conversation as the chat holds it; ``host`` the
    chat's :class:`~contextengine.ContextHost` (None outside a host), for
    status and events.
    """

    text: str
    messages: list[Message] = field(default_factory=list)
    host: ContextHost | None = None


@dataclass(frozen=True, kw_only=True)
class ChatCommand:
    """One slash command: its one-line ``help`` and the ``handler`` that runs it."""

    help: str
    handler: Callable[[ChatCommandInput], str | None]
