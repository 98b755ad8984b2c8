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

Streaming: :func:`iter_sessions` and :func:`stream_session` return
:class:`SessionStream` objects that read the messages as they are iterated
(Claude Code session JSONL and OpenAI JSONL stream from the file; whole JSON
documents are parsed first, as they must be). The messages are exactly those
of :func:`load_sessions`, and the metadata is the same once a stream is read
to the end; a replay of a 200 MB session then keeps only what the engine
keeps (see :mod:`contextengine.formats._stream`)::

    from contextengine.formats import stream_session
    stream = stream_session("session.jsonl")
    for message in stream:                                # one at a time
        ...
    stream.metadata["compactions"]                        # complete once read

Detection sniffs content (the first JSONL record, or the parsed document's
keys), never only the file name. Every session comes back with its tool calls
paired and its messages valid; a file that is corrupt or of no known format
raises :class:`contextengine.errors.FormatError` naming the file, the line or
record, and what was expected there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats import (
    anthropic_messages,
    claude_code,
    claude_code_stream,
    openai_chat,
    swe_agent,
    tau_bench,
)
from contextengine.formats._detect import MISSING, detect, peek
from contextengine.formats._session import Session
from contextengine.formats._stream import SessionStream

__all__ = [
    "FORMATS",
    "Loader",
    "Session",
    "SessionStream",
    "detect_format",
    "iter_sessions",
    "load_session",
    "load_sessions",
    "stream_session",
]

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


def _checked_format(file: Path, format: str) -> str:
    if format not in FORMATS:
        raise FormatError(
            str(file),
            "",
            "a format name among " + ", ".join(sorted(FORMATS)),
            found=repr(format),
        )
    return format


def load_sessions(path: str | Path, format: str | None = None) -> list[Session]:
    """Import every session in ``path``; ``format`` skips detection when given.

    A file may hold several sessions (a tau-bench file holds 200 runs, a
    fine-tuning JSONL one conversation per line).
    """
    file = Path(path)
    if format is not None:
        return FORMATS[_checked_format(file, format)](file)
    name, document = detect(file)
    if document is not MISSING and name in _FROM_DOCUMENT:
        return _FROM_DOCUMENT[name](document, file)
    return FORMATS[name](file)


def _streamed(session: Session) -> SessionStream:
    return SessionStream(
        id=session.id,
        source=session.source,
        format=session.format,
        messages=session.messages,
        metadata=session.metadata,
    )


def iter_sessions(path: str | Path, format: str | None = None) -> Iterator[SessionStream]:
    """Every session in ``path`` as a :class:`SessionStream`, read as it is iterated.

    The streaming twin of :func:`load_sessions`: the same sessions, messages
    and (once each stream is read to the end) metadata. Claude Code JSONL and
    OpenAI JSONL are read line by line and never held whole; JSON documents
    (Anthropic, SWE-agent, tau-bench, OpenAI JSON) are parsed whole, as JSON
    must be, and their sessions handed out one by one. Read each stream before
    asking for the next.
    """
    file = Path(path)
    name = _checked_format(file, format) if format is not None else detect_format(file)
    if name == claude_code.NAME:
        yield claude_code_stream.stream(file)
    elif name == openai_chat.NAME and peek(file).is_jsonl:
        yield from openai_chat.stream_jsonl(file)
    else:
        for session in load_sessions(file, name):
            yield _streamed(session)


def stream_session(path: str | Path, format: str | None = None) -> SessionStream:
    """The one session in ``path`` as a :class:`SessionStream`; several is an error.

    The streaming twin of :func:`load_session`. A file in a streamed format
    that holds several sessions is found out when the second one is reached.
    """
    sessions = iter_sessions(path, format)
    first = next(sessions, None)
    if first is None:
        raise FormatError(
            str(path),
            "",
            "exactly one session (use iter_sessions for files holding many)",
            found="0 sessions",
        )
    if first.format != claude_code.NAME:
        # A Claude Code file is one session; the others may hold several. Counting
        # them reads past the first stream's messages only for one-per-line files.
        rest = sum(1 for _ in sessions)
        if rest:
            raise FormatError(
                str(path),
                "",
                "exactly one session (use iter_sessions for files holding many)",
                found=f"{rest + 1} sessions",
            )
    return first


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
