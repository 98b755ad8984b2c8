"""Large contents: huge tool results kept once in the archive and shown in the view as a reference.

A tool result bigger than the engine's ``large_content_tokens`` would crowd
everything else out of the view, yet the model may need it again. When the
engine first stores such a message it calls :meth:`Store.put_large_content`
(exactly once per message) and, in every view from then on, the message's
content is replaced by :func:`reference_text`: the large content's id, its
size and a short deterministic digest (:func:`digest`), so the model can decide
whether to reopen it with ``lcm_expand``. The digest depends only on the text,
never on time or randomness, so the view's bytes stay stable for the provider's
prompt cache.
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from contextengine.summary_prompt import content_text

__all__ = [
    "DIGEST_MAX_CHARS",
    "LARGE_CONTENT_MARKER",
    "digest",
    "is_large_content_reference",
    "reference_message",
    "reference_text",
]

Message = dict[str, Any]

#: Every reference starts with this, so the engine recognises its own
#: references when a host hands a previous view back as history.
LARGE_CONTENT_MARKER = "[lcm large content "
#: Upper bound of a digest, in characters.
DIGEST_MAX_CHARS = 1_500
_FIRST_LINES = 8
_LINE_CHARS = 160
_MAX_KEYS = 20
_MAX_SYMBOLS = 30

# Definitions in the languages agents read most; the name is the last group.
_SYMBOL_PATTERNS = (
    re.compile(r"^\s*(?:async\s+)?(def|class)\s+([A-Za-z_]\w*)", re.MULTILINE),
    re.compile(
        r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?(function|class|interface|type)\s+"
        r"([A-Za-z_$][\w$]*)",
        re.MULTILINE,
    ),
    re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(fn|struct|enum|trait|impl)\s+([A-Za-z_]\w*)", re.M),
    re.compile(r"^\s*(func)\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)", re.MULTILINE),
)


def _json_shape(value: Any) -> str:
    if isinstance(value, dict):
        return f"object({len(value)} keys)"
    if isinstance(value, list):
        return f"array({len(value)})"
    if isinstance(value, str):
        return f"string({len(value)} chars)"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _json_digest(text: str) -> list[str] | None:
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict):
        keys = list(data)
        lines = [f"JSON object with {len(keys)} top-level keys:"]
        lines += [f"  {key}: {_json_shape(data[key])}" for key in keys[:_MAX_KEYS]]
        if len(keys) > _MAX_KEYS:
            lines.append(f"  … {len(keys) - _MAX_KEYS} more keys")
        return lines
    if isinstance(data, list):
        lines = [f"JSON array of {len(data)} items"]
        if data:
            first = data[0]
            lines[0] += f"; first item: {_json_shape(first)}"
            if isinstance(first, dict):
                keys = list(first)[:_MAX_KEYS]
                lines.append("  item keys: " + ", ".join(str(key) for key in keys))
        return lines
    return None


def _csv_digest(text: str) -> list[str] | None:
    head = text.splitlines()[:6]
    if len(head) < 3:
        return None
    for delimiter in (",", "\t", ";", "|"):
        counts = {line.count(delimiter) for line in head if line.strip()}
        if len(counts) == 1 and min(counts) >= 1:
            reader = csv.reader(io.StringIO(head[0]), delimiter=delimiter)
            header = next(reader, [])
            rows = sum(1 for line in text.splitlines()[1:] if line.strip())
            name = {"\t": "TSV", ",": "CSV"}.get(delimiter, f"{delimiter!r}-separated")
            return [
                f"{name} with {len(header)} columns and {rows} data rows",
                "  header: " + ", ".join(column.strip() for column in header[:_MAX_KEYS]),
            ]
    return None


def _code_digest(text: str) -> list[str] | None:
    found: list[tuple[int, str]] = []
    for pattern in _SYMBOL_PATTERNS:
        found.extend(
            (match.start(), f"{match.group(1)} {match.group(2)}")
            for match in pattern.finditer(text)
        )
    if not found:
        return None
    found.sort()
    symbols: list[str] = []
    for _, symbol in found:
        if symbol not in symbols:
            symbols.append(symbol)
    shown = symbols[:_MAX_SYMBOLS]
    more = f" … {len(symbols) - len(shown)} more" if len(symbols) > len(shown) else ""
    return [f"code symbols ({len(symbols)}): " + ", ".join(shown) + more]


def digest(text: str) -> str:
    """A short deterministic description of ``text``: its structure and first lines.

    JSON gets its top-level keys with their types and lengths (or its length
    and first item's keys for an array), CSV/TSV its header and row count, code
    the names it defines (def/class/function/fn/func...), and everything the
    first few lines. Bounded to :data:`DIGEST_MAX_CHARS`.
    """
    lines = _json_digest(text) or _csv_digest(text) or _code_digest(text) or []
    first = [line[:_LINE_CHARS] for line in text.splitlines()[:_FIRST_LINES]]
    if first:
        lines.append("first lines:")
        lines += [f"  | {line}" for line in first]
    result = "\n".join(lines)
    if len(result) > DIGEST_MAX_CHARS:
        result = result[: DIGEST_MAX_CHARS - 1] + "…"
    return result


def reference_text(content_id: str, text: str, token_count: int) -> str:
    """What the view shows instead of a large tool result."""
    lines = text.count("\n") + 1 if text else 0
    return (
        f"{LARGE_CONTENT_MARKER}{content_id}: {token_count} tokens, {len(text)} chars, "
        f"{lines} lines; stored verbatim outside the view. Call lcm_expand with id "
        f'"{content_id}" (and offset) to read it.]\n{digest(text)}'
    )


def reference_message(message: Message, content_id: str, token_count: int) -> Message:
    """A copy of the tool ``message`` whose content is the reference to its large content."""
    text = content_text(message.get("content"))
    return {**message, "content": reference_text(content_id, text, token_count)}


def is_large_content_reference(message: Message) -> bool:
    """Whether ``message`` is a view reference the engine produced (not host content)."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(LARGE_CONTENT_MARKER)
