"""Identifier survival: what a summary of a recorded compaction keeps, next to the recorded one.

For a Claude Code session that recorded its own compaction
(``metadata["compactions"]`` of the ``claude-code`` importer), the region is
every message before the boundary, and the budget is the size of Claude
Code's own summary, counted with our tokenizer. :func:`identifier_survival`
compares, over the region's identifiers (:func:`contextengine.identifiers.is_identifier`:
paths, URLs, ids, error names, found in redacted text):

* **ours**: kept by the summary the compressor's offline path writes for that
  region at that budget (the region bounded and redacted by
  :func:`~contextengine.engines.compressor.request.outbound_region`, its
  anchors by :func:`~contextengine.engines.compressor.request.region_anchors`,
  then :class:`~contextengine.DeterministicSummarizer`); kept means in the
  summary verbatim or listed in a folder group
  (:func:`~contextengine.identifiers.listed_identifiers`);
* **recorded**: kept, by the same rule, by Claude Code's summary;
* **search** (optional): found by one ``lcm_grep`` for the identifier itself
  (top ``k``) in an lcm archive of the region: a hit from a message that
  holds it, or a snippet that shows it (highlight markers removed). Measured
  twice: the query as text (words, ranked), and as a regex of the escaped
  value (``mode="regex"``), the exact search a model can make for a value it
  knows.

The benchmark ``benchmarks/identifiers.py`` prints these per session; the
tests hold the summary to its target on the real sessions when they are present.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contextengine.anchors import message_anchors
from contextengine.formats import Session
from contextengine.identifiers import is_identifier, listed_identifiers
from contextengine.store.search import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN
from contextengine.tokens import count_tokens

__all__ = ["IdentifierSurvival", "identifier_survival", "region_identifiers", "summary_keeps"]

Message = dict[str, Any]


@dataclass
class IdentifierSurvival:
    """The figures of :func:`identifier_survival` for one recorded compaction."""

    session: str
    #: Messages before the boundary, and the budget (tokens of the recorded summary).
    messages: int
    budget: int
    #: Distinct identifiers of the region, per kind.
    kinds: dict[str, int]
    #: Identifiers kept by our summary and by the recorded one.
    ours: int
    recorded: int
    #: Tokens of our summary (at most ``budget``).
    ours_tokens: int
    #: Identifiers one lcm_grep found, text query and exact (regex) query;
    #: None when search was not measured.
    search: int | None = None
    search_exact: int | None = None
    #: Identifiers kept by our summary or found by one exact search.
    recoverable: int | None = None
    #: The identifiers our summary dropped, best-ranked first (for reading, not scoring).
    lost: list[str] = field(default_factory=list)

    @property
    def identifiers(self) -> int:
        """How many distinct identifiers the region holds."""
        return sum(self.kinds.values())


def region_identifiers(messages: Sequence[Message]) -> dict[str, tuple[str, set[int]]]:
    """``value -> (kind, positions of the messages holding it)`` for each identifier."""
    found: dict[str, tuple[str, set[int]]] = {}
    for position, message in enumerate(messages):
        for anchor in message_anchors(dict(message)):
            if is_identifier(anchor.kind, anchor.value):
                found.setdefault(anchor.value, (anchor.kind, set()))[1].add(position)
    return found


def summary_keeps(summary: str, values: Sequence[str]) -> list[str]:
    """The ``values`` a reader of ``summary`` has: verbatim, or listed in a folder group."""
    listed = listed_identifiers(summary)
    return [value for value in values if value in summary or value in listed]


def _our_summary(region: list[Message], budget: int) -> str:
    # Imported here: the compressor's modules import much of the package.
    from contextengine.engines.compressor.engine import DEFAULT_SUMMARY_INPUT_CHARS
    from contextengine.engines.compressor.request import outbound_region, region_anchors
    from contextengine.summarizers import DeterministicSummarizer
    from contextengine.summary_request import SummaryRequest

    request = SummaryRequest(
        messages=outbound_region(region, budget_chars=DEFAULT_SUMMARY_INPUT_CHARS),
        anchors=region_anchors(region),
        token_budget=budget,
    )
    return DeterministicSummarizer().summarize(request)


def _found(engine: Any, value: str, sources: set[int], k: int, mode: str) -> bool:
    query = re.escape(value) if mode == "regex" else value
    raw = engine.handle_tool_call("lcm_grep", {"query": query, "limit": k, "mode": mode})
    try:
        answer = json.loads(raw)
    except json.JSONDecodeError:
        return False
    results = answer.get("results") if isinstance(answer, dict) else None
    for hit in [r for r in results or [] if isinstance(r, dict)][:k]:
        snippet = str(hit.get("snippet", "")).replace(HIGHLIGHT_OPEN, "")
        if hit.get("seq") in sources or value in snippet.replace(HIGHLIGHT_CLOSE, ""):
            return True
    return False


def _searched(
    region: list[Message],
    found: dict[str, tuple[str, set[int]]],
    session_id: str,
    k: int,
    *,
    text_too: bool,
) -> tuple[set[str], set[str]]:
    """The identifiers one text query finds, and those one exact (regex) query finds."""
    from contextengine.engines.lossless import LosslessEngine

    text: set[str] = set()
    exact: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="ce-identifiers-") as folder:
        engine = LosslessEngine(context_length=1_000_000, store=Path(folder) / "archive.db")
        try:
            engine.on_session_start(session_id)
            engine.on_turn_complete(list(region))
            for value, (_, sources) in found.items():
                if text_too and _found(engine, value, sources, k, "text"):
                    text.add(value)
                if _found(engine, value, sources, k, "regex"):
                    exact.add(value)
        finally:
            engine.close()
    return text, exact


def identifier_survival(
    session: Session,
    *,
    boundary: int = 0,
    search: Literal["none", "lost", "all"] = "none",
    k: int = 5,
) -> IdentifierSurvival | None:
    """The figures for recorded compaction number ``boundary`` of ``session``; None without it.

    The region is the messages before the boundary (for a later boundary,
    everything before it, as if nothing had been compacted before).
    ``search`` archives the region in a temporary lcm SQLite file and runs
    ``lcm_grep``: for every identifier, a text and an exact query (``"all"``,
    seconds per session), or only the exact query for those our summary
    dropped (``"lost"``, enough for ``recoverable``).
    """
    compactions = [
        c
        for c in session.metadata.get("compactions") or []
        if isinstance(c, dict) and isinstance(c.get("index"), int) and c.get("summary")
    ]
    if len(compactions) <= boundary:
        return None
    recorded_summary = str(compactions[boundary]["summary"])
    region = list(session.messages[: int(compactions[boundary]["index"])])
    budget = count_tokens(recorded_summary)
    found = region_identifiers(region)
    values = list(found)
    ours = _our_summary(region, budget)
    kept = set(summary_keeps(ours, values))
    kinds: dict[str, int] = {}
    for kind, _ in found.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    text = exact = None
    if search != "none":
        asked = found if search == "all" else {v: found[v] for v in values if v not in kept}
        text, exact = _searched(region, asked, session.id, k, text_too=search == "all")
    return IdentifierSurvival(
        session=session.id,
        messages=len(region),
        budget=budget,
        kinds=kinds,
        ours=len(kept),
        recorded=len(summary_keeps(recorded_summary, values)),
        ours_tokens=count_tokens(ours),
        search=len(text) if text is not None and search == "all" else None,
        search_exact=len(exact) if exact is not None and search == "all" else None,
        recoverable=len(kept | exact) if exact is not None else None,
        lost=[value for value in values if value not in kept],
    )
