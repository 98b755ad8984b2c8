"""Importers: recorded agent sessions → OpenAI chat-completions messages.

Replay, recall evaluation and the CLI read sessions only through this package::

    from contextengine.formats import load_sessions
    for session in load_sessions("run.jsonl"):          # format detected from content
        host.replay(session.messages)

Formats (names accepted by ``format=`` and ``--format``):

=============== ==============================================================
``openai``      JSON list of messages, ``{"messages": [...]}``, or JSONL
``anthropic``   JSON with ``"system"`` and ``"messages"`` (Anthropic Messages)
``claude-code`` Claude Code session JSONL (main session or subagent file)
``swe-agent``   mini-swe-agent / SWE-agent trajectory JSON
``tau-bench``   tau-bench historical trajectories (a list of runs)
=============== ==============================================================

Detection sniffs content (the first JSONL record, or the parsed document's
keys), never only the file name. Every session comes back with its tool calls
paired and its messages valid; a file that is corrupt or of no known format
raises :class:`contextengine.errors.FormatError` naming the file, the line or
record, and what was expected there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats import (
    anthropic_messages,
    claude_code,
    openai_chat,
    swe_agent,
    tau_bench,
)
from contextengine.formats._detect import MISSING, detect
from contextengine.formats._session import Session

__all__ = ["FORMATS", "Loader", "Session", "detect_format", "load_session", "load_sessions"]

#: A loader reads one file and returns every session it holds.
Loader = Callable[[Path], list[Session]]

#: Format name → loader. The names are the values of ``format=`` / ``--format``.
FORMATS: dict[str, Loader] = {
    openai_chat.NAME: openai_chat.load,
    anthropic_messages.NAME: anthropic_messages.load,
    claude_code.NAME: claude_code.load,
    swe_agent.NAME: swe_agent.load,
    tau_bench.NAME: tau_bench.load,
}

# Importers of whole JSON documents, fed the document detection already parsed.
_FROM_DOCUMENT: dict[str, Callable[[Any, Path], list[Session]]] = {
    openai_chat.NAME: openai_chat.sessions_from_document,
    anthropic_messages.NAME: anthropic_messages.sessions_from_document,
    swe_agent.NAME: swe_agent.sessions_from_document,
    tau_bench.NAME: tau_bench.sessions_from_document,
}


def detect_format(path: str | Path) -> str:
    """Name the format of ``path`` from its content; :class:`FormatError` if none fits."""
    return detect(Path(path))[0]


def load_sessions(path: str | Path, format: str | None = None) -> list[Session]:
    """Import every session in ``path``; ``format`` skips detection when given.

    A file may hold several sessions (a tau-bench file holds 200 runs, a
    fine-tuning JSONL one conversation per line).
    """
    file = Path(path)
    if format is not None:
        loader = FORMATS.get(format)
        if loader is None:
            raise FormatError(
                str(file),
                "",
                "a format name among " + ", ".join(sorted(FORMATS)),
                found=repr(format),
            )
        return loader(file)
    name, document = detect(file)
    if document is not MISSING and name in _FROM_DOCUMENT:
        return _FROM_DOCUMENT[name](document, file)
    return FORMATS[name](file)


def load_session(path: str | Path, format: str | None = None) -> Session:
    """Import the one session in ``path``; a file holding several is an error."""
    sessions = load_sessions(path, format)
    if len(sessions) != 1:
        raise FormatError(
            str(path),
            "",
            "exactly one session (use load_sessions for files holding many)",
            found=f"{len(sessions)} sessions",
        )
    return sessions[0]
