"""What a summariser is given and what it must do: ``SummaryRequest`` and ``Summarizer``.

The bottom of the summariser modules: it imports nothing of them, so that
:mod:`contextengine.summarizers` (the shipped implementations) and
:mod:`contextengine.openai_summarizer` both depend on it and never on each
other in a circle. Both names are re-exported by :mod:`contextengine` and
:mod:`contextengine.summarizers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Message", "Summarizer", "SummaryRequest"]

Message = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class SummaryRequest:
    """Everything a summariser needs to summarise one region of a conversation.

    Built by engines, consumed by :class:`Summarizer` implementations. New
    fields are added with defaults, so summarisers written today keep working.
    """

    #: The region to summarise, already bounded, redacted and stripped of thinking blocks.
    messages: list[Message]
    #: The summary this one replaces (its content is merged, never nested), or "".
    previous_summary: str = ""
    #: What a manual compress asked to prioritise, or None.
    focus_topic: str | None = None
    #: Text from a memory provider, after ``sanitize_memory_context``.
    memory_context: str = ""
    #: The summary must fit in about this many tokens.
    token_budget: int = 2_000
    #: The rendered prompt, for summarisers backed by a language model.
    prompt: str = ""
    #: Free-form extras for custom summarisers (engine name, depth, ...).
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Exact identifiers found anywhere in the region, including the parts of it
    #: not sent in full in ``messages``; already redacted. Each is ``"kind:value"``
    #: with a kind of :data:`contextengine.anchors.ANCHOR_KINDS` (``"files:src/app.py"``),
    #: most mentioned and most recent first. Empty when the engine did not collect them.
    anchors: tuple[str, ...] = ()
    #: ``time.monotonic()`` by which the summary must be back, or None for no limit:
    #: the engine's wait cap (:mod:`contextengine.failure_policy`). A summariser
    #: that cannot finish by then (a ``Retry-After`` beyond it) fails at once.
    deadline: float | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Anything with ``summarize(request) -> str``.

    Raise :class:`~contextengine.SummarizerAuthError` when the summariser can
    never succeed without the user's help (bad key, no quota), and
    :class:`~contextengine.SummarizerTransientError` for everything that may
    pass (timeouts, 429, 5xx, malformed answers).
    """

    def summarize(self, request: SummaryRequest) -> str: ...
