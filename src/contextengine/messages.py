"""Messages: validation, tool-call pair integrity, safe cut points, plain text.

Messages are OpenAI chat-completions dicts. Roles are ``system``, ``user``,
``assistant`` and ``tool`` (plus ``developer`` and the legacy ``function``);
an assistant may carry ``tool_calls`` (each with an ``id``), and a ``tool``
message answers one call through its ``tool_call_id``. Content is a string,
None, or a list of parts (``text``, ``image_url``, ...). Unknown extra keys are
kept everywhere: providers and agents add their own.

Providers reject a request in which a tool call has no result, or a result has
no call, and keep rejecting every later request of that conversation. So every
engine output goes through :func:`sanitize_tool_pairs`, and every cut an engine
makes falls on a *safe cut point*: an assistant message with tool calls and the
results that follow it form one unbreakable group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextengine.anthropic_format import from_anthropic, to_anthropic
from contextengine.errors import InvalidMessagesError

__all__ = [
    "KNOWN_ROLES",
    "PLACEHOLDER_FOR_REMOVED_CALLS",
    "Message",
    "Repair",
    "align_cut_backward",
    "align_cut_forward",
    "from_anthropic",
    "is_tool_call_message",
    "message_text",
    "repair_message",
    "safe_cut_points",
    "sanitize_tool_pairs",
    "to_anthropic",
    "tool_call_ids",
    "tool_groups",
    "validate_messages",
]

Message = dict[str, Any]

KNOWN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

#: Text given to an assistant message left with neither content nor tool calls.
PLACEHOLDER_FOR_REMOVED_CALLS = "(tool call removed: its result was lost)"


@dataclass(frozen=True, kw_only=True)
class Repair:
    """One thing :func:`sanitize_tool_pairs` repaired, for the warning a host emits.

    ``kind`` is ``"unanswered_call"`` (a call whose result was lost: removed),
    ``"orphan_result"`` (a result answering no call: dropped),
    ``"duplicate_result"`` (a second result for one call: dropped),
    ``"empty_tool_calls"`` (``tool_calls: []``: removed) or
    ``"empty_assistant"`` (an assistant message with neither content nor tool
    calls, such as a thinking-only turn: given empty text). ``index`` is the
    message's position in the input; ``call_id`` and ``name`` name the call.
    """

    kind: Literal[
        "unanswered_call",
        "orphan_result",
        "duplicate_result",
        "empty_tool_calls",
        "empty_assistant",
    ]
    index: int
    call_id: str = ""
    name: str = ""


# ---------------------------------------------------------------------------- validation


def validate_messages(messages: Any) -> None:
    """Raise :class:`InvalidMessagesError` naming the index and problem of the first bad message.

    Checks what a provider would reject: roles, content types, the shape of
    ``tool_calls`` and ``tool_call_id``, and that calls and results pair up
    (every call answered by a ``tool`` message in the run right after it, every
    result answering a call of that run). :func:`sanitize_tool_pairs` repairs
    the pairing problems this reports.
    """
    if not isinstance(messages, list):
        raise InvalidMessagesError(f"expected a list of messages, got {type(messages).__name__}")
    for index, message in enumerate(messages):
        _validate_one(message, index)
    _validate_pairs(messages)


def _validate_pairs(messages: list[Message]) -> None:
    group_start = -1  # index of the assistant whose results may follow
    owner: dict[str, int] = {}  # id or call_id -> position of the call in its message
    answered: set[int] = set()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            match = next((owner[k] for k in _result_keys(message) if k in owner), None)
            if match is None or match in answered:
                problem = (
                    "answers a tool call a second time"
                    if match is not None
                    else ("answers no tool call")
                )
                raise InvalidMessagesError(
                    f"tool result {problem} of the assistant message right before it "
                    f"(tool_call_id {message.get('tool_call_id')!r})",
                    index=index,
                )
            answered.add(match)
            continue
        _check_group_answered(messages, group_start, answered)
        group_start, owner, answered = -1, {}, set()
        if is_tool_call_message(message):
            group_start = index
            for position, call in enumerate(message["tool_calls"]):
                for key in _call_keys(call):
                    owner.setdefault(key, position)
    _check_group_answered(messages, group_start, answered)


def _check_group_answered(messages: list[Message], group_start: int, answered: set[int]) -> None:
    if group_start < 0:
        return
    calls = messages[group_start]["tool_calls"]
    for position, call in enumerate(calls):
        if position not in answered:
            raise InvalidMessagesError(
                f"tool call {call.get('id')!r} has no result in the tool messages that follow it",
                index=group_start,
            )


def _validate_one(message: Any, index: int) -> None:
    def fail(problem: str) -> InvalidMessagesError:
        return InvalidMessagesError(problem, index=index)

    if not isinstance(message, dict):
        raise fail(f"expected a dict, got {type(message).__name__}")
    if "role" not in message:
        raise fail("missing 'role'")
    role = message["role"]
    if not isinstance(role, str) or role not in KNOWN_ROLES:
        raise fail(f"unknown role {role!r} (expected one of {', '.join(sorted(KNOWN_ROLES))})")
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise fail(
            f"content must be a string, a list of parts or None, got {type(content).__name__}"
        )
    if isinstance(content, list):
        for part_index, part in enumerate(content):
            if not isinstance(part, dict):
                raise fail(f"content[{part_index}] must be a dict, got {type(part).__name__}")
            if not isinstance(part.get("type"), str):
                raise fail(f"content[{part_index}] has no 'type'")
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant":
            raise fail(f"only assistant messages carry tool_calls, not {role}")
        _validate_tool_calls(tool_calls, fail)
    if role == "tool":
        tool_call_id = message.get("tool_call_id")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise fail("tool message without a tool_call_id")
    elif role in ("system", "developer", "user") and content is None:
        raise fail(f"{role} message has no content")
    elif (
        role == "assistant"
        and content is None
        and not tool_calls
        # Providers accept a missing content only beside a function_call or a refusal.
        and "function_call" not in message
        and "refusal" not in message
    ):
        raise fail("assistant message has neither content nor tool_calls")


def _validate_tool_calls(tool_calls: Any, fail: Any) -> None:
    if not isinstance(tool_calls, list):
        raise fail(f"tool_calls must be a list, got {type(tool_calls).__name__}")
    if not tool_calls:
        # OpenAI answers 400 "empty array" for ``tool_calls: []``; omit the key instead.
        raise fail("tool_calls is an empty list (omit the key when there are no calls)")
    for call_index, call in enumerate(tool_calls):
        where = f"tool_calls[{call_index}]"
        if not isinstance(call, dict):
            raise fail(f"{where} must be a dict, got {type(call).__name__}")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise fail(f"{where} has no id")
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise fail(f"{where} has no function name")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            raise fail(f"{where}.function.arguments must be a JSON string")


# ---------------------------------------------------------------------------- tool pairs


def is_tool_call_message(message: Message) -> bool:
    """True for an assistant message carrying at least one tool call."""
    calls = message.get("tool_calls")
    return message.get("role") == "assistant" and isinstance(calls, list) and bool(calls)


def _call_keys(call: Any) -> tuple[str, ...]:
    """The identifiers a result may use to answer this call: ``id`` and ``call_id``."""
    if not isinstance(call, dict):
        return ()
    return tuple(v for v in (call.get("id"), call.get("call_id")) if isinstance(v, str) and v)


def _result_keys(message: Message) -> tuple[str, ...]:
    keys = (message.get("tool_call_id"), message.get("call_id"))
    return tuple(v for v in keys if isinstance(v, str) and v)


def tool_call_ids(message: Message) -> list[str]:
    """The ids of the tool calls an assistant message carries (empty for any other)."""
    if not is_tool_call_message(message):
        return []
    return [keys[0] for keys in map(_call_keys, message["tool_calls"]) if keys]


def sanitize_tool_pairs(
    messages: Sequence[Message], repairs: list[Repair] | None = None
) -> list[Message]:
    """Return the messages with every tool call answered and every tool result called.

    A group is an assistant message with tool calls and the run of ``tool``
    messages right after it, which is where providers require the results.
    Within a group, a call without a result is removed from its assistant
    message (no result is invented), and a result that answers none of the
    group's calls, or answers one a second time, is dropped. A ``tool`` message
    outside any group is dropped. An assistant message left with neither
    content nor calls gets :data:`PLACEHOLDER_FOR_REMOVED_CALLS` as content;
    one that never had either (a thinking-only turn, common in Claude Code and
    Anthropic histories) gets empty text, keeping its other fields.

    Calls match on ``id`` and, where present, ``call_id``. Order is kept, the
    input is never mutated (changed messages are copies) and the work is linear.
    Each repair is appended to ``repairs`` when a list is given.
    """
    result: list[Message] = []
    index = 0
    total = len(messages)
    while index < total:
        message = messages[index]
        if message.get("role") == "tool":
            if repairs is not None:  # outside any group: an orphan
                repairs.append(_result_repair("orphan_result", index, message))
            index += 1
            continue
        if not is_tool_call_message(message):
            result.append(_without_empty_calls(message, index, repairs))
            index += 1
            continue
        end = index + 1
        while end < total and messages[end].get("role") == "tool":
            end += 1
        result.extend(_pair_group(message, messages[index + 1 : end], index, repairs))
        index = end
    return result


def repair_message(message: Message) -> Message:
    """One message as :func:`sanitize_tool_pairs` would send it, when it alone is the problem.

    An assistant message with ``tool_calls: []`` loses the key; one with
    neither content nor calls (a thinking-only turn) gets empty text. Any
    other message is returned as it is (the same object). For engines that
    build their output from stored messages one by one (the lossless view).
    """
    return _without_empty_calls(message, 0, None)


def _result_repair(kind: Any, index: int, message: Message) -> Repair:
    keys = _result_keys(message)
    return Repair(kind=kind, index=index, call_id=keys[0] if keys else "")


def _call_name(call: Any) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else ""


def _without_empty_calls(message: Message, index: int, repairs: list[Repair] | None) -> Message:
    """Repair an assistant message providers would reject: ``tool_calls: []``, or nothing at all.

    An empty ``tool_calls`` list is removed; a message with neither content
    nor calls (nor a ``function_call`` or ``refusal`` standing in for them)
    gets empty text, so a thinking-only turn stays in place with its thinking.
    """
    if message.get("role") != "assistant":
        return message
    if message.get("tool_calls") == []:
        repaired = dict(message)
        del repaired["tool_calls"]
        _fill_placeholder(repaired)
        if repairs is not None:
            repairs.append(Repair(kind="empty_tool_calls", index=index))
        return repaired
    if (
        message.get("content") is None
        and not message.get("tool_calls")
        and "function_call" not in message
        and "refusal" not in message
    ):
        if repairs is not None:
            repairs.append(Repair(kind="empty_assistant", index=index))
        return {**message, "content": ""}
    return message


def _fill_placeholder(assistant: Message) -> None:
    content = assistant.get("content")
    if content is None or content == "" or content == []:
        assistant["content"] = PLACEHOLDER_FOR_REMOVED_CALLS


def _pair_group(
    assistant: Message, results: Sequence[Message], index: int, repairs: list[Repair] | None
) -> list[Message]:
    calls = assistant["tool_calls"]
    owner: dict[str, int] = {}
    for position, call in enumerate(calls):
        for key in _call_keys(call):
            owner.setdefault(key, position)
    answered: set[int] = set()
    kept_results: list[Message] = []
    for offset, result in enumerate(results, start=index + 1):
        match = next((owner[k] for k in _result_keys(result) if k in owner), None)
        if match is None or match in answered:
            if repairs is not None:
                kind = "orphan_result" if match is None else "duplicate_result"
                repairs.append(_result_repair(kind, offset, result))
            continue
        answered.add(match)
        kept_results.append(result)
    if len(answered) == len(calls):
        return [assistant, *kept_results]
    if repairs is not None:
        for position, call in enumerate(calls):
            if position not in answered:
                keys = _call_keys(call)
                repairs.append(
                    Repair(
                        kind="unanswered_call",
                        index=index,
                        call_id=keys[0] if keys else "",
                        name=_call_name(call),
                    )
                )
    repaired = dict(assistant)
    kept_calls = [call for position, call in enumerate(calls) if position in answered]
    if kept_calls:
        repaired["tool_calls"] = kept_calls
    else:
        del repaired["tool_calls"]
        _fill_placeholder(repaired)
    return [repaired, *kept_results]


# ---------------------------------------------------------------------------- cut points


def tool_groups(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The unbreakable spans ``[start, end)`` of the list, in order, covering it.

    An assistant message with tool calls and the ``tool`` messages right after
    it are one span; every other message is a span of its own.
    """
    spans: list[tuple[int, int]] = []
    index = 0
    total = len(messages)
    while index < total:
        end = index + 1
        if is_tool_call_message(messages[index]):
            while end < total and messages[end].get("role") == "tool":
                end += 1
        spans.append((index, end))
        index = end
    return spans


def safe_cut_points(messages: Sequence[Message]) -> list[int]:
    """Every index ``i`` where cutting ``messages[:i] | messages[i:]`` splits no group."""
    return [start for start, _ in tool_groups(messages)] + [len(messages)]


def _glued_to_previous(messages: Sequence[Message], index: int) -> bool:
    """True when ``messages[index]`` is a result inside a group, so no cut may fall before it.

    Only a run of ``tool`` messages right after an assistant message with tool
    calls is glued to it; an orphan run is a series of single-message spans,
    exactly as :func:`tool_groups` draws them.
    """
    if not 0 < index < len(messages) or messages[index].get("role") != "tool":
        return False
    start = index
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    return start > 0 and is_tool_call_message(messages[start - 1])


def align_cut_backward(messages: Sequence[Message], index: int) -> int:
    """The largest safe cut point ``<= index`` (clamped to ``0..len``).

    A cut inside a group walks back over the results to their assistant message.
    """
    index = max(0, min(index, len(messages)))
    if not _glued_to_previous(messages, index):
        return index
    while messages[index].get("role") == "tool":
        index -= 1
    return index


def align_cut_forward(messages: Sequence[Message], index: int) -> int:
    """The smallest safe cut point ``>= index`` (clamped to ``0..len``)."""
    index = max(0, min(index, len(messages)))
    if not _glued_to_previous(messages, index):
        return index
    while index < len(messages) and messages[index].get("role") == "tool":
        index += 1
    return index


# ---------------------------------------------------------------------------- text


def message_text(message: Message) -> str:
    """The plain text of a message: its text, text parts, and tool calls as ``name(arguments)``.

    Used for search indexes and summaries; images and other non-text parts are
    left out.
    """
    pieces: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    pieces.append(text)
                elif isinstance(part.get("content"), str):
                    pieces.append(part["content"])
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                name = function.get("name", "")
                arguments = function.get("arguments") or ""
                pieces.append(f"{name}({arguments})")
    return "\n".join(pieces)
