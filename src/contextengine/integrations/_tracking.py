"""What a host has seen of a framework's conversation, and when it must start over.

Frameworks hand the adapters the whole conversation before every model call
(LangChain's agent state, the Agents SDK's model input); a host wants the
history it kept (possibly compacted) plus what was appended since.
:class:`SeenHistory` tells the two apart, once per model call:

* the framework's messages extend those of the last call: the host's own
  history plus the new messages;
* they do not (a thread rewound to an earlier checkpoint, messages edited or
  removed): the conversation has branched, and the host starts a new engine
  session from the framework's messages as they are (:attr:`Step.restart`);
  the engine keeps the old one (lcm links it, so ``lcm_grep`` still finds
  it) but never shows it.

The system prompt is compared apart from the rest: a prompt that changes
between calls (dynamic instructions) replaces the host's, and is no branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SeenHistory", "Step"]

Message = dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One model call's history for the host, and what changed since the last."""

    #: The history to prepare the request from.
    working: list[Message]
    #: The framework's messages appended since the last call (all of them after a restart).
    added: list[Message]
    #: The engine session to start first (a branch), or None.
    restart: str | None = None


class SeenHistory:
    """The framework messages the host saw at the last model call of one conversation."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._seen: list[Message] | None = None
        self._had_system = False
        self._branches = 0

    def step(
        self, host_history: Sequence[Message], system: Message | None, body: list[Message]
    ) -> Step:
        """This call's history, from the host's and the framework's (``system`` + ``body``)."""
        seen, had_system = self._seen, self._had_system
        self._seen, self._had_system = body, system is not None
        head = [system] if system is not None else []
        if seen is None:
            return Step([*head, *body], body)
        if body[: len(seen)] != seen:
            self._branches += 1
            self.session_id = f"{self.session_id.split('~')[0]}~{self._branches}"
            return Step([*head, *body], body, restart=self.session_id)
        added = body[len(seen) :]
        kept = list(host_history)
        if had_system and kept and kept[0].get("role") == "system":
            # The same object when unchanged: the host recognises its history by identity.
            if system is not None and kept[0] == system:
                return Step([*kept, *added], added)
            kept = kept[1:]
        return Step([*head, *kept, *added], added)
