"""Manual compaction with a chosen tail: where the cut goes, and the plan a preview shows.

A person (``/compress here N``) or a library user (``host.compress_now(...,
keep_last=N)``) can ask for *the last N messages kept verbatim and everything
before them compacted*. :func:`keep_last_cut` says where that cut goes in an
OpenAI-format history, the same way for every engine:

* the leading system prompt(s) are never counted and never compacted;
* the cut is made before the N-th message from the end, unless that message
  is a tool result: then it moves back to the assistant message that made the
  call, so a call and its results always land on the same side. The cut only
  ever moves back (more is kept, never less), and :class:`KeepCut` says by how
  much so the host can tell the user.

:class:`CompressionPlan` is what ``ContextEngine.plan_compression`` returns and
``host.plan_compression(...)`` hands on: which messages a compaction would
summarise, their tokens and the estimated size after, computed without a
summariser call and without changing anything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CompressionPlan", "KeepCut", "accepts_keyword", "keep_last_cut"]

Message = dict[str, Any]

_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, kw_only=True)
class KeepCut:
    """Where a ``keep_last`` compaction cuts a history.

    ``index`` is the first message kept verbatim (``len(messages)`` when none
    is); ``kept`` how many messages that keeps, system prompts excepted;
    ``requested`` the ``keep_last`` asked for. ``kept`` exceeds ``requested``
    exactly when the cut moved back to keep a tool call with its results.
    """

    index: int
    kept: int
    requested: int
    #: The leading system prompts: messages[:system_end] are never compacted.
    system_end: int

    @property
    def moved(self) -> bool:
        """True when the cut moved back to a safe boundary (more was kept than asked)."""
        return self.kept > self.requested

    def describe(self) -> str:
        """One sentence for the user: what is kept, and why more than asked when it is."""
        noun = "message" if self.kept == 1 else "messages"
        if self.moved:
            return (
                f"kept the last {self.kept} {noun} verbatim ({self.requested} asked; the cut "
                "moved back so a tool call stays with its results)"
            )
        return f"kept the last {self.kept} {noun} verbatim"


def keep_last_cut(messages: Sequence[Message], keep_last: int) -> KeepCut:
    """The cut that keeps the last ``keep_last`` messages, moved back to a safe boundary.

    Raises ``ValueError`` for a negative ``keep_last``. A history with fewer
    messages than asked keeps them all (nothing before the cut).
    """
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
        raise ValueError(f"keep_last must be a whole number >= 0, got {keep_last!r}")
    system_end = 0
    while system_end < len(messages) and messages[system_end].get("role") in _SYSTEM_ROLES:
        system_end += 1
    total = len(messages)
    cut = max(system_end, total - keep_last)
    # Back over tool results to the call that produced them: keeping a result
    # without its call (or the reverse) would be an invalid conversation.
    while system_end < cut < total and messages[cut].get("role") == "tool":
        cut -= 1
    return KeepCut(
        index=cut,
        kept=total - cut,
        requested=min(keep_last, total - system_end),
        system_end=system_end,
    )


def accepts_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` names ``name`` among its parameters (a bare ``**kwargs`` does not count).

    The host passes ``keep_last`` only to engines that declare it: an engine
    that swallowed it in ``**kwargs`` and ignored it would compact something
    other than what the user asked for, and say it had succeeded.
    """
    from contextengine.engine import _accepted_keywords

    accepted = _accepted_keywords(fn)
    return accepted is not None and name in accepted[1]


@dataclass(frozen=True, kw_only=True)
class CompressionPlan:
    """What a manual compaction would do, worked out without doing it.

    Returned by :meth:`ContextEngine.plan_compression` (and the hosts'
    ``plan_compression``): no summariser is called and the conversation is
    not changed. Token figures are the engine's own counts; the size after is
    an estimate (the engine's docstring says how it guesses the summaries'
    size), good to tell a big saving from a small one, not to the token.
    """

    #: The engine that made the plan.
    engine: str
    #: The messages that would be summarised, oldest first (as the engine holds them).
    messages: tuple[Message, ...]
    #: Their tokens.
    tokens_to_summarize: int
    #: Messages after the cut kept verbatim, system prompts excepted.
    kept_messages: int
    #: The ``keep_last`` asked for, or None for the engine's own tail.
    keep_last: int | None
    #: The conversation's tokens now, as the engine counts what it sends.
    tokens_before: int
    #: The estimated tokens after the compaction.
    estimated_tokens_after: int
    #: Earlier summaries that the new summary would take in (or condense).
    previous_summaries: int = 0
    #: The focus topic the summary would prioritise.
    focus_topic: str | None = None
    #: Engine-specific detail, one sentence ("" when there is none).
    note: str = ""

    @property
    def estimated_saving(self) -> int:
        """``tokens_before - estimated_tokens_after`` (never negative)."""
        return max(0, self.tokens_before - self.estimated_tokens_after)

    @property
    def moved(self) -> bool:
        """True when the cut moved back to keep a tool call with its results."""
        return self.keep_last is not None and self.kept_messages > self.keep_last
