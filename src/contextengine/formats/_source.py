"""Reading session files: whole JSON documents, JSONL streams, and the errors both raise.

Every importer reads through these helpers so a corrupt file is always reported
the same way: the file, the line (JSONL) or record (JSON), and what was
expected there. ``describe`` keeps the "found ..." part of those messages short
even when the offending value is a megabyte of tool output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError

__all__ = ["describe", "iter_jsonl", "read_json", "read_text"]

_FOUND_CHARS = 60


def describe(value: Any) -> str:
    """A short human description of ``value`` for a "found ..." error part."""
    if isinstance(value, dict):
        keys = ", ".join(repr(k) for k in list(value)[:6])
        return f"an object with keys {keys}" if keys else "an empty object"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, str):
        shown = value if len(value) <= _FOUND_CHARS else value[:_FOUND_CHARS] + "..."
        return f"the string {shown!r}"
    return "null" if value is None else f"{type(value).__name__} {value!r}"


def read_text(path: Path) -> str:
    """The file as UTF-8 text; an unreadable file is a :class:`FormatError`."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FormatError(str(path), "", "an existing session file", found="no such file") from None
    except UnicodeDecodeError as exc:
        raise FormatError(
            str(path), f"byte {exc.start}", "UTF-8 text", found="undecodable bytes"
        ) from exc
    except OSError as exc:
        raise FormatError(str(path), "", "a readable file", found=str(exc)) from exc


def read_json(path: Path, text: str | None = None) -> Any:
    """Parse the whole file as one JSON document, naming the line of a syntax error."""
    if text is None:
        text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(
            str(path), f"line {exc.lineno} column {exc.colno}", "valid JSON", found=exc.msg
        ) from exc


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line, streaming the file.

    Every line must hold one JSON object; anything else raises a
    :class:`FormatError` naming the line.
    """
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise FormatError(str(path), "", "an existing session file", found="no such file") from None
    except OSError as exc:
        raise FormatError(str(path), "", "a readable file", found=str(exc)) from exc
    with handle:
        lineno = 0
        try:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise FormatError(
                        str(path), f"line {lineno}", "one JSON object per line", found=exc.msg
                    ) from exc
                if not isinstance(value, dict):
                    raise FormatError(
                        str(path),
                        f"line {lineno}",
                        "one JSON object per line",
                        found=describe(value),
                    )
                yield lineno, value
        except UnicodeDecodeError as exc:
            raise FormatError(
                str(path), f"line {lineno + 1}", "UTF-8 text", found="undecodable bytes"
            ) from exc
