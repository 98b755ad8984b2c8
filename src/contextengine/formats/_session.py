"""The ``Session`` an importer produces, and the last step every importer shares.

An importer's job ends in :func:`finish`: it runs ``sanitize_tool_pairs`` so a
recorded session whose tool calls were cut off (a crash, an interrupt) still
replays as valid OpenAI messages, records how many messages that dropped, and
checks the result with ``validate_messages`` so a bug in an importer surfaces
as an error naming the file instead of a failure deep inside an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError, InvalidMessagesError
from contextengine.messages import sanitize_tool_pairs, validate_messages

__all__ = ["Session", "finish"]


@dataclass
class Session:
    """One recorded conversation, as OpenAI chat-completions messages.

    ``id`` identifies the session inside its file (the Claude Code session id,
    the SWE-bench instance, ``task3-trial1`` for tau-bench); ``source`` is the
    file it came from and ``format`` the importer's name. ``metadata`` holds
    what the recording knew beyond the messages: recorded usage, a recorded
    compaction, rewards and gold actions. Its keys are documented by each
    importer module.
    """

    id: str
    source: str
    format: str
    messages: list[dict[str, Any]]
    metadata: dict[str, Any] = field(default_factory=dict)


def finish(
    *,
    id: str,
    path: Path,
    format: str,
    messages: list[dict[str, Any]],
    metadata: dict[str, Any],
    location: str = "",
) -> Session:
    """Pair tool calls, validate, and wrap the messages of one imported session.

    Called by every importer as its last step. ``metadata["tool_messages_dropped"]``
    counts the messages ``sanitize_tool_pairs`` removed (0 for a clean recording).
    ``location`` names the record in multi-session files, so an importer bug
    is reported where it happened.
    """
    paired = sanitize_tool_pairs(messages)
    metadata["tool_messages_dropped"] = len(messages) - len(paired)
    try:
        validate_messages(paired)
    except InvalidMessagesError as exc:
        raise FormatError(
            str(path),
            location,
            f"messages that convert to valid OpenAI format ({format})",
            found=str(exc),
        ) from exc
    return Session(id=id, source=str(path), format=format, messages=paired, metadata=metadata)
