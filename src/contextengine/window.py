"""The window guarantee: a request never exceeds the context window when it physically can fit.

Engines keep the conversation under their threshold by compacting, but some
requests cannot be helped by compaction: the newest messages alone are larger
than the window (a 10 MB tool output in the fresh tail, a long tool loop at a
4,000-token window). The host passes every request through
:func:`fit_to_window` last, right before it is sent:

1. When the request fits (the common case, decided from counts the host keeps
   incrementally), nothing is done.
2. Otherwise the largest **tool outputs** are cut to a head-and-tail excerpt,
   largest first, until the request fits; each excerpt carries a marker that
   says how much was cut and how to get it back (the engine's
   :meth:`~contextengine.ContextEngine.recovery_hint`: for ``lcm``, the id to
   ``lcm_expand``; otherwise just that it was cut).
3. Then other **older messages** (never the system prompt, never the latest
   user message) are cut the same way, largest first.
4. Then the oldest messages are **left out**, whole tool groups at a time
   (a call is never separated from its results), with a one-line note.
5. Only when the system prompt, the tool schemas and the latest user message
   alone cannot fit does :class:`~contextengine.errors.ContextOverflowError`
   say so, before anything is sent.

Everything is deterministic: the same message is cut the same way on every
request, so the prompt-cache prefix stays stable. Nothing here changes the
history the host keeps; only what is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from contextengine.errors import ContextOverflowError
from contextengine.messages import tool_groups
from contextengine.tokens import REPLY_PRIMING_TOKENS, count_tokens, message_tokens

__all__ = ["MIN_EXCERPT_TOKENS", "Cut", "Fit", "count_schemas", "excerpt", "fit_to_window"]

Message = dict[str, Any]

#: An excerpt keeps at least this many tokens of a message (head and tail together).
MIN_EXCERPT_TOKENS = 64
_CHARS_PER_TOKEN = 3  # conservative for code and logs: excerpts are re-counted exactly


@dataclass(frozen=True, kw_only=True)
class Cut:
    """One message the window guarantee shortened or left out."""

    index: int
    role: str
    #: "excerpt" (shortened in place) or "omitted" (left out with its group).
    action: str
    tokens_before: int
    tokens_after: int
    #: How to get the full text back, when the engine knows ("lcm_expand msg_…").
    hint: str | None = None


@dataclass(frozen=True, kw_only=True)
class Fit:
    """A request made to fit: the messages to send, their tokens, and what was cut."""

    messages: list[Message]
    tokens: int
    cuts: tuple[Cut, ...] = ()


def _text_of(message: Message) -> str | None:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        return "".join(str(p.get("text", "")) for p in content)
    return None


def _cut(text: str, head_chars: int, tail_chars: int, marker: str) -> str:
    """``text``'s first and last characters around ``marker``, on line or word boundaries."""
    head = text[:head_chars]
    cut_at = max(head.rfind("\n"), head.rfind(" "))
    if cut_at > head_chars // 2:
        head = head[:cut_at]
    tail = text[len(text) - tail_chars :] if tail_chars > 0 else ""
    cut_from = max(tail.find("\n"), tail.find(" "))
    if 0 <= cut_from < tail_chars // 2:
        tail = tail[cut_from + 1 :]
    removed = len(text) - len(head) - len(tail)
    note = marker.replace("{cut}", f"{removed:,} characters")
    return f"{head}\n{note}\n{tail}"


def excerpt(text: str, keep_tokens: int, *, marker: str, model: str | None = None) -> str:
    """``text`` cut to its head and tail, at most ``keep_tokens`` of them, around ``marker``.

    ``marker`` may hold ``{cut}``, replaced by what was left out ("123,456
    characters"). Cuts fall on line or word boundaries where one is near. The
    size is exact: the text's own characters-per-token ratio gives a first cut,
    which is then counted and tightened until it fits (the marker's tokens are
    on top of ``keep_tokens``).
    """
    total = count_tokens(text, model)
    if total <= keep_tokens:
        return text
    keep = max(0, keep_tokens)
    ratio = len(text) / max(1, total)
    chars = int(keep * ratio)
    marker_tokens = count_tokens(marker, model) + 8
    result = _cut(text, chars * 2 // 3, chars - chars * 2 // 3, marker)
    for _ in range(6):
        over = count_tokens(result, model) - keep - marker_tokens
        if over <= 0 or chars == 0:
            break
        chars = max(0, chars - int((over + 4) * ratio) - 1)
        result = _cut(text, chars * 2 // 3, chars - chars * 2 // 3, marker)
    return result


def _marker(role: str, hint: str | None) -> str:
    what = "tool output" if role == "tool" else "message"
    back = f" The full {what} is archived: {hint}." if hint else ""
    return f"[… {{cut}} of this {what} were cut to fit the context window.{back}]"


def fit_to_window(
    messages: list[Message],
    *,
    budget: int,
    tokens: int | None = None,
    reserved: int = 0,
    model: str | None = None,
    hint: Callable[[Message], str | None] = lambda _message: None,
    is_own: Callable[[Message], bool] = lambda _message: False,
    _depth: int = 0,
) -> Fit:
    """Make ``messages`` fit ``budget`` tokens (see the module docstring); never mutates them.

    ``tokens`` is their exact count when the caller keeps one (else it is
    counted); ``reserved`` is what else the request holds (tool schemas);
    ``hint`` says how to get a shortened message back, ``is_own`` tells an
    engine's own messages (summaries) from a participant's.
    Raises :class:`ContextOverflowError` when the system prompt, the latest
    user message and ``reserved`` alone exceed ``budget``.
    """
    counts = [message_tokens(m, model) for m in messages] if tokens is None else None
    total = sum(counts) + REPLY_PRIMING_TOKENS if counts is not None else int(tokens or 0)
    if total + reserved <= budget:
        return Fit(messages=messages, tokens=total)
    counts = counts if counts is not None else [message_tokens(m, model) for m in messages]
    system = 0 if messages and messages[0].get("role") in ("system", "developer") else None
    # The latest message a person wrote: an engine's summary or reference block
    # in a user message is not one (``is_own``).
    latest_user = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if messages[i].get("role") == "user" and not is_own(messages[i])
        ),
        None,
    )
    protected = {i for i in (system, latest_user) if i is not None}
    floor = sum(counts[i] for i in protected) + REPLY_PRIMING_TOKENS + reserved
    if floor > budget:
        raise ContextOverflowError(
            f"the system prompt, the tool schemas and the latest user message alone take"
            f" {floor:,} tokens, more than the {budget:,}-token window: nothing can be sent",
            required=floor,
            budget=budget,
        )
    out = list(messages)
    cuts: list[Cut] = []
    over = total + reserved - budget
    # Steps 2 and 3: tool outputs first, then other messages; the largest first.
    for roles in (("tool",), ("user", "assistant", "developer", "system", "function")):
        order = sorted(
            (i for i, m in enumerate(out) if i not in protected and m.get("role") in roles),
            key=lambda i: (-counts[i], i),
        )
        for index in order:
            if over <= 0:
                break
            text = _text_of(out[index])
            if text is None or counts[index] <= MIN_EXCERPT_TOKENS:
                continue
            role = str(out[index].get("role"))
            found = hint(messages[index])
            marker = _marker(role, found)
            # What the message keeps: what it has, less the overage and its marker.
            keep = counts[index] - over - count_tokens(marker, model) - 16
            short = excerpt(text, max(MIN_EXCERPT_TOKENS, keep), marker=marker, model=model)
            if len(short) >= len(text):
                continue
            shortened = {**out[index], "content": short}
            after = message_tokens(shortened, model)
            if after >= counts[index]:
                continue
            cuts.append(
                Cut(
                    index=index,
                    role=role,
                    action="excerpt",
                    tokens_before=counts[index],
                    tokens_after=after,
                    hint=found,
                )
            )
            over -= counts[index] - after
            counts[index] = after
            out[index] = shortened
    if over > 0:
        out, over = _omit_oldest(out, counts, protected, over, cuts, model)
    final = sum(message_tokens(m, model) for m in out) + REPLY_PRIMING_TOKENS
    if final + reserved > budget and _depth < 3 and (cuts and out != messages):
        # Another round on what is left (an excerpt whose marker cost more than
        # estimated); each round only shortens, so this ends.
        again = fit_to_window(
            out,
            budget=budget,
            tokens=final,
            reserved=reserved,
            model=model,
            hint=hint,
            is_own=is_own,
            _depth=_depth + 1,
        )
        return Fit(messages=again.messages, tokens=again.tokens, cuts=(*cuts, *again.cuts))
    return Fit(messages=out, tokens=final, cuts=tuple(cuts))


def _omit_oldest(
    out: list[Message],
    counts: list[int],
    protected: set[int],
    over: int,
    cuts: list[Cut],
    model: str | None,
) -> tuple[list[Message], int]:
    """Step 4: leave out the oldest unprotected groups, whole, until the request fits."""
    dropped: set[int] = set()
    over += 32  # the note that says so (its exact size is added below)
    for start, end in tool_groups(out):
        if over <= 0:
            break
        if any(i in protected for i in range(start, end)):
            continue
        for i in range(start, end):
            dropped.add(i)
            over -= counts[i]
            cuts.append(
                Cut(
                    index=i,
                    role=str(out[i].get("role")),
                    action="omitted",
                    tokens_before=counts[i],
                    tokens_after=0,
                )
            )
    if not dropped:
        return out, over
    note: Message = {
        "role": "user",
        "content": (f"[{len(dropped)} earlier message(s) left out to fit the context window.]"),
    }
    kept: list[Message] = []
    placed = False
    for i, message in enumerate(out):
        if i in dropped:
            if not placed:
                kept.append(note)
                placed = True
            continue
        kept.append(message)
    return kept, over - 32 + message_tokens(note, model)


def count_schemas(schemas: Sequence[Any] | None, model: str | None = None) -> int:
    """Tokens a list of tool schemas takes in a request (their JSON text: a close estimate)."""
    if not schemas:
        return 0
    return count_tokens(json.dumps(list(schemas), ensure_ascii=False), model)
