"""Importer for Anthropic Messages API conversations (format name ``"anthropic"``).

The file is the request body a client would send (or a saved conversation in
the same shape): ``{"system": ..., "messages": [...]}``, optionally with
``"tools"`` and ``"model"``; a bare list of Anthropic messages is accepted too.
Conversion is ``contextengine.messages.from_anthropic``, the same function
hosts use at runtime, so ``tool_use`` / ``tool_result`` blocks become native
OpenAI ``tool_calls`` and ``tool`` messages. Metadata: ``tools`` and ``model``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextengine.errors import FormatError, InvalidMessagesError
from contextengine.formats._session import Session, finish
from contextengine.formats._source import describe, read_json
from contextengine.messages import from_anthropic

__all__ = ["NAME", "load", "sessions_from_document"]

NAME = "anthropic"


def load(path: Path) -> list[Session]:
    """Import one Anthropic Messages JSON file."""
    return sessions_from_document(read_json(path), path)


def sessions_from_document(document: Any, path: Path) -> list[Session]:
    """Import an already parsed Anthropic request body or message list."""
    if isinstance(document, list):
        document = {"messages": document}
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        raise FormatError(
            str(path),
            "",
            "a JSON object with 'messages' (and optionally 'system')",
            found=describe(document),
        )
    for index, message in enumerate(document["messages"]):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise FormatError(
                str(path),
                f"messages[{index}]",
                "an Anthropic message with role user or assistant",
                found=describe(message),
            )
    try:
        messages = from_anthropic(document["messages"], system=document.get("system"))
    except InvalidMessagesError as exc:
        location = "messages" if exc.index is None else f"messages[{exc.index}]"
        raise FormatError(
            str(path), location, "a valid Anthropic Messages conversation", found=exc.problem
        ) from exc
    metadata = {key: document[key] for key in ("tools", "model") if key in document}
    session_id = document["id"] if isinstance(document.get("id"), str) else path.stem
    return [finish(id=session_id, path=path, format=NAME, messages=messages, metadata=metadata)]
