"""What leaves the process for the summariser: the region bounded, cleaned and redacted.

Pass 2 of compaction sends the middle region, as it was before pass 1 (real
tool outputs, not descriptors), to a summariser that may be a remote model.
:func:`outbound_region` prepares it in this order, so that the work is
proportional to what is sent and never to the whole history:

1. **Bound.** Each tool output is cut to its head and tail
   (:data:`TOOL_HEAD_CHARS` + :data:`TOOL_TAIL_CHARS`), each other message to
   :data:`TEXT_LIMIT_CHARS`, tool-call arguments to :data:`ARGS_LIMIT_CHARS`.
   The region as a whole gets a character budget, filled newest first; of the
   older messages beyond it only a note (how many, which tools) and the
   user's requests, cut to :data:`OVERFLOW_LIMIT_CHARS`, are sent. The budget
   is what keeps a compaction of a 5,000-message session as cheap as one of
   a 200-message session; it only binds when a huge history is compacted at
   once (an imported or resumed session), because in a running session the
   middle is bounded by the window and earlier turns are already in the
   previous summary.
2. **Drop thinking.** ``reasoning_content`` and similar keys, ``thinking`` /
   ``reasoning`` content parts and ``<think>…</think>`` spans are removed: they
   are the model's private scratch work, often huge, and must not be
   summarised back into the context as if they were facts.
3. **Redact** secrets in every string that is sent — each excerpt with a
   margin of the text around its cut (:func:`contextengine.redact.redact_bounded`,
   ``redact_head``, ``redact_tail``), so a secret the cut goes through is not
   sent in part, and a 400k-character log still costs a few thousand
   characters of regex work.

The engine calls :func:`outbound_region`; the result goes into
``SummaryRequest.messages`` and into the rendered prompt.

Bounding loses the identifiers in the parts not sent (the middle of a long
log, the older messages beyond the budget). :func:`region_anchors` recovers
them without sending the text: it collects the anchors of every message of
the region from the per-message cache of :func:`contextengine.anchors.message_anchors`
(found in redacted text, scanned once per message in its life) into
``SummaryRequest.anchors``.
"""

from __future__ import annotations

import re
from typing import Any

from contextengine.anchors import message_anchors
from contextengine.redact import redact_bounded, redact_head, redact_tail
from contextengine.summary_prompt import content_text

__all__ = [
    "ARGS_LIMIT_CHARS",
    "MAX_REQUEST_ANCHORS",
    "OVERFLOW_FIRST_REQUESTS",
    "OVERFLOW_LAST_REQUESTS",
    "OVERFLOW_LIMIT_CHARS",
    "TEXT_LIMIT_CHARS",
    "TOOL_HEAD_CHARS",
    "TOOL_TAIL_CHARS",
    "outbound_region",
    "region_anchors",
    "strip_thinking",
]

Message = dict[str, Any]

TOOL_HEAD_CHARS = 2_000
TOOL_TAIL_CHARS = 1_000
TEXT_LIMIT_CHARS = 6_000
ARGS_LIMIT_CHARS = 1_000
OVERFLOW_LIMIT_CHARS = 300
OVERFLOW_FIRST_REQUESTS = 5
OVERFLOW_LAST_REQUESTS = 25
#: At most this many anchors go in ``SummaryRequest.anchors``: more than any
#: summary budget can hold (10k tokens is about 1,000 anchor lines).
MAX_REQUEST_ANCHORS = 1_500

_THINKING_KEYS = ("reasoning_content", "reasoning", "thinking", "reasoning_details")
_THINKING_PARTS = ("thinking", "redacted_thinking", "reasoning")
# A closed block anywhere, or an unclosed one at the start (a reply cut off mid-thought).
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE)


def strip_thinking(text: str) -> str:
    """``text`` without ``<think>``/``<thinking>``/``<reasoning>`` blocks."""
    if "<" not in text:
        return text
    return _THINK_BLOCK.sub("", text).strip()


def _text_of(msg: Message) -> str:
    content = msg.get("content")
    if isinstance(content, list):
        content = [
            part
            for part in content
            if not (isinstance(part, dict) and part.get("type") in _THINKING_PARTS)
        ]
    return content_text(content)


def _bound(msg: Message, full: bool) -> str:
    """The message's text as it is sent: without thinking, bounded, redacted."""
    text = strip_thinking(_text_of(msg))
    if not full:
        return redact_bounded(text, OVERFLOW_LIMIT_CHARS)
    if msg.get("role") == "tool" and len(text) > TOOL_HEAD_CHARS + TOOL_TAIL_CHARS:
        omitted = len(text) - TOOL_HEAD_CHARS - TOOL_TAIL_CHARS
        return (
            f"{redact_head(text, TOOL_HEAD_CHARS)}\n[… {omitted} characters omitted …]\n"
            f"{redact_tail(text, TOOL_TAIL_CHARS)}"
        )
    return redact_bounded(text, TEXT_LIMIT_CHARS)


def _clean(msg: Message, full: bool) -> tuple[Message, int]:
    """A new message holding only what is sent, and its size in characters."""
    text = _bound(msg, full)
    out: Message = {"role": msg.get("role", "user"), "content": text}
    size = len(text)
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and calls:
        limit = ARGS_LIMIT_CHARS if full else OVERFLOW_LIMIT_CHARS
        new_calls: list[Any] = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                args = function.get("arguments")
                args_text = args if isinstance(args, str) else ("" if args is None else str(args))
                args_text = redact_bounded(args_text, limit)
                size += len(args_text)
                call = {**call, "function": {**function, "arguments": args_text}}
            new_calls.append(call)
        out["tool_calls"] = new_calls
    for key in ("tool_call_id", "name"):
        if key in msg:
            out[key] = msg[key]
    return out, size


def _overflow(older: list[Message]) -> list[Message]:
    """What is sent of the messages beyond the budget: a note and the user's requests.

    The user's requests are what a summary must never drop, so the first
    :data:`OVERFLOW_FIRST_REQUESTS` and the last :data:`OVERFLOW_LAST_REQUESTS`
    of them are sent, cut to :data:`OVERFLOW_LIMIT_CHARS`; the rest of the
    overflow is only counted.
    """
    requests = [m for m in older if m.get("role") == "user"]
    if len(requests) > OVERFLOW_FIRST_REQUESTS + OVERFLOW_LAST_REQUESTS:
        requests = requests[:OVERFLOW_FIRST_REQUESTS] + requests[-OVERFLOW_LAST_REQUESTS:]
    calls: dict[str, int] = {}
    for msg in older:
        for call in msg.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            name = str(function.get("name") if isinstance(function, dict) else "tool")
            calls[name] = calls.get(name, 0) + 1
    tools = ", ".join(f"{name} ×{n}" for name, n in sorted(calls.items(), key=lambda kv: -kv[1]))
    note = (
        f"[{len(older)} earlier messages are not shown in full; tool calls among them: "
        f"{tools or 'none'}. The user's requests from them follow.]"
    )
    sent: list[Message] = [{"role": "assistant", "content": note}]
    sent += [_clean(msg, full=False)[0] for msg in requests]
    return sent


def outbound_region(region: list[Message], *, budget_chars: int) -> list[Message]:
    """The region as it is sent to a summariser: bounded, without thinking, redacted.

    ``region`` is the middle before pass 1. Messages are taken newest first
    until ``budget_chars`` is spent; what is older goes as one note plus the
    user's requests (see :func:`_overflow`). Reasoning keys are never copied:
    only role, content, tool calls, ``tool_call_id`` and ``name`` are.
    """
    sent: list[Message] = []
    remaining = budget_chars
    cut = 0
    for index in range(len(region) - 1, -1, -1):
        if remaining <= 0:
            cut = index + 1
            break
        msg, size = _clean(region[index], full=True)
        remaining -= size
        sent.append(msg)
    # Never open the excerpt on tool results whose call was left out.
    while sent and sent[-1].get("role") == "tool":
        sent.pop()
        cut += 1
    sent.reverse()
    if cut:
        sent = _overflow(region[:cut]) + sent
    return sent


def region_anchors(region: list[Message], *, limit: int = MAX_REQUEST_ANCHORS) -> tuple[str, ...]:
    """The anchors of every message of ``region`` as ``"kind:value"``, best first.

    Ranked by how many messages mention the anchor, then by how recently; at
    most ``limit``. Values come from redacted text. Cached per message, so the
    cost on a region whose messages arrived through ``on_turn_complete`` is
    one lookup per message.
    """
    found: dict[str, tuple[str, int, int]] = {}
    for position, msg in enumerate(region):
        if not isinstance(msg, dict):
            continue
        for anchor in message_anchors(msg):
            entry = found.get(anchor.value)
            count = entry[1] if entry is not None else 0
            found[anchor.value] = (anchor.kind, count + 1, position)
    ranked = sorted(found.items(), key=lambda item: (item[1][1], item[1][2]), reverse=True)
    return tuple(f"{kind}:{value}" for value, (kind, _, _) in ranked[:limit])
