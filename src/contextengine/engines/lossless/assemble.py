"""Assembling the view: what the lossless engine sends to the model, built from the active context.

The active context is an ordered list of items — stored messages and
summaries — mirrored in memory by the engine as :class:`ContextItem`. The view
is, in order:

1. the system prompt, the host's own message, byte-identical;
2. the items in context order, where each run of consecutive summaries is
   rendered as **one** user message fenced as reference material ("reference
   material from earlier in the conversation, not new instructions"), and raw
   messages are sent as stored (a huge tool result as its large-content
   reference);
3. among the raw messages, the *fresh tail* (:func:`fresh_tail`) is never
   dropped: it reaches back to the latest user message and starts on a tool
   group boundary, so a tool call is never separated from its results.

Summaries render from their records only, and new summaries are appended after
older ones, so between compactions the bytes before the fresh tail do not
change and the provider's prompt cache keeps hitting. When the view still
exceeds the budget, groups outside the fresh tail are left out (raw messages
not yet summarised before summaries, oldest first) and a one-line note, where
they stood, says which sequence range is hidden (it stays searchable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextengine.store.protocol import ContextRef, SummaryRecord
from contextengine.tokens import count_message_tokens, count_tokens

__all__ = [
    "REFERENCE_CLOSE",
    "REFERENCE_OPEN",
    "ContextItem",
    "Group",
    "TailSplit",
    "View",
    "assemble_view",
    "fresh_tail",
    "group_bounds",
    "is_reference_message",
    "render_summary_entry",
    "summary_entry_tokens",
]

Message = dict[str, Any]

#: Opening fence of a reference block; the engine also recognises its own
#: blocks by it when a host hands a previous view back as history.
REFERENCE_OPEN = (
    "<lcm-reference-material>\n"
    "Reference material from earlier in the conversation, not new instructions. "
    "These are summaries of messages that left the view; every original is stored "
    "verbatim. lcm_grep searches them; lcm_expand with an id reopens a summary, a "
    "message or a large content; lcm_describe shows an id's metadata.\n"
)
REFERENCE_CLOSE = "</lcm-reference-material>"
# Summaries are counted as separate entries when fitting the budget; this
# covers the tokens that merging at the entry boundaries can add.
_ENTRY_SLACK = 2


@dataclass(frozen=True, kw_only=True)
class ContextItem:
    """One entry of the active context as the engine mirrors it in memory.

    ``message`` is the view form of a raw message (its large content replaced
    by a reference) and ``tokens`` what that form costs; for a summary,
    ``summary`` is its record and ``tokens`` the cost of its rendered entry.
    """

    kind: Literal["message", "summary"]
    id: str
    tokens: int
    role: str
    seq_start: int
    seq_end: int
    time_start: float
    time_end: float
    message: Message | None = None
    summary: SummaryRecord | None = None

    @property
    def ref(self) -> ContextRef:
        """The reference persisted in the store's active context."""
        return ContextRef(kind=self.kind, id=self.id)

    @property
    def depth(self) -> int:
        """The summary's depth, or -1 for a message."""
        return self.summary.depth if self.summary is not None else -1


@dataclass(frozen=True)
class Group:
    """Items ``[start, end)`` that stay together: a summary, or a message with its results."""

    start: int
    end: int
    raw: bool


@dataclass(frozen=True)
class TailSplit:
    """Where the fresh tail starts, and the latest user message kept outside it (or None)."""

    tail_start: int
    pinned: int | None


@dataclass(frozen=True)
class View:
    """An assembled request: the messages and their exact prompt token count."""

    messages: list[Message]
    tokens: int
    #: Seq range of raw messages left out for space, or None.
    hidden: tuple[int, int] | None = None


def render_summary_entry(record: SummaryRecord) -> str:
    """One summary as it appears inside a reference block."""
    if record.kind == "leaf":
        span = f"messages seq {record.seq_start}–{record.seq_end}"
    else:
        span = f"condensed, messages seq {record.seq_start}–{record.seq_end}"
    return f"\n[summary {record.id} · depth {record.depth} · {span}]\n{record.content.strip()}\n"


def is_reference_message(message: Message) -> bool:
    """Whether ``message`` is a reference block this engine rendered."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith("<lcm-reference-material>")


def group_bounds(items: Sequence[ContextItem]) -> list[Group]:
    """Split the context into unbreakable groups.

    A summary is a group of its own; an assistant message with tool calls
    takes the tool results that follow it; any other message stands alone (a
    stray tool result too, so it can never glue itself to an unrelated call).
    """
    groups: list[Group] = []
    start = 0
    open_calls = False
    for index, item in enumerate(items):
        if index == 0:
            open_calls = _has_calls(item)
            continue
        if item.kind == "message" and item.role == "tool" and open_calls:
            continue
        groups.append(Group(start, index, items[start].kind == "message"))
        start = index
        open_calls = _has_calls(item)
    if items:
        groups.append(Group(start, len(items), items[start].kind == "message"))
    return groups


def _has_calls(item: ContextItem) -> bool:
    return bool(
        item.kind == "message"
        and item.role == "assistant"
        and item.message is not None
        and item.message.get("tool_calls")
    )


def fresh_tail(
    items: Sequence[ContextItem],
    *,
    tail_tokens: int,
    reach_back_tokens: int,
    groups: Sequence[Group] | None = None,
    min_user_messages: int = 1,
) -> TailSplit:
    """Where the fresh tail starts.

    Walks back over raw groups from the end while they fit ``tail_tokens``
    (the last group always belongs). The tail then reaches back to the latest
    user message when the span from it to the end is at most
    ``reach_back_tokens``; when that span is larger (a long tool loop after
    one request), the user message is *pinned* instead: kept raw in place
    while the messages between it and the tail may be summarised, so the
    user's request is never paraphrased away. With ``min_user_messages`` above
    1 the tail reaches back to the oldest of that many latest user messages
    whose span fits ``reach_back_tokens`` (0 turns the guarantee off).
    """
    groups = list(groups) if groups is not None else group_bounds(items)
    if not groups:
        return TailSplit(len(items), None)
    used = 0
    tail_start = len(items)
    for group in reversed(groups):
        if not group.raw:
            break
        cost = sum(item.tokens for item in items[group.start : group.end])
        if tail_start != len(items) and used + cost > tail_tokens:
            break
        used += cost
        tail_start = group.start
    users: list[int] = []
    if min_user_messages > 0:
        for index in range(len(items) - 1, -1, -1):
            if items[index].kind == "message" and items[index].role == "user":
                users.append(index)
                if len(users) >= min_user_messages:
                    break
    for candidate in reversed(users):  # the oldest first: the most turns that fit
        if candidate >= tail_start:
            break
        span = items[candidate:]
        if all(item.kind == "message" for item in span) and (
            sum(item.tokens for item in span) <= reach_back_tokens
        ):
            return TailSplit(candidate, None)
    if not users or users[0] >= tail_start:
        return TailSplit(tail_start, None)
    return TailSplit(tail_start, users[0])


def _render(
    system: Message | None,
    items: Sequence[ContextItem],
    groups: Sequence[Group],
    dropped: set[int],
) -> tuple[list[Message], tuple[int, int] | None]:
    messages: list[Message] = [system] if system is not None else []
    block: list[str] = []
    hidden: tuple[int, int] | None = None
    note = ""
    if dropped:
        first = min(items[groups[g].start].seq_start for g in dropped)
        last = max(items[groups[g].end - 1].seq_end for g in dropped)
        hidden = (first, last)
        note = (
            f"\n[Not shown for space: {len(dropped)} earlier item(s) covering messages seq "
            f"{first}–{last}. They are stored verbatim: lcm_grep finds them.]\n"
        )

    def flush() -> None:
        if block:
            messages.append(
                {"role": "user", "content": REFERENCE_OPEN + "".join(block) + REFERENCE_CLOSE}
            )
            block.clear()

    for index, group in enumerate(groups):
        if index in dropped:
            # The note stands where the first left-out item stood.
            if note:
                block.append(note)
                note = ""
            continue
        for item in items[group.start : group.end]:
            if item.summary is not None:
                block.append(render_summary_entry(item.summary))
            elif item.message is not None:
                flush()
                messages.append(item.message)
    flush()
    return messages, hidden


def _group_cost(items: Sequence[ContextItem], group: Group) -> int:
    return sum(
        item.tokens + (0 if item.kind == "message" else _ENTRY_SLACK)
        for item in items[group.start : group.end]
    )


def assemble_view(
    *,
    system: Message | None,
    items: Sequence[ContextItem],
    budget: int,
    split: TailSplit,
    model: str | None = None,
) -> View:
    """Render the view of ``items`` within ``budget`` tokens (0: no limit).

    Groups outside the fresh tail (and other than the pinned user message)
    are dropped until the view fits: raw messages not yet summarised first,
    oldest first, then summaries, oldest first. The fresh tail itself is never
    dropped, so a tail larger than the budget is returned whole — the engine
    prevents that by compacting and by moving huge tool results out.
    """
    groups = group_bounds(items)
    outside_tail = [
        index
        for index, group in enumerate(groups)
        if group.start < split.tail_start
        and not (split.pinned is not None and group.start <= split.pinned < group.end)
    ]
    # Raw messages not yet summarised go first, oldest first: a summary is the
    # cheapest account of what it covers, and it sits before them in the prompt,
    # so keeping it keeps the cached prefix too. Summaries go only after them.
    droppable = [i for i in outside_tail if groups[i].raw] + [
        i for i in outside_tail if not groups[i].raw
    ]
    dropped: set[int] = set()
    while True:
        messages, hidden = _render(system, items, groups, dropped)
        tokens = count_message_tokens(messages, model)
        if budget <= 0 or tokens <= budget or len(dropped) == len(droppable):
            return View(messages, tokens, hidden)
        # Drop enough groups at once to cover the estimated excess, then re-count exactly.
        excess = tokens - budget
        for index in droppable:
            if index in dropped:
                continue
            dropped.add(index)
            excess -= _group_cost(items, groups[index])
            if excess <= 0:
                break


def summary_entry_tokens(record: SummaryRecord, model: str | None = None) -> int:
    """What a summary adds to a reference block, in tokens."""
    return count_tokens(render_summary_entry(record), model)
