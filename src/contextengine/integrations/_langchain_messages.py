"""LangChain messages ⇄ OpenAI chat messages, exact both ways.

Used by :class:`~contextengine.integrations.langchain.ContextEngineMiddleware`
on every model call: the agent state's messages become the OpenAI-format
messages the host and its engine work on (:func:`to_openai`), and the view the
engine selects becomes LangChain messages again (:func:`from_openai`).

The rules, so that ``from_openai(to_openai(m)) == m`` for every LangChain
message and ``to_openai(from_openai(d)) == d`` for every OpenAI message:

* Roles: ``human`` ⇄ ``user``, ``ai`` ⇄ ``assistant``, ``system``, ``tool``,
  ``function``; a ``ChatMessage`` keeps its own role (``developer`` comes back
  as a ``ChatMessage``).
* ``id``, ``name``, ``tool_call_id`` and ``content`` map to themselves;
  multimodal parts (dicts) pass through untouched. LangChain's bare string
  parts become ``{"type": "text"}`` parts (providers want typed parts) and
  the original list is kept to restore them.
* Tool calls: LangChain's ``args`` dict is the JSON of ``arguments``;
  arguments that are not a JSON object become ``invalid_tool_calls``.
* ``additional_kwargs`` are OpenAI message fields (``refusal``,
  ``reasoning_content``...): they become top-level keys, except the few that
  would collide with a field above, which wait under ``langchain``.
* What only LangChain has (``response_metadata``, ``usage_metadata``,
  ``invalid_tool_calls`` details, a tool's ``status``, the class of a
  ``ChatMessage`` with a standard role) is kept in the OpenAI message under
  the key ``"langchain"``; engines keep unknown keys and token counts ignore
  them, so it costs nothing on the wire. A value that is not JSON (a tool's
  ``artifact`` object) is not kept there: the middleware restores the
  original LangChain message by its id instead.
* What only the OpenAI message has (``content: None``, tool-call arguments
  spelled differently from ``json.dumps`` of their value) is kept in
  ``additional_kwargs["openai_message"]``.

A kept original is used only while it still agrees with the message: when an
engine cut a message's content or calls, the cut wins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import invalid_tool_call, tool_call

from contextengine.errors import InvalidMessagesError

__all__ = ["LANGCHAIN_KEY", "OPENAI_KEY", "from_openai", "to_openai"]

Message = dict[str, Any]

#: Key of the OpenAI message holding what only LangChain has.
LANGCHAIN_KEY = "langchain"
#: Key of ``additional_kwargs`` holding what only the OpenAI message has.
OPENAI_KEY = "openai_message"

_ROLE_OF_TYPE = {
    "human": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
}
_CLASS_OF_ROLE: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "assistant": AIMessage,
    "system": SystemMessage,
    "tool": ToolMessage,
    "function": FunctionMessage,
}
# Fields of the OpenAI message that map to LangChain fields: an additional_kwargs
# key of one of these names cannot be lifted to the top level.
_RESERVED = frozenset(
    {"role", "content", "name", "id", "tool_calls", "tool_call_id", LANGCHAIN_KEY}
)
# LangChain fields handled explicitly; every other field is kept when not default.
_HANDLED = frozenset(
    {
        "content",
        "additional_kwargs",
        "type",
        "name",
        "id",
        "tool_calls",
        "invalid_tool_calls",
        "tool_call_id",
        "role",
    }
)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _typed_parts(content: list[Any]) -> list[Any]:
    return [{"type": "text", "text": p} if isinstance(p, str) else p for p in content]


# ---------------------------------------------------------------------------- tool calls


def _openai_calls(message: AIMessage) -> list[Message]:
    calls: list[Message] = [
        {
            "id": call.get("id"),
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call["args"])},
        }
        for call in message.tool_calls
    ]
    calls += [
        {
            "id": bad.get("id"),
            "type": "function",
            "function": {"name": bad.get("name") or "", "arguments": bad.get("args") or ""},
        }
        for bad in message.invalid_tool_calls
    ]
    return calls


def _parse_calls(
    raw: list[Any], invalid: list[Any] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """LangChain's ``tool_calls`` and ``invalid_tool_calls`` for OpenAI ``raw`` calls.

    ``invalid``, kept from an earlier conversion, stands for the last calls
    (where :func:`to_openai` put them).
    """
    kept = list(invalid or [])
    head = raw[: len(raw) - len(kept)] if kept else raw
    valid: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for call in head:
        function = call.get("function") if isinstance(call, Mapping) else None
        function = function if isinstance(function, Mapping) else {}
        call_id = call.get("id") if isinstance(call, Mapping) else None
        name = function.get("name")
        text = function.get("arguments")
        error: str | None
        try:
            args = json.loads(text) if isinstance(text, str) else None
        except ValueError as exc:
            args, error = None, f"arguments are not JSON: {exc}"
        else:
            error = None if isinstance(args, dict) else "arguments are not a JSON object"
        if isinstance(args, dict) and isinstance(name, str):
            valid.append(dict(tool_call(name=name, args=args, id=call_id)))
        else:
            bad.append(
                dict(
                    invalid_tool_call(
                        name=name if isinstance(name, str) else None,
                        args=text if isinstance(text, str) else None,
                        id=call_id,
                        error=error,
                    )
                )
            )
    return valid, bad + kept


# ---------------------------------------------------------------------------- LangChain → OpenAI


def to_openai(message: BaseMessage) -> Message:
    """The OpenAI chat message for a LangChain message (see the module docstring).

    Raises :class:`~contextengine.errors.InvalidMessagesError` for a message
    type with no OpenAI role (``RemoveMessage``).
    """
    kept: dict[str, Any] = {}
    if isinstance(message, ChatMessage):
        role = message.role
        if role in _CLASS_OF_ROLE:
            kept["type"] = "chat"
    else:
        mapped = _ROLE_OF_TYPE.get(message.type)
        if mapped is None:
            raise InvalidMessagesError(
                f"LangChain message of type {message.type!r} has no OpenAI role"
            )
        role = mapped
    extra = dict(message.additional_kwargs)
    from_openai_side = extra.pop(OPENAI_KEY, None)
    openai_side: Mapping[str, Any] = (
        from_openai_side if isinstance(from_openai_side, Mapping) else {}
    )
    if from_openai_side is not None and not isinstance(from_openai_side, Mapping):
        extra[OPENAI_KEY] = from_openai_side  # not ours: kept like any other value
    out: Message = {"role": role}
    content: Any = message.content
    if isinstance(content, list) and any(isinstance(p, str) for p in content):
        kept["content"] = list(content)
        content = _typed_parts(content)
    if content == "" and "content" in openai_side and openai_side["content"] is None:
        content = None
    out["content"] = content
    if message.name is not None:
        out["name"] = message.name
    if message.id is not None:
        out["id"] = message.id
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
    if isinstance(message, AIMessage):
        calls = _openai_calls(message)
        raw = openai_side.get("tool_calls")
        current = (
            [dict(c) for c in message.tool_calls],
            [dict(b) for b in message.invalid_tool_calls],
        )
        if isinstance(raw, list) and _parse_calls(raw, None) == current:
            out["tool_calls"] = raw  # the provider's own spelling of the same calls
        elif calls:
            out["tool_calls"] = calls
        invalid = [dict(b) for b in message.invalid_tool_calls]
        # Kept only when the arguments alone would not give them back (an error
        # text of LangChain's own, arguments that are valid JSON after all).
        if invalid and _parse_calls(out.get("tool_calls") or [], None)[1] != invalid:
            kept["invalid_tool_calls"] = invalid
    collided = {k: v for k, v in extra.items() if k in _RESERVED}
    out.update((k, v) for k, v in extra.items() if k not in _RESERVED)
    if collided:
        kept["additional_kwargs"] = collided
    for name, field in type(message).model_fields.items():
        if name in _HANDLED:
            continue
        value = getattr(message, name)
        default = field.get_default(call_default_factory=True)
        if value != default and _jsonable(value):
            kept[name] = value
    if kept:
        out[LANGCHAIN_KEY] = kept
    return out


# ---------------------------------------------------------------------------- OpenAI → LangChain


def from_openai(message: Mapping[str, Any]) -> BaseMessage:
    """The LangChain message for an OpenAI chat message (see the module docstring).

    Raises :class:`~contextengine.errors.InvalidMessagesError` for a message
    without a role, or a tool result without ``tool_call_id``.
    """
    role = message.get("role")
    if not isinstance(role, str):
        raise InvalidMessagesError("an OpenAI message needs a string 'role'")
    stash = message.get(LANGCHAIN_KEY)
    kept: dict[str, Any] = dict(stash) if isinstance(stash, Mapping) else {}
    openai_side: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    additional: dict[str, Any] = {}
    known = {"role", "content", "name", "id", LANGCHAIN_KEY}
    if role == "assistant":
        known.add("tool_calls")
    if role == "tool":
        known.add("tool_call_id")
    content = message.get("content")
    if content is None:
        if "content" in message:
            openai_side["content"] = None
        content = ""
    elif isinstance(content, list):
        original = kept.pop("content", None)
        if isinstance(original, list) and _typed_parts(original) == content:
            content = original
    kept.pop("content", None)
    fields["content"] = content
    for key in ("name", "id"):
        if key in message:
            if isinstance(message[key], str):
                fields[key] = message[key]
            else:
                openai_side[key] = message[key]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise InvalidMessagesError("a tool message needs a string 'tool_call_id'")
        fields["tool_call_id"] = call_id
    invalid = kept.pop("invalid_tool_calls", None)
    if role == "assistant" and "tool_calls" in message:
        raw = message["tool_calls"]
        if isinstance(raw, list):
            valid, bad = _parse_calls(raw, invalid if isinstance(invalid, list) else None)
            fields["tool_calls"], fields["invalid_tool_calls"] = valid, bad
            rebuilt = _openai_calls(AIMessage(content="", tool_calls=valid, invalid_tool_calls=bad))
            if rebuilt != raw or not raw:  # to_openai leaves out an empty list
                openai_side["tool_calls"] = raw
        else:
            openai_side["tool_calls"] = raw
    for key, value in message.items():
        if key not in known:
            additional[key] = value
    collided = kept.pop("additional_kwargs", None)
    if isinstance(collided, Mapping):
        additional.update(collided)
    if openai_side:
        additional[OPENAI_KEY] = openai_side
    fields["additional_kwargs"] = additional
    kind = kept.pop("type", None)
    cls: type[BaseMessage]
    if kind == "chat" or role not in _CLASS_OF_ROLE:
        cls, fields["role"] = ChatMessage, role
    else:
        cls = _CLASS_OF_ROLE[role]
    if cls is FunctionMessage and "name" not in fields:
        raise InvalidMessagesError("a function message needs a string 'name'")
    fields.update((k, v) for k, v in kept.items() if k in cls.model_fields)
    return cls(**fields)
