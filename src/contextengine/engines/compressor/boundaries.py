"""Where a compaction cuts: the protected head, the protected tail, the middle in between.

The compressor keeps the start and the end of a conversation verbatim and
compacts only the middle. :func:`select_regions` finds the two cuts:

Head
    The leading system prompt(s), byte-identical, plus ``protect_first_n``
    non-system messages on the first compaction. Once a summary exists, the
    head is the system prompt alone and the old summary is taken out of the
    conversation (its text becomes ``previous_summary``, so the next summary
    replaces it instead of nesting it).
Tail
    Walking back from the end, whole units (a message with the tool results
    that answer it) are kept until ``tail_token_budget`` is spent, but never
    fewer than ``protect_last_n`` messages unless the conversation is short. A
    unit is never split, so one oversized unit may enter the tail whole.
    The tail always holds the latest ``min_tail_user_messages`` real user
    messages (not tool results, not a summary; 1 by default) and the turns
    after them, as many of them as fit ``turn_cap`` tokens, the oldest
    dropped first; when not even the latest turn fits, its user message is
    *pinned* instead — kept verbatim right after the summary — and the rest
    of the turn is compacted normally, so one endless agent turn cannot make
    compaction impossible.

A manual compaction may choose the tail instead (``keep_last``,
:func:`select_keep_regions`): the head is then the system prompt alone, the
tail the last ``keep_last`` messages (the cut moved back to the tool call
when it falls on a result), nothing is pinned, and everything in between is
compacted, a previous summary included.

Cuts are made only before a message that is not a tool result, so a tool call
and its results always land on the same side. The walk is linear in the
tail, not in the history: this module touches the middle only to copy list
slots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contextengine.compaction_plan import keep_last_cut
from contextengine.engines.compressor.summary import find_summary, split_summary

__all__ = [
    "LazyTokens",
    "Regions",
    "input_index",
    "is_real_user_message",
    "select_keep_regions",
    "select_regions",
]

Message = dict[str, Any]

_SYSTEM_ROLES = ("system", "developer")
# How many messages past the first-compaction head a summary may sit and still
# be found; it is placed right after the head, so a small slack is plenty.
_SUMMARY_SCAN_SLACK = 2


class LazyTokens:
    """Per-message token counts, computed on first access and remembered.

    A compaction needs exact counts for the head and the tail only; counting
    every message of a 5,000-message history (even from the tokens module's
    cache) would cost more than the rest of the compaction.
    """

    def __init__(self, messages: Sequence[Message], count: Callable[[Message], int]) -> None:
        self._messages = messages
        self._count = count
        self._known: list[int | None] = [None] * len(messages)

    def __len__(self) -> int:
        return len(self._known)

    def __getitem__(self, index: int) -> int:
        value = self._known[index]
        if value is None:
            value = self._known[index] = self._count(self._messages[index])
        return value

    def total(self, start: int, end: int) -> int:
        """Tokens of ``messages[start:end]``."""
        return sum(self[i] for i in range(start, min(end, len(self._known))))


@dataclass
class Regions:
    """The cuts of one compaction over :attr:`work`.

    ``work`` is the conversation with any previous summary taken out (a merged
    summary leaves the message it was merged into). ``head = work[:head_end]``,
    ``middle = work[head_end:tail_start]`` minus the pinned message, and
    ``tail = work[tail_start:]``.
    """

    work: list[Message]
    tokens: LazyTokens
    head_end: int
    tail_start: int
    #: Index in ``work`` of a user message kept verbatim after the summary, or None.
    pinned: int | None
    previous_summary: str
    #: Index in the input of the previous summary message, or None.
    summary_at: int | None
    #: True when the previous summary was merged into another message (kept in ``work``).
    summary_merged: bool = False

    @property
    def middle_indices(self) -> range:
        return range(self.head_end, self.tail_start)

    def middle(self) -> list[Message]:
        """The messages to compact, without the pinned one."""
        return [self.work[i] for i in range(self.head_end, self.tail_start) if i != self.pinned]


def is_real_user_message(msg: Message, is_summary: Callable[[Message], bool]) -> bool:
    """A message the user typed: role user, not a summary, not only tool-result parts."""
    if msg.get("role") != "user" or is_summary(msg):
        return False
    content = msg.get("content")
    if isinstance(content, list) and content:
        return not all(
            isinstance(part, dict) and part.get("type") == "tool_result" for part in content
        )
    return True


def _leading_system(messages: Sequence[Message]) -> int:
    index = 0
    while index < len(messages) and messages[index].get("role") in _SYSTEM_ROLES:
        index += 1
    return index


def _skip_results(messages: Sequence[Message], index: int) -> int:
    """The first index at or after ``index`` that is a safe cut (not a tool result)."""
    while index < len(messages) and messages[index].get("role") == "tool":
        index += 1
    return index


def select_regions(
    messages: list[Message],
    *,
    tokens: LazyTokens,
    count: Callable[[Message], int],
    is_summary: Callable[[Message], bool],
    protect_first_n: int,
    protect_last_n: int,
    tail_token_budget: int,
    turn_cap: int,
    min_tail_user_messages: int = 1,
) -> Regions:
    """Find the head, tail, pinned message and previous summary of ``messages``.

    ``tokens`` counts the messages (lazily) with ``count``; only the tail
    and the latest turn are counted here. Called by the engine at the start
    of every ``compress`` and by ``has_content_to_compress`` and
    ``prune_tool_results_only``.
    """
    sys_end = _leading_system(messages)
    first_head_end = _skip_results(messages, sys_end + max(0, protect_first_n))
    summary_at = find_summary(messages, sys_end, first_head_end + _SUMMARY_SCAN_SLACK)
    previous = ""
    work = messages
    if summary_at is not None:
        split = split_summary(messages[summary_at])
        previous = split.text
        kept = [split.remainder] if split.remainder is not None else []
        work = [*messages[:summary_at], *kept, *messages[summary_at + 1 :]]
        tokens = LazyTokens(work, count)
        head_end = sys_end
    else:
        head_end = min(first_head_end, len(messages))

    # Tail: whole units, walking back from the end.
    n = len(work)
    start, used, kept_count = n, 0, 0
    while start > head_end:
        unit = start - 1
        while unit > head_end and work[unit].get("role") == "tool":
            unit -= 1
        if work[unit].get("role") == "tool":
            break  # the unit's call is inside the head: the tail cannot take it apart
        unit_tokens = tokens.total(unit, start)
        if kept_count >= protect_last_n and used + unit_tokens > tail_token_budget:
            break
        used += unit_tokens
        kept_count += start - unit
        start = unit

    # The latest real user messages (min_tail_user_messages of them) and the
    # turns after them: the tail reaches back to the oldest of them that fits
    # turn_cap; when not even the latest does, that one is pinned instead.
    users: list[int] = []
    if min_tail_user_messages > 0:
        for i in range(n - 1, head_end - 1, -1):
            if is_real_user_message(work[i], is_summary):
                users.append(i)
                if len(users) >= min_tail_user_messages:
                    break
    pinned: int | None = None
    for candidate in reversed(users):  # the oldest first: the most turns that fit
        if candidate >= start:
            break
        if used + tokens.total(candidate, start) <= turn_cap:
            start = candidate
            break
    if users and users[0] < start:
        pinned = users[0]
    return Regions(
        work=work,
        tokens=tokens,
        head_end=head_end,
        tail_start=start,
        pinned=pinned,
        previous_summary=previous,
        summary_at=summary_at,
        summary_merged=summary_at is not None and len(work) == len(messages),
    )


def select_keep_regions(
    messages: list[Message],
    *,
    tokens: LazyTokens,
    count: Callable[[Message], int],
    protect_first_n: int,
    keep_last: int,
) -> Regions:
    """The regions of a compaction that keeps exactly the last ``keep_last`` messages.

    The head is the system prompt(s); the tail starts at
    :func:`~contextengine.compaction_plan.keep_last_cut`; a previous summary
    before the cut is taken out (its text becomes ``previous_summary``), one
    at or after the cut is kept like any other message.
    """
    cut = keep_last_cut(messages, keep_last)
    sys_end = cut.system_end
    limit = min(cut.index, sys_end + max(0, protect_first_n) + 1 + _SUMMARY_SCAN_SLACK)
    summary_at = find_summary(messages, sys_end, limit)
    previous = ""
    work = messages
    tail_start = cut.index
    if summary_at is not None:
        split = split_summary(messages[summary_at])
        previous = split.text
        kept = [split.remainder] if split.remainder is not None else []
        work = [*messages[:summary_at], *kept, *messages[summary_at + 1 :]]
        if not kept:
            tail_start -= 1
    return Regions(
        work=work,
        tokens=tokens if work is messages else LazyTokens(work, count),
        head_end=sys_end,
        tail_start=tail_start,
        pinned=None,
        previous_summary=previous,
        summary_at=summary_at,
        summary_merged=summary_at is not None and len(work) == len(messages),
    )


def input_index(regions: Regions, work_index: int) -> int:
    """The index in the input of ``work[work_index]`` (or where it would go)."""
    at = regions.summary_at
    if at is None or regions.summary_merged or work_index < at:
        return work_index
    return work_index + 1
