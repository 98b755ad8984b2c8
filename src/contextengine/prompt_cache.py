"""Prompt-cache breakpoints: Anthropic-style ``cache_control`` on system prompt and last message.

Anthropic (and OpenAI-compatible gateways that forward to it, such as
OpenRouter) cache the prompt up to each block marked
``"cache_control": {"type": "ephemeral"}``. Marking the system prompt caches
the part that never changes; marking the last message caches the whole
conversation so far for the next request, which only appends.

The host applies this to *copies*: the request list is new, the two marked
messages are shallow copies with a new content list, and every other message
is the caller's own object, untouched. The breakpoints are re-derived for
every request on whatever list was chosen (``select_context`` may pick a
different last message), so a stale marker never lingers in the history.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CACHE_CONTROL", "add_cache_breakpoints"]

Message = dict[str, Any]

#: The marker Anthropic understands.
CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}


def _marked(msg: Message) -> Message:
    """A copy of ``msg`` whose last content block carries ``cache_control``."""
    copy = dict(msg)
    content = msg.get("content")
    if isinstance(content, str) and content:
        copy["content"] = [{"type": "text", "text": content, "cache_control": dict(CACHE_CONTROL)}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        blocks = list(content)
        blocks[-1] = {**blocks[-1], "cache_control": dict(CACHE_CONTROL)}
        copy["content"] = blocks
    else:
        # No text to attach to (an assistant message holding only tool calls):
        # gateways accept the marker on the message itself.
        copy["cache_control"] = dict(CACHE_CONTROL)
    return copy


def add_cache_breakpoints(messages: list[Message]) -> list[Message]:
    """A new list with breakpoints on a leading system message and on the last message.

    The input list and its messages are never mutated. An empty list is
    returned as a new empty list.
    """
    request = list(messages)
    if not request:
        return request
    # Only a leading system prompt is stable enough to be worth a breakpoint.
    if request[0].get("role") == "system":
        request[0] = _marked(request[0])
    request[-1] = _marked(request[-1])
    return request
