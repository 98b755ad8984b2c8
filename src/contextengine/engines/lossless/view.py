"""The lossless engine's per-request state: the active context with running totals, and the view.

A long session must not cost more per request than a short one. Between two
requests the active context normally only *grows at the end* (the messages of
the new turn), so everything derived from it is kept and extended rather than
recomputed:

* :class:`ActiveContext` mirrors the stored active context in memory and keeps
  the totals the engine's decisions need (tokens, summary runs, counts, ids)
  up to date as items are appended, so ``should_compress`` and ``get_status``
  cost the same at 50,000 messages as at 100.
* :class:`IncrementalView` keeps the last assembled view (messages and exact
  token count) and extends it with the appended messages only. It assembles
  from scratch, through :func:`~.assemble.assemble_view`, whenever the
  context changed other than by an append (a compaction, a reload), the
  system prompt or model changed, or the grown view would no longer fit the
  budget (then older groups have to be left out, which only the full assembly
  decides). Extending is exact: rendering is a concatenation once the last
  reference block is closed, and a prompt's token count is the sum of its
  messages' counts, so the extended view is byte-identical to a fresh
  assembly (``tests/test_lossless_view.py`` checks this on random sessions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from contextengine.engines.lossless.assemble import (
    REFERENCE_CLOSE,
    REFERENCE_OPEN,
    ContextItem,
    TailSplit,
    View,
    assemble_view,
)
from contextengine.tokens import REPLY_PRIMING_TOKENS, message_tokens

__all__ = ["ActiveContext", "IncrementalView"]

Message = dict[str, Any]


class ActiveContext:
    """The engine's mirror of the stored active context, with totals kept as it changes.

    ``version`` changes on every change that is not an append at the end, so a
    cache built from the context can tell an append (extend it) from anything
    else (rebuild it).
    """

    __slots__ = (
        "_ids",
        "_items",
        "_objects",
        "_summaries",
        "_summary_runs",
        "_tokens",
        "version",
    )

    def __init__(self, items: Iterable[ContextItem] = ()) -> None:
        self.version = 0
        self._items: list[ContextItem] = []
        self._ids: set[str] = set()
        self._objects: dict[int, str] = {}
        self._tokens = 0
        self._summaries = 0
        self._summary_runs = 0
        self.reset(items)

    @property
    def items(self) -> list[ContextItem]:
        """The items in context order. Read only: change them through the methods."""
        return self._items

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._ids

    def id_of(self, message: Message) -> str | None:
        """The id of the item whose view form is this very message object, if any."""
        return self._objects.get(id(message))

    @property
    def tokens(self) -> int:
        """The sum of the items' own token costs (their view form; summaries as entries)."""
        return self._tokens

    @property
    def summary_count(self) -> int:
        return self._summaries

    @property
    def message_count(self) -> int:
        return len(self._items) - self._summaries

    @property
    def summary_runs(self) -> int:
        """How many runs of adjacent summaries there are: each renders as one reference block."""
        return self._summary_runs

    def reset(self, items: Iterable[ContextItem]) -> None:
        """Replace every item (a compaction's result, a reload); recomputes the totals once."""
        self._items = list(items)
        self._ids = {item.id for item in self._items}
        self._objects = {
            id(item.message): item.id for item in self._items if item.message is not None
        }
        self._tokens = sum(item.tokens for item in self._items)
        self._summaries = sum(1 for item in self._items if item.kind == "summary")
        self._summary_runs = sum(
            1
            for index, item in enumerate(self._items)
            if item.kind == "summary" and (index == 0 or self._items[index - 1].kind != "summary")
        )
        self.version += 1

    def extend(self, items: Sequence[ContextItem]) -> None:
        """Append items at the end (ingest); the totals grow by what was appended."""
        for item in items:
            if item.kind == "summary":
                self._summaries += 1
                if not self._items or self._items[-1].kind != "summary":
                    self._summary_runs += 1
            self._items.append(item)
            self._ids.add(item.id)
            if item.message is not None:
                self._objects[id(item.message)] = item.id
            self._tokens += item.tokens

    def estimate_tokens(self, system_tokens: int, model: str | None) -> int:
        """The view's size without rendering it: items, reference fences, system, priming."""
        fence = _fence_tokens(model)
        return system_tokens + self._tokens + self._summary_runs * fence + REPLY_PRIMING_TOKENS


_FENCE_TOKENS: dict[str | None, int] = {}


def _fence_tokens(model: str | None) -> int:
    """What one reference block's fences and framing cost, beyond its entries."""
    cost = _FENCE_TOKENS.get(model)
    if cost is None:
        cost = _FENCE_TOKENS[model] = message_tokens(
            {"role": "user", "content": REFERENCE_OPEN + REFERENCE_CLOSE}, model
        )
    return cost


class IncrementalView:
    """The last assembled view, extended by appends and rebuilt only when it must be.

    Owned by one engine; :meth:`view` is called on every request.
    """

    __slots__ = (
        "_count",
        "_messages",
        "_model",
        "_system",
        "_tokens",
        "_version",
        "rebuilds",
        "reused",
    )

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._tokens = 0
        self._count = -1  # items rendered; -1: nothing cached
        self._version = -1
        self._system: Message | None = None
        self._model: str | None = None
        #: How many times the view was assembled from scratch (for tests and status).
        self.rebuilds = 0
        #: Leading messages of the last view that are the previous view's, unchanged.
        self.reused = 0

    def invalidate(self) -> None:
        """Forget the cached view: the next request assembles from scratch."""
        self._count = -1

    def view(
        self,
        *,
        system: Message | None,
        context: ActiveContext,
        budget: int,
        split_of: Callable[[list[ContextItem]], TailSplit],
        model: str | None,
    ) -> View:
        """The view of ``context`` within ``budget`` tokens (0: no limit), as a new list.

        Equal to ``assemble_view(system=..., items=context.items, budget=budget,
        split=split_of(context.items), model=model)``; costs what was appended
        since the last call when the cached view can be extended.
        """
        items = context.items
        if (
            self._count >= 0
            and self._version == context.version
            and self._model == model
            and len(items) >= self._count
            and (system is self._system or system == self._system)
        ):
            added = items[self._count :]
            tokens = self._tokens
            for item in added:
                # Appends are raw messages (ingest never appends a summary).
                assert item.message is not None
                tokens += message_tokens(item.message, model)
            if budget <= 0 or tokens <= budget:
                self.reused = len(self._messages)
                self._messages.extend(item.message for item in added if item.message)
                self._tokens = tokens
                self._count = len(items)
                self._system = system
                return View(list(self._messages), tokens, None)
        fresh = assemble_view(
            system=system, items=items, budget=budget, split=split_of(items), model=model
        )
        self.rebuilds += 1
        self.reused = 0
        # Only a view that left nothing out can be extended: what a grown view
        # must leave out is for the full assembly to decide.
        if fresh.hidden is None:
            self._messages = list(fresh.messages)
            self._tokens = fresh.tokens
            self._count = len(items)
            self._version = context.version
            self._system = system
            self._model = model
        else:
            self._count = -1
        return fresh
