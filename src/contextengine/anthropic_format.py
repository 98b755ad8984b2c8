"""Conversion between Anthropic Messages and OpenAI chat-completions messages.

The two formats differ in where things live:

* Anthropic keeps the system prompt outside the message list; OpenAI has
  ``system`` messages.
* Anthropic puts tool calls (``tool_use`` blocks) in the assistant content and
  tool results (``tool_result`` blocks) in the next *user* message; OpenAI has
  ``tool_calls`` on the assistant and one ``tool`` message per result.
* Anthropic requires user and assistant turns to alternate, so consecutive
  same-role messages are merged when converting to it.

Thinking blocks have no OpenAI equivalent: they travel as ``reasoning_content``
(their text) and ``thinking_blocks`` (the raw blocks, signatures included) on
the assistant message, so a round trip gives them back unchanged.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["from_anthropic", "to_anthropic"]

Message = dict[str, Any]
Block = dict[str, Any]

# Tool arguments that are not a JSON object cannot be a tool_use ``input``;
# they travel as {"_raw": text} and come back as that text.
_RAW_ARGUMENTS = "_raw"


def _blocks(content: Any) -> list[Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [block for block in content if isinstance(block, dict)]


def _image_part(block: Block) -> Block:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    else:
        url = str(source.get("url", ""))
    return {"type": "image_url", "image_url": {"url": url}}


def _parts_to_content(parts: list[Block]) -> str | list[Block] | None:
    """One text part becomes a plain string (the common case); several stay a list."""
    if not parts:
        return None
    if len(parts) == 1 and parts[0].get("type") == "text":
        return str(parts[0]["text"])
    return parts


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for block in _blocks(content):
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "image":
            texts.append("[image]")  # OpenAI tool messages cannot hold images
    return "\n".join(texts)


def from_anthropic(messages: Sequence[Message], system: Any = None) -> list[Message]:
    """Convert Anthropic Messages API messages (and ``system``) to OpenAI format.

    ``tool_use`` blocks become ``tool_calls``; each ``tool_result`` block
    becomes a ``tool`` message placed before any other content of its user
    message, since results must follow their call directly.
    """
    converted: list[Message] = []
    if system:
        text = (
            system
            if isinstance(system, str)
            else "\n\n".join(
                str(b.get("text", "")) for b in _blocks(system) if b.get("type") == "text"
            )
        )
        converted.append({"role": "system", "content": text})
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            converted.append(_assistant_from_anthropic(message))
        else:
            converted.extend(_user_from_anthropic(message))
    return converted


def _arguments_text(arguments: Any) -> str:
    """The OpenAI ``arguments`` string of a tool_use ``input`` (see :data:`_RAW_ARGUMENTS`)."""
    if (
        isinstance(arguments, dict)
        and len(arguments) == 1
        and isinstance(arguments.get(_RAW_ARGUMENTS), str)
    ):
        return str(arguments[_RAW_ARGUMENTS])
    return json.dumps(arguments)


def _assistant_from_anthropic(message: Message) -> Message:
    parts: list[Block] = []
    calls: list[Block] = []
    thinking: list[Block] = []
    for block in _blocks(message.get("content")):
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": block.get("name", ""),
                        "arguments": _arguments_text(block.get("input", {})),
                    },
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            # Copies, so that editing the result never changes the caller's blocks.
            thinking.append(copy.deepcopy(block))
        elif kind == "image":
            parts.append(_image_part(block))
        else:
            parts.append(copy.deepcopy(block))
    result: Message = {"role": "assistant", "content": _parts_to_content(parts)}
    if calls:
        result["tool_calls"] = calls
    if thinking:
        result["thinking_blocks"] = thinking
        reasoning = "\n".join(str(b.get("thinking", "")) for b in thinking if b.get("thinking"))
        if reasoning:
            result["reasoning_content"] = reasoning
    if result["content"] is None and not calls:
        result["content"] = ""
    return result


def _user_from_anthropic(message: Message) -> list[Message]:
    results: list[Message] = []
    parts: list[Block] = []
    for block in _blocks(message.get("content")):
        kind = block.get("type")
        if kind == "tool_result":
            tool: Message = {
                "role": "tool",
                "tool_call_id": block.get("tool_use_id", ""),
                "content": _tool_result_text(block.get("content")),
            }
            if block.get("is_error"):
                tool["is_error"] = True
            results.append(tool)
        elif kind == "text":
            if block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            parts.append(_image_part(block))
        else:
            parts.append(copy.deepcopy(block))
    content = _parts_to_content(parts)
    if content is not None:
        results.append({"role": "user", "content": content})
    elif not results:
        results.append({"role": "user", "content": ""})
    return results


def _image_block(part: Block) -> Block:
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        header, data = url.split(";base64,", 1)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": header[5:], "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _content_blocks(content: Any) -> list[Block]:
    blocks: list[Block] = []
    if isinstance(content, str):
        if content:
            blocks.append({"type": "text", "text": content})
        return blocks
    for part in content or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            blocks.append(_image_block(part))
        else:
            blocks.append(copy.deepcopy(part))
    return blocks


def _tool_result_content(content: Any) -> str | list[Block]:
    """Text alone stays a string; images (which a tool_result may hold) keep the block list."""
    blocks = _content_blocks(content)
    if all(block.get("type") == "text" for block in blocks):
        return "\n".join(str(block.get("text", "")) for block in blocks)
    return blocks


def _tool_use(call: Block) -> Block:
    function = call.get("function") or {}
    raw = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw)
    except (TypeError, ValueError):
        arguments = {_RAW_ARGUMENTS: raw}
    if not isinstance(arguments, dict):
        arguments = {_RAW_ARGUMENTS: raw}
    return {
        "type": "tool_use",
        "id": call.get("id", ""),
        "name": function.get("name", ""),
        "input": arguments,
    }


def to_anthropic(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """Convert OpenAI-format messages to ``(system, messages)`` for the Anthropic API.

    System and developer messages are joined into ``system`` (None when there
    are none). Tool messages become ``tool_result`` blocks of a user turn, and
    consecutive same-role turns are merged so that roles alternate.
    """
    system_texts: list[str] = []
    converted: list[Message] = []

    def add(role: str, blocks: list[Block]) -> None:
        if not blocks:
            return
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"].extend(blocks)
        else:
            converted.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = "\n".join(
                b["text"] for b in _content_blocks(message.get("content")) if "text" in b
            )
            if text:
                system_texts.append(text)
        elif role == "assistant":
            blocks = copy.deepcopy(list(message.get("thinking_blocks") or []))
            blocks += _content_blocks(message.get("content"))
            blocks += [_tool_use(call) for call in message.get("tool_calls") or []]
            add("assistant", blocks)
        elif role == "tool":
            result: Block = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": _tool_result_content(message.get("content")),
            }
            if message.get("is_error"):
                result["is_error"] = True
            add("user", [result])
        else:
            add("user", _content_blocks(message.get("content")))
    return ("\n\n".join(system_texts) or None), converted
