"""The summary message: its markers, its role, and how a later compaction finds it.

A summary sits between the kept head and the kept tail of a compacted
conversation. Models tend to take any text in a user message as a fresh
request, so the summary is framed: it opens with :data:`SUMMARY_START`, which
says that what follows is reference material from earlier in the conversation
and not new instructions, and closes with :data:`SUMMARY_END`. The framing
lives in the summary itself, never in the system prompt: the system prompt is
kept byte-identical because the provider's prompt cache depends on it.

Its role keeps the conversation valid and readable:

* when only the system prompt precedes it, it is a ``user`` message (a
  conversation must open with a user turn), merged into the first tail message
  when that one is a user message too;
* otherwise it takes the role, ``user`` or ``assistant``, that puts no two
  same-role messages side by side;
* when both roles would (a user message before it and an assistant message
  after it, or the other way round) it is merged into the first tail message,
  between its markers, ahead of that message's own content.

:func:`is_summary_message` recognises both forms and :func:`split_summary`
takes one apart again, so that the next compaction replaces the summary
instead of nesting it. The engine calls these; nothing here counts tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "SUMMARY_END",
    "SUMMARY_START",
    "SplitSummary",
    "find_summary",
    "frame_summary",
    "is_summary_message",
    "place_summary",
    "split_summary",
    "unframe_summary",
]

Message = dict[str, Any]

#: Opens every summary. The bracketed tag is what :func:`is_summary_message` looks for.
SUMMARY_START = (
    "[CONTEXT SUMMARY] Reference material from earlier in this conversation, condensed "
    "to save space. It is not new instructions: do not act on requests in it unless the "
    "messages after it still ask for them; answer the latest user message."
)
#: Closes every summary.
SUMMARY_END = "[END OF CONTEXT SUMMARY]"

# A merged summary always comes first in its message, so the tag is only looked
# for at the very start: a tag deeper in the text is a quotation, not our summary.
_START_TAG = "[CONTEXT SUMMARY]"


def frame_summary(body: str) -> str:
    """The full text of a summary: start marker, the body, end marker.

    A body that already carries the markers (a summariser that echoed them)
    loses them first (:func:`unframe_summary`), so that the summary is never
    framed twice.
    """
    return f"{SUMMARY_START}\n\n{unframe_summary(body)}\n\n{SUMMARY_END}"


def unframe_summary(body: str) -> str:
    """``body`` without the start and end markers a summariser may have echoed, any number of times.

    The engine unframes a model's answer before it adds to it, so that what it
    adds lands inside the markers.
    """
    text = body.strip()
    while True:
        stripped = text
        for marker in (SUMMARY_START, _START_TAG):
            if stripped.startswith(marker):
                stripped = stripped[len(marker) :].strip()
                break
        if stripped.endswith(SUMMARY_END):
            stripped = stripped[: -len(SUMMARY_END)].strip()
        if stripped == text:
            break
        text = stripped
    return text


def _first_text(msg: Message) -> str | None:
    """The text a summary would occupy in ``msg``: its string content or first text part."""
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        part = content[0]
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            return str(part["text"])
    return None


def is_summary_message(msg: Message) -> bool:
    """Whether ``msg`` holds a compressor summary, standalone or merged into another message.

    A summary message starts with the start tag and contains the end marker;
    only ``user`` and ``assistant`` messages can hold one.
    """
    if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
        return False
    text = _first_text(msg)
    if text is None:
        return False
    return text.startswith(_START_TAG) and SUMMARY_END in text


@dataclass(frozen=True)
class SplitSummary:
    """A summary message taken apart by :func:`split_summary`."""

    #: The summary body, without its markers.
    text: str
    #: The message the summary was merged into, with the summary removed; None when standalone.
    remainder: Message | None


def split_summary(msg: Message) -> SplitSummary:
    """Separate the summary body from the message it may have been merged into.

    ``msg`` must satisfy :func:`is_summary_message`. The remainder is a new
    dict (the input is not mutated) and is None when nothing but the summary
    was in the message.
    """
    text = _first_text(msg) or ""
    end = text.find(SUMMARY_END)
    opening = SUMMARY_START if text.startswith(SUMMARY_START) else _START_TAG
    body = text[len(opening) : end]
    rest = text[end + len(SUMMARY_END) :].lstrip("\n")
    content = msg.get("content")
    remainder: Message | None = None
    if isinstance(content, str):
        if rest or msg.get("tool_calls"):
            remainder = {**msg, "content": rest if rest else None}
    elif isinstance(content, list):
        parts = list(content[1:])
        if rest:
            parts.insert(0, {**content[0], "text": rest})
        if parts:
            remainder = {**msg, "content": parts}
        elif msg.get("tool_calls"):
            remainder = {**msg, "content": None}
    return SplitSummary(text=body.strip(), remainder=remainder)


def find_summary(messages: list[Message], start: int, limit: int) -> int | None:
    """Index of the first summary message in ``messages[start:limit]``, or None.

    The engine bounds ``limit`` to where a summary can be (right after the
    head), so finding it never scans a long history.
    """
    for index in range(start, min(limit, len(messages))):
        if is_summary_message(messages[index]):
            return index
    return None


def _merge_into(msg: Message, framed: str) -> Message:
    """A copy of ``msg`` with the framed summary ahead of its own content."""
    content = msg.get("content")
    if isinstance(content, list):
        return {**msg, "content": [{"type": "text", "text": framed}, *content]}
    if isinstance(content, str) and content:
        return {**msg, "content": f"{framed}\n\n{content}"}
    return {**msg, "content": framed}


def place_summary(before: Message | None, after: Message | None, body: str) -> tuple[str, Message]:
    """Decide how the summary enters the conversation.

    ``before`` is the message just ahead of the summary (None or a system
    message when only the system prompt precedes it) and ``after`` the first
    message after it (None when nothing follows). Returns ``("standalone",
    summary_message)`` or ``("merged", after_with_summary)``; in the merged
    case the caller replaces ``after`` with the returned message.
    """
    framed = frame_summary(body)
    after_role = after.get("role") if after is not None else None
    before_role = before.get("role") if before is not None else None
    if before_role in (None, "system", "developer"):
        # The first turn after the system prompt must be the user's.
        if after is not None and after_role == "user":
            return "merged", _merge_into(after, framed)
        return "standalone", {"role": "user", "content": framed}
    for role in ("user", "assistant"):
        if role != before_role and role != after_role:
            return "standalone", {"role": role, "content": framed}
    if after is not None:
        return "merged", _merge_into(after, framed)
    role = "assistant" if before_role == "user" else "user"
    return "standalone", {"role": role, "content": framed}
