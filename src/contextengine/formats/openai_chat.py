"""Importer for OpenAI chat-completions transcripts (format name ``"openai"``).

Accepted shapes, each detected from its content:

* a JSON list of messages: one session;
* a JSON object with ``"messages"`` (and optionally ``"tools"``, ``"id"``,
  ``"model"``): one session;
* JSONL with one message per line: one session;
* JSONL with one ``{"messages": [...]}`` object per line (the fine-tuning
  layout): one session per line, ids ``<stem>#<line>``.

Messages are kept as recorded; only their shape is checked, so a message list
the rest of the library would reject is reported here with its record number.
Metadata: ``tools`` and ``model`` when the document carries them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats._detect import peek
from contextengine.formats._session import Session, finish
from contextengine.formats._source import describe, iter_jsonl, read_json
from contextengine.formats._stream import SessionStream, finish_stream

__all__ = ["NAME", "check_messages", "load", "sessions_from_document", "stream_jsonl"]

NAME = "openai"
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def check_messages(path: Path, where: str, value: Any) -> list[dict[str, Any]]:
    """Return ``value`` as a list of message dicts, or raise naming the bad record.

    ``where`` prefixes the record location ("record 3 " for multi-session
    files, "" otherwise). Messages are shallow-copied so sessions never share
    dicts with the parsed document.
    """
    if not isinstance(value, list):
        raise FormatError(
            str(path), f"{where}messages".strip(), "a list of messages", found=describe(value)
        )
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise FormatError(
                str(path),
                f"{where}messages[{index}]",
                "a message object with a 'role' of " + ", ".join(sorted(_ROLES)),
                found=describe(message),
            )
        messages.append(dict(message))
    return messages


def sessions_from_document(document: Any, path: Path) -> list[Session]:
    """Import an already parsed JSON document (a message list or ``{"messages": ...}``)."""
    metadata: dict[str, Any] = {}
    session_id = path.stem
    if isinstance(document, dict) and "role" in document and "messages" not in document:
        document = [document]  # a JSONL file holding a single message
    if isinstance(document, dict):
        if "messages" not in document:
            raise FormatError(
                str(path),
                "",
                "a JSON list of messages or an object with 'messages'",
                found=describe(document),
            )
        raw = document["messages"]
        for key in ("tools", "model"):
            if key in document:
                metadata[key] = document[key]
        if isinstance(document.get("id"), str):
            session_id = document["id"]
    else:
        raw = document
    messages = check_messages(path, "", raw)
    return [finish(id=session_id, path=path, format=NAME, messages=messages, metadata=metadata)]


def load(path: Path) -> list[Session]:
    """Import a JSON or JSONL OpenAI chat file; see the module docstring for shapes."""
    if _looks_like_jsonl(path):
        return _load_jsonl(path)
    return sessions_from_document(read_json(path), path)


def _looks_like_jsonl(path: Path) -> bool:
    return peek(path).is_jsonl


_MIXED = "either one message per line or one session per line, not both"


def _load_jsonl(path: Path) -> list[Session]:
    sessions: list[Session] = []
    messages: list[dict[str, Any]] = []
    for lineno, record in iter_jsonl(path):
        if "messages" in record:
            session = sessions_from_document(record, path)[0]
            if session.id == path.stem:
                session.id = f"{path.stem}#{lineno}"
            sessions.append(session)
            continue
        if record.get("role") not in _ROLES:
            raise FormatError(
                str(path),
                f"line {lineno}",
                "a message object with a 'role', or an object with 'messages'",
                found=describe(record),
            )
        messages.append(record)
    if messages:
        if sessions:
            raise FormatError(str(path), "", _MIXED)
        sessions.append(
            finish(id=path.stem, path=path, format=NAME, messages=messages, metadata={})
        )
    return sessions


def _message_lines(path: Path) -> Iterator[dict[str, Any]]:
    for lineno, record in iter_jsonl(path):
        if "messages" in record:
            raise FormatError(str(path), "", _MIXED)
        if record.get("role") not in _ROLES:
            raise FormatError(
                str(path),
                f"line {lineno}",
                "a message object with a 'role', or an object with 'messages'",
                found=describe(record),
            )
        yield record


def stream_jsonl(path: Path) -> Iterator[SessionStream]:
    """The sessions of an OpenAI JSONL file, read as they are iterated.

    One message per line: one :class:`SessionStream` over the lines, the same
    messages as :func:`load`. One session per line: each line's session, read
    whole (a line is one conversation). A file mixing both raises the same
    :class:`FormatError` as :func:`load`, when the mix is reached.
    """
    first = peek(path).first
    if first is not None and "messages" not in first:
        metadata: dict[str, Any] = {}
        messages = finish_stream(_message_lines(path), path=path, format=NAME, metadata=metadata)
        yield SessionStream(
            id=path.stem, source=str(path), format=NAME, messages=messages, metadata=metadata
        )
        return
    for lineno, record in iter_jsonl(path):
        if "messages" not in record:
            raise FormatError(str(path), "", _MIXED)
        session = sessions_from_document(record, path)[0]
        if session.id == path.stem:
            session.id = f"{path.stem}#{lineno}"
        yield SessionStream(
            id=session.id,
            source=session.source,
            format=NAME,
            messages=session.messages,
            metadata=session.metadata,
        )
