"""Format detection by content sniffing: the first record decides, not the file name.

JSONL files are recognised from their first non-blank line alone (one JSON
object, followed by more content), so a 4 MB Claude Code session is never
parsed twice. A JSON document has to be parsed whole to see its top-level
keys; :func:`detect` hands that parsed document back so the importer reuses it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats._source import describe, read_json

__all__ = ["MISSING", "Peek", "detect", "peek"]

#: Sentinel: no parsed document is available (JSONL input).
MISSING: Any = object()

#: Record types of Claude Code session JSONL (``summary`` is written by older versions).
CLAUDE_CODE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "progress",
        "file-history-snapshot",
        "queue-operation",
        "summary",
    }
)
#: Content blocks only the Anthropic Messages API has.
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})

_EXPECTED = (
    "a session file in one of the formats openai (JSON/JSONL messages), anthropic "
    "(JSON with 'system' and 'messages'), claude-code (session JSONL), swe-agent "
    "(trajectory JSON), tau-bench (JSON list of runs with 'traj')"
)


@dataclass(frozen=True)
class Peek:
    """What the first line of a file says about it.

    ``first`` is the first line's JSON object when that line parses on its own
    (always the case for JSONL); ``is_jsonl`` is true when more content follows it.
    """

    is_jsonl: bool
    first: dict[str, Any] | None
    first_char: str


def peek(path: Path) -> Peek:
    """Look at the first non-blank line of ``path`` without reading the rest."""
    try:
        with path.open(encoding="utf-8") as handle:
            line = ""
            for line in handle:
                if line.strip():
                    break
            first_char = line.lstrip("\ufeff \t\r\n")[:1]
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                return Peek(is_jsonl=False, first=None, first_char=first_char)
            if not isinstance(value, dict):
                return Peek(is_jsonl=False, first=None, first_char=first_char)
            more = any(rest.strip() for rest in handle)
            return Peek(is_jsonl=more, first=value, first_char=first_char)
    except FileNotFoundError:
        raise FormatError(str(path), "", "an existing session file", found="no such file") from None
    except UnicodeDecodeError:
        raise FormatError(str(path), "", "UTF-8 text", found="undecodable bytes") from None
    except OSError as exc:
        raise FormatError(str(path), "", "a readable file", found=str(exc)) from exc


def detect(path: Path) -> tuple[str, Any]:
    """Return ``(format_name, document)``; ``document`` is :data:`MISSING` for JSONL.

    Raises :class:`FormatError` when the content matches no known format.
    """
    head = peek(path)
    if head.is_jsonl:
        assert head.first is not None  # is_jsonl implies a parsed first line
        return _classify_record(path, head.first), MISSING
    if head.first is not None:
        # A single-line file holding one object: a document, or a one-record JSONL.
        if _is_claude_code_record(head.first):
            return "claude-code", MISSING
        return _classify_document(path, head.first), head.first
    if head.first_char not in ("[", "{"):
        found = "an empty file" if not head.first_char else f"text starting {head.first_char!r}"
        raise FormatError(str(path), "line 1", _EXPECTED, found=found)
    document = read_json(path)
    return _classify_document(path, document), document


def _is_claude_code_record(record: dict[str, Any]) -> bool:
    return record.get("type") in CLAUDE_CODE_TYPES and (
        "uuid" in record or "sessionId" in record or "messageId" in record or "leafUuid" in record
    )


def _classify_record(path: Path, record: dict[str, Any]) -> str:
    if _is_claude_code_record(record):
        return "claude-code"
    if "role" in record or "messages" in record:
        return "openai"
    raise FormatError(str(path), "line 1", _EXPECTED, found=describe(record))


def _classify_document(path: Path, document: Any) -> str:
    if isinstance(document, list):
        first = document[0] if document else None
        if isinstance(first, dict) and "traj" in first:
            return "tau-bench"
        if first is None or (isinstance(first, dict) and "role" in first):
            return "anthropic" if _has_anthropic_blocks(document) else "openai"
        raise FormatError(str(path), "record 0", _EXPECTED, found=describe(first))
    if isinstance(document, dict):
        trajectory_format = document.get("trajectory_format")
        if (
            (isinstance(trajectory_format, str) and "swe-agent" in trajectory_format)
            or ("messages" in document and "instance_id" in document)
            or ("history" in document and "trajectory" in document)
        ):
            return "swe-agent"
        if "role" in document:
            return "openai"  # a one-line JSONL file holding a single message
        if isinstance(document.get("messages"), list):
            messages = document["messages"]
            if "system" in document or _has_anthropic_blocks(messages):
                return "anthropic"
            return "openai"
    raise FormatError(str(path), "", _EXPECTED, found=describe(document))


def _has_anthropic_blocks(messages: list[Any]) -> bool:
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") in ("tool", "system") or message.get("tool_calls"):
            return False  # OpenAI markers win: Anthropic has neither
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") in _ANTHROPIC_BLOCKS for block in content
        ):
            return True
    return False
