"""Pass 1 of compaction: shrink old tool traffic without calling a model.

Most of an agent's context is tool output it has already acted on: files it
read, test logs, search results. Before any summary is written, the messages
between the kept head and the kept tail are pruned mechanically:

* a tool result over :data:`PRUNE_MIN_CHARS` characters becomes a one-line
  descriptor naming the tool, its key arguments, the output's size and the
  exit status when the output shows one
  (``[tool output pruned: bash(command=pytest -x) → 12,034 chars, 210 lines, exit 1]``);
* a tool output identical to an earlier one becomes a pointer to the first;
* tool-call arguments over :data:`ARGS_MAX_CHARS` characters are shrunk while
  staying valid JSON (long string values are cut, with a note of how much);
* an image becomes a one-line placeholder (:data:`IMAGE_PLACEHOLDER`, with its
  URL when it has a short web one): its tokens are spent on every request,
  and the model already described what it needed of it;
* a blank user message (an empty "echo" some hosts append to continue a turn)
  is dropped: :attr:`PruneResult.dropped` lists it, and the engine leaves it out.

Every call keeps its id and every result keeps its ``tool_call_id``, so tool
pairs stay intact; only payloads change. Pruning is idempotent: a descriptor
or pointer is shorter than the pruning limit and is never pruned again. The
input messages are never mutated; changed ones are new dicts.

The engine runs :func:`prune_region` as pass 1 of ``compress`` and, on its
own cheap trigger, from ``prune_tool_results_only``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contextengine.anchors import Anchor, message_anchors

__all__ = [
    "ARGS_MAX_CHARS",
    "DESCRIPTOR_PREFIX",
    "IMAGE_PLACEHOLDER",
    "POINTER_PREFIX",
    "PRUNE_MIN_CHARS",
    "PruneResult",
    "describe_tool_output",
    "prune_region",
    "shrink_arguments",
]

Message = dict[str, Any]

#: Tool results longer than this many characters are replaced by a descriptor.
PRUNE_MIN_CHARS = 200
#: Tool-call arguments longer than this many characters are shrunk.
ARGS_MAX_CHARS = 500
DESCRIPTOR_PREFIX = "[tool output pruned: "
POINTER_PREFIX = "[same output as "
_OWN_PREFIXES = (DESCRIPTOR_PREFIX, POINTER_PREFIX)
#: What an image in a pruned message becomes (a text part).
IMAGE_PLACEHOLDER = "[image omitted after compaction]"
_IMAGE_TYPES = ("image_url", "input_image", "image")
_IMAGE_URL_CHARS = 120
#: Identifiers a descriptor keeps from its output, and of which kinds, in order.
DESCRIPTOR_ANCHORS = 5
DESCRIPTOR_ANCHOR_KINDS = ("errors", "files", "ids", "urls")
DESCRIPTOR_ANCHOR_CHARS = 80

# Argument names that identify what a call did, most telling first. When none
# is present the first scalar arguments are shown instead.
_KEY_ARGS = (
    "command",
    "cmd",
    "path",
    "file_path",
    "filepath",
    "file",
    "filename",
    "url",
    "query",
    "pattern",
    "name",
    "id",
)
# Plural forms hold lists ("urls": [...]); shown as their first item and a count.
_PLURAL_KEY_ARGS = ("commands", "paths", "file_paths", "files", "urls", "queries", "patterns")
_MAX_KEY_ARGS = 2
_MAX_ARG_VALUE_CHARS = 60
# Exit statuses are looked for only near the ends of an output, where shells,
# test runners and agent harnesses print them; scanning a 400k-char log is waste.
_STATUS_WINDOW = 2_000
_EXIT_STATUS = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>"
    r"|\bexit(?:ed)?(?: with)?(?: code| status)\s*[:=]?\s*(-?\d+)"
    r"|\"(?:exit_code|returncode|exit_status|exitCode)\"\s*:\s*(-?\d+)",
    re.IGNORECASE,
)


def content_text(content: Any) -> str:
    """The text of a message content: the string itself or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _parse_args(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return None
    return None


def _one_line(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar_text(value: Any) -> str | None:
    """One short line for a value worth showing: a scalar, or a list or object of them.

    URLs and paths often come inside objects or lists (``{"urls": [...]}``,
    ``{"source": {"url": ...}}``); those show their first telling value.
    """
    if isinstance(value, str | int | float | bool):
        return _one_line(value, _MAX_ARG_VALUE_CHARS)
    if isinstance(value, list) and value:
        first = _scalar_text(value[0])
        if first is None:
            return None
        more = f" (+{len(value) - 1} more)" if len(value) > 1 else ""
        return first + more
    if isinstance(value, dict):
        for key in (*_KEY_ARGS, *_PLURAL_KEY_ARGS):
            if key in value:
                found = _scalar_text(value[key])
                if found is not None:
                    return found
    return None


def _key_args(arguments: Any) -> str:
    """``key=value`` pairs that identify a call, bounded to one short line."""
    parsed = _parse_args(arguments)
    if not isinstance(parsed, dict):
        return _one_line(arguments, _MAX_ARG_VALUE_CHARS) if arguments else ""
    shown = {k: text for k, v in parsed.items() if (text := _scalar_text(v)) is not None}
    keys = [k for k in (*_KEY_ARGS, *_PLURAL_KEY_ARGS) if k in shown][:_MAX_KEY_ARGS]
    if not keys:
        keys = list(shown)[:_MAX_KEY_ARGS]
    return ", ".join(f"{k}={shown[k]}" for k in keys)


def _exit_status(text: str) -> str | None:
    windows = (
        (text,)
        if len(text) <= 2 * _STATUS_WINDOW
        else (
            text[-_STATUS_WINDOW:],
            text[:_STATUS_WINDOW],
        )
    )
    for window in windows:
        match = _EXIT_STATUS.search(window)
        if match:
            return next(group for group in match.groups() if group is not None)
    return None


def describe_tool_output(
    name: str,
    arguments: Any,
    text: str,
    anchors: Sequence[Anchor] = (),
    archived_id: str | None = None,
) -> str:
    """The one-line descriptor that replaces a pruned tool output.

    The call and size fit in :data:`PRUNE_MIN_CHARS`; up to
    :data:`DESCRIPTOR_ANCHORS` of the output's exact identifiers (errors and
    paths first) follow, because a pruned output's identifiers are what the
    agent most often needs again. ``archived_id`` (the compressor's archive
    holds the output) ends it with ``— lcm_expand <id>``, the call that
    reopens the output verbatim. A descriptor is recognised by its prefix and
    never pruned again.
    """
    lines = text.count("\n") + 1 if text else 0
    size = f"{len(text):,} chars, {lines:,} lines"
    status = _exit_status(text)
    if status is not None:
        size += f", exit {status}"
    call = f"{name or 'tool'}({_key_args(arguments)})"
    room = PRUNE_MIN_CHARS - len(DESCRIPTOR_PREFIX) - len(size) - 6
    if len(call) > room:
        call = call[: max(8, room - 2)] + "…)"
    kept = _descriptor_anchors(anchors)
    keys = f"; keys: {' | '.join(kept)}" if kept else ""
    return f"{DESCRIPTOR_PREFIX}{call} → {size}{keys}{_expand_note(archived_id)}]"


def _expand_note(archived_id: str | None) -> str:
    return f" — lcm_expand {archived_id}" if archived_id else ""


def _descriptor_anchors(anchors: Sequence[Anchor]) -> list[str]:
    rank = {kind: n for n, kind in enumerate(DESCRIPTOR_ANCHOR_KINDS)}
    chosen = sorted((a for a in anchors if a.kind in rank), key=lambda a: (rank[a.kind], a.start))
    values: list[str] = []
    for anchor in chosen:
        value = _one_line(anchor.value, DESCRIPTOR_ANCHOR_CHARS)
        if value not in values:
            values.append(value)
        if len(values) == DESCRIPTOR_ANCHORS:
            break
    return values


def _shrink_value(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}…[{len(value) - limit} chars cut]"
    if isinstance(value, dict):
        return {k: _shrink_value(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink_value(v, limit) for v in value]
    return value


def shrink_arguments(arguments: str) -> str:
    """Tool-call arguments cut to about :data:`ARGS_MAX_CHARS` characters, still valid JSON.

    Long string values are cut first, shorter and shorter; arguments that stay
    too long (many keys) or were not JSON become ``{"_truncated": ..., "_original_chars": n}``.
    """
    if len(arguments) <= ARGS_MAX_CHARS:
        return arguments
    parsed = _parse_args(arguments)
    if isinstance(parsed, dict | list):
        limit = 240
        while limit >= 30:
            shrunk = json.dumps(_shrink_value(parsed, limit), ensure_ascii=False)
            if len(shrunk) <= ARGS_MAX_CHARS:
                return shrunk
            limit //= 2
    return json.dumps(
        {"_truncated": arguments[:300], "_original_chars": len(arguments)}, ensure_ascii=False
    )


@dataclass
class PruneResult:
    """What :func:`prune_region` did to one region."""

    #: The region after pruning; unchanged messages are the very same dicts.
    messages: list[Message]
    #: Positions (in the region) of the messages that changed.
    changed: list[int] = field(default_factory=list)
    results_pruned: int = 0
    duplicates: int = 0
    arguments_shrunk: int = 0
    #: Positions of blank user messages to leave out (still in :attr:`messages`,
    #: so that positions match the region's).
    dropped: list[int] = field(default_factory=list)
    images_replaced: int = 0

    def kept(self) -> list[Message]:
        """The region as it is to be sent: :attr:`messages` without the dropped ones."""
        if not self.dropped:
            return self.messages
        dropped = set(self.dropped)
        return [m for i, m in enumerate(self.messages) if i not in dropped]


def _is_blank(content: Any) -> bool:
    if content is None:
        return True
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        return all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and not str(part.get("text") or "").strip()
            for part in content
        )
    return False


def _image_placeholder(part: dict[str, Any]) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        url = part.get("url") if isinstance(part.get("url"), str) else None
    text = IMAGE_PLACEHOLDER
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        text = f"{IMAGE_PLACEHOLDER[:-1]}: {_one_line(url, _IMAGE_URL_CHARS)}]"
    return {"type": "text", "text": text}


def _without_images(content: Any) -> tuple[Any, int]:
    """``content`` with its image parts as placeholders, and how many there were."""
    if not isinstance(content, list):
        return content, 0
    count = 0
    parts: list[Any] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in _IMAGE_TYPES:
            parts.append(_image_placeholder(part))
            count += 1
        else:
            parts.append(part)
    return (parts, count) if count else (content, 0)


def prune_region(
    region: list[Message],
    *,
    shrink_args: bool = True,
    ids: Sequence[str | None] | None = None,
) -> PruneResult:
    """Pass 1 over ``region``: descriptors, duplicate pointers, shrunk arguments,
    image placeholders, blank user messages dropped.

    ``region`` holds whole tool groups (the engine cuts only at safe points),
    so every result's call is found in it; a result whose call is elsewhere
    still gets a descriptor, named ``tool``. ``ids`` (one per message, from
    the compressor's archive) makes descriptors and pointers name the
    archived id that reopens the output; the same message always gets the
    same descriptor, which keeps the provider's prompt cache warm.
    """
    calls: dict[str, tuple[str, Any]] = {}
    first_seen: dict[str, tuple[str, str]] = {}
    out = list(region)
    result = PruneResult(messages=out)
    # A blank user message is dropped only when a user message with text comes
    # after it in the region: the latest one stays, or a request could be left
    # with no user message at all (found by benchmarks/reliability/sessions.py).
    spoken_after = [False] * len(region)
    spoken = False
    for index in range(len(region) - 1, -1, -1):
        spoken_after[index] = spoken
        msg = region[index]
        if msg.get("role") == "user" and not _is_blank(msg.get("content")):
            spoken = True
    for index, msg in enumerate(region):
        role = msg.get("role")
        if (
            role == "user"
            and spoken_after[index]
            and _is_blank(msg.get("content"))
            and not msg.get("tool_calls")
        ):
            result.dropped.append(index)
            continue
        content, images = _without_images(msg.get("content"))
        if images:
            msg = out[index] = {**msg, "content": content}
            result.images_replaced += images
            result.changed.append(index)
        if role == "assistant" and msg.get("tool_calls"):
            new_calls: list[Any] = []
            shrunk_any = False
            for call in msg["tool_calls"]:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    new_calls.append(call)
                    continue
                args = function.get("arguments")
                calls[str(call.get("id"))] = (str(function.get("name") or ""), args)
                if shrink_args and isinstance(args, str) and len(args) > ARGS_MAX_CHARS:
                    call = {**call, "function": {**function, "arguments": shrink_arguments(args)}}
                    shrunk_any = True
                    result.arguments_shrunk += 1
                new_calls.append(call)
            if shrunk_any:
                out[index] = {**msg, "tool_calls": new_calls}
                if index not in result.changed:
                    result.changed.append(index)
        elif role == "tool":
            text = content_text(msg.get("content"))
            if len(text) <= PRUNE_MIN_CHARS or text.startswith(_OWN_PREFIXES):
                continue
            call_id = str(msg.get("tool_call_id"))
            name, args = calls.get(call_id, (str(msg.get("name") or ""), None))
            archived = ids[index] if ids is not None and index < len(ids) else None
            earlier = first_seen.get(text)
            if earlier is not None:
                first_name, first_id = earlier
                replacement = (
                    f"{POINTER_PREFIX}the {first_name or 'tool'} call {first_id} "
                    f"earlier ({len(text):,} chars){_expand_note(archived)}]"
                )
                result.duplicates += 1
            else:
                first_seen[text] = (name, call_id)
                replacement = describe_tool_output(
                    name, args, text, message_anchors(msg), archived_id=archived
                )
                result.results_pruned += 1
            out[index] = {**msg, "content": replacement}
            if index not in result.changed:
                result.changed.append(index)
    return result
