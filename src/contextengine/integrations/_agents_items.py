"""The OpenAI Agents SDK's input items ⇄ OpenAI chat messages.

Used by :class:`~contextengine.integrations.openai_agents.ContextFilter` on
every model call: the SDK hands the model input as Responses-style items
(``{"role": "user", ...}``, ``function_call``, ``function_call_output``,
``reasoning``...); the engine works on chat messages. The rules:

* A message item becomes a message of its role; ``input_text`` and
  ``output_text`` parts become ``text`` parts, an ``input_image`` with a URL an
  ``image_url`` part; other parts pass through.
* ``function_call`` items become the ``tool_calls`` of one assistant message
  (consecutive calls, and the assistant text just before them, share it, as
  a chat model sends them); ``function_call_output`` becomes a ``tool``
  message.
* Items with no chat equivalent (``reasoning``, hosted tool calls) ride with
  the next assistant message, or an empty assistant message of their own.
* Every message keeps the items it was made from under
  :data:`ITEMS_KEY` (engines keep unknown keys, token counts ignore them).
  Converting back gives those items verbatim while the message is unchanged,
  so ``messages_to_items(items_to_messages(items)) == items`` exactly; a
  message the engine wrote or cut (a summary, an excerpt) is converted anew.
* ``items_to_messages(messages_to_items(messages))`` gives the messages back
  (without :data:`ITEMS_KEY`) for every message an item can express: roles
  system, developer, user, assistant (text and tool calls) and tool, string
  or part-list content. Keys beyond those are not sent to the SDK, and an
  assistant text followed by a separate assistant message with tool calls
  comes back as one message, as a model sends them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contextengine.errors import InvalidMessagesError

__all__ = ["ITEMS_KEY", "items_to_messages", "messages_to_items", "strip_items"]

Message = dict[str, Any]
Item = dict[str, Any]

#: Key of a chat message holding the SDK items it was made from.
ITEMS_KEY = "openai_agents_items"
_MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant"})


def _chat_part(part: Any) -> Any:
    if not isinstance(part, Mapping):
        return part
    kind = part.get("type")
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        image: dict[str, Any] = {"url": part["image_url"]}
        if "detail" in part:
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    return dict(part)


def _item_part(part: Any) -> Any:
    if not isinstance(part, Mapping):
        return part
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": "input_text", "text": part["text"]}
    image = part.get("image_url")
    if kind == "image_url" and isinstance(image, Mapping) and isinstance(image.get("url"), str):
        out: dict[str, Any] = {"type": "input_image", "image_url": image["url"]}
        if "detail" in image:
            out["detail"] = image["detail"]
        return out
    return dict(part)


def _chat_content(content: Any) -> Any:
    if isinstance(content, list):
        return [_chat_part(p) for p in content]
    return content


def _item_content(content: Any) -> Any:
    if isinstance(content, list):
        return [_item_part(p) for p in content]
    return content


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p
        )
    return ""


# ---------------------------------------------------------------------------- items → messages


def items_to_messages(items: Sequence[Any]) -> list[Message]:
    """Chat messages for the SDK's input items (see the module docstring).

    Raises :class:`~contextengine.errors.InvalidMessagesError` naming the
    index of an item that is not a JSON object.
    """
    out: list[Message] = []
    waiting: list[Item] = []  # items with no chat form, for the next assistant message
    open_call: Message | None = None  # the assistant message function_calls join

    def emit(message: Message, sources: list[Item]) -> Message:
        message[ITEMS_KEY] = [*waiting, *sources]
        waiting.clear()
        out.append(message)
        return message

    def flush_waiting() -> None:
        if waiting:
            emit({"role": "assistant", "content": ""}, [])

    for index, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            raise InvalidMessagesError(
                f"an Agents SDK input item must be an object, got {type(raw).__name__}",
                index=index,
            )
        item = dict(raw)
        kind = item.get("type")
        role = item.get("role")
        if kind in (None, "message") and role in _MESSAGE_ROLES:
            if role == "assistant":
                message = {"role": "assistant", "content": _chat_content(item.get("content"))}
                open_call = emit(message, [item])
            else:
                flush_waiting()
                open_call = None
                emit({"role": role, "content": _chat_content(item.get("content"))}, [item])
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            if open_call is None or waiting:
                open_call = emit({"role": "assistant", "content": None}, [])
            open_call.setdefault("tool_calls", []).append(call)
            open_call[ITEMS_KEY].append(item)
        elif kind == "function_call_output":
            flush_waiting()
            open_call = None
            output = item.get("output")
            emit(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _chat_content(output),
                },
                [item],
            )
        else:
            open_call = None
            waiting.append(item)
    flush_waiting()
    return out


def strip_items(message: Mapping[str, Any]) -> Message:
    """``message`` without the items it was made from."""
    return {k: v for k, v in message.items() if k != ITEMS_KEY}


# ---------------------------------------------------------------------------- messages → items


def _fresh_items(message: Mapping[str, Any]) -> list[Item]:
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        output = _item_content(content) if isinstance(content, list) else (content or "")
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": output,
            }
        ]
    if role == "assistant":
        items: list[Item] = []
        calls = message.get("tool_calls") or []
        if content is not None and (content != "" or not calls):
            items.append({"role": "assistant", "content": _item_content(content)})
        for call in calls:
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        return items
    if role in _MESSAGE_ROLES:
        return [{"role": role, "content": _item_content(content)}]
    # A role items cannot carry (legacy "function"): its text as a user message.
    return [{"role": "user", "content": _text_of(content)}]


def messages_to_items(messages: Sequence[Mapping[str, Any]]) -> list[Item]:
    """The SDK's input items for chat messages: a message's own items while it is unchanged."""
    out: list[Item] = []
    for message in messages:
        sources = message.get(ITEMS_KEY)
        if isinstance(sources, list) and sources:
            try:
                rebuilt = items_to_messages(sources)
            except InvalidMessagesError:
                rebuilt = []
            if rebuilt == [dict(message)]:
                out.extend(dict(item) for item in sources)
                continue
        out.extend(_fresh_items(message))
    return out
