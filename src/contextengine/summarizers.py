"""Summarisers: the ``Summarizer`` protocol, ``SummaryRequest``, and the shipped implementations.

An engine that compacts a region of the conversation builds a
:class:`SummaryRequest` and hands it to a summariser, which returns plain text
(the engine wraps it in its reference-material markers). Two summarisers ship:

* :class:`DeterministicSummarizer` (this module): the embedded default, no
  model and no network. It keeps the user's requests verbatim, a one-line
  record of every action and tool call, and an index of the exact identifiers
  of the region (see :mod:`contextengine.anchors`), merged with the previous
  summary and fitted to the budget.
* :class:`~contextengine.openai_summarizer.OpenAICompatibleSummarizer`: any
  chat-completions endpoint, built from the environment by
  :func:`~contextengine.openai_summarizer.summarizer_from_env`. Re-exported here.

:class:`SummaryRequest` and the :class:`Summarizer` protocol live in
:mod:`contextengine.summary_request` and are re-exported here too. The
dependency is one-way: this module imports the OpenAI-compatible summariser,
which imports only :mod:`contextengine.summary_request`, never this module.

The deterministic summary format is stable, so that the next compaction can
parse it back and merge rather than nest::

    ## User requests
    - first request, verbatim
      its second line, indented by two spaces
    ## Actions
    - bash(command='pytest -q') -> exit 1, 2.3k chars
    ## Anchors
    ### files
    - src/app.py (×3)
    - src/contextengine/{anchors.py,summarizers.py}
    ### errors
    - KeyError

``(×N)`` is how many messages mentioned an anchor (omitted for 1); it is what
ranks anchors when the budget forces some out. Paths (and URLs) sharing a
folder are written as one brace group (:func:`contextengine.identifiers.pack_identifiers`;
no counts inside a group, its place in the list ranks it), which a later
compaction reads back into its members. Within a section, the best-ranked
anchor comes first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextengine.anchors import ANCHOR_KINDS, find_anchors, parse_tool_arguments
from contextengine.anchors import anchors_from_tool_call as _tool_call_anchors
from contextengine.identifiers import (
    expand_identifiers,
    format_group,
    group_indices,
    identifier_rank,
    is_identifier,
)
from contextengine.openai_summarizer import OpenAICompatibleSummarizer, summarizer_from_env
from contextengine.summary_prompt import bound_text, content_text
from contextengine.summary_request import Summarizer, SummaryRequest
from contextengine.tokens import count_tokens

__all__ = [
    "DeterministicSummarizer",
    "OpenAICompatibleSummarizer",
    "Summarizer",
    "SummaryRequest",
    "summarizer_from_env",
]

Message = dict[str, Any]


# ---------------------------------------------------------------- the format

_REQUESTS = "## User requests"
_ACTIONS = "## Actions"
_ANCHORS = "## Anchors"
_EARLIER = "## Earlier summary"
# Under _REQUESTS when the region (and the summary it replaces) has no user
# message. Not a "- " item, so reading the summary back finds no request in it.
_NO_REQUESTS = "(none: this part of the conversation holds no user message)"
_COUNT_SUFFIX = re.compile(r"^(.*) \(×(\d+)\)$")
# Anchor kinds whose index lines group values by folder (src/pkg/{a.py,b.py}).
_GROUPED_KINDS = ("files", "urls")

#: Older user requests are kept up to this many characters (head and tail);
#: the most recent one is kept whole unless the budget itself is smaller.
OLDER_REQUEST_CHARS = 1_500
_ACTION_TEXT_CHARS = 160
_ARG_VALUE_CHARS = 80
_ARGS_CHARS = 200
_SHORT_RESULT_CHARS = 100
_EARLIER_SUMMARY_CHARS = 8_000
_KEY_ARGS = (
    "command",
    "cmd",
    "path",
    "file_path",
    "filename",
    "file",
    "pattern",
    "query",
    "url",
    "old_str",
    "reservation_id",
    "user_id",
)
_EXIT_CODE = re.compile(
    r"(?:exit[ _](?:code|status)|returncode|return code|exited with(?: code)?)\W{0,3}(-?\d{1,3})"
    r"|<returncode>\s*(-?\d{1,3})\s*</returncode>",
    re.IGNORECASE,
)
_OBSERVATION_PREFIXES = (
    "<returncode>",
    "<output>",
    "observation:",
    "[tool result]",
    "tool result:",
)
_WORD = re.compile(r"[\w./-]{3,}")
_STOPWORDS = frozenset({"the", "and", "for", "with", "about", "that", "this", "from", "into"})


def _item_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return ["- " + lines[0]] + ["  " + line for line in lines[1:]]


@dataclass
class _Item:
    """One line (or verbatim block) of the summary, with what decides whether it stays."""

    section: str  # "requests", "actions", "earlier" or an anchor kind
    text: str
    priority: tuple[float, ...]  # larger is kept first
    order: tuple[float, ...]  # display order within the section
    tokens: int = 0
    #: For an anchor: its exact value and how many messages mentioned it.
    value: str = ""
    count: int = 1
    #: An identifier (see contextengine.identifiers): cut after the prose.
    ident: bool = False


@dataclass
class _Parsed:
    requests: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    anchors: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    earlier: str = ""


def _parse_previous(summary: str) -> _Parsed:
    """Read a previous summary back; a summary in another format becomes ``earlier``."""
    parsed = _Parsed()
    section: str | None = None
    items: list[list[str]] = []
    target: list[tuple[str, list[list[str]]]] = []
    for line in summary.splitlines():
        if line in (_REQUESTS, _ACTIONS, _ANCHORS, _EARLIER):
            section = line
            if line != _ANCHORS:
                items = []
                target.append((line, items))
            continue
        if section == _ANCHORS and line.startswith("### "):
            items = []
            target.append((line[4:].strip(), items))
            continue
        if section is None:
            continue
        if line.startswith("- "):
            items.append([line[2:]])
        elif line.startswith("  ") and items:
            items[-1].append(line[2:])
        elif section == _EARLIER and line.strip():
            items.append([line])
    if not target:
        parsed.earlier = summary.strip()
        return parsed
    for name, entries in target:
        texts = ["\n".join(entry) for entry in entries]
        if name == _REQUESTS:
            parsed.requests.extend(texts)
        elif name == _ACTIONS:
            parsed.actions.extend(texts)
        elif name == _EARLIER:
            parsed.earlier = "\n".join(texts)
        else:
            bucket = parsed.anchors.setdefault(name, [])
            for text in texts:
                match = _COUNT_SUFFIX.match(text)
                if match:
                    bucket.append((match.group(1), int(match.group(2))))
                elif name in _GROUPED_KINDS and " " not in text and expand_identifiers(text):
                    # A folder group stands for its members; their counts were not written.
                    bucket.extend((value, 1) for value in expand_identifiers(text))
                else:
                    bucket.append((text, 1))
    return parsed


# ---------------------------------------------------------------- the region


def _size(chars: int) -> str:
    if chars < 1_000:
        return f"{chars} chars"
    if chars < 1_000_000:
        return f"{chars / 1_000:.1f}k chars"
    return f"{chars / 1_000_000:.1f}M chars"


def _key_args(arguments: Any) -> str:
    """``key='value', ...`` for the arguments a reader needs to recognise a call."""
    parsed = parse_tool_arguments(arguments)
    if isinstance(parsed, dict):
        keys = [k for k in _KEY_ARGS if k in parsed]
        keys += [k for k in parsed if k not in keys]
        parts = []
        for key in keys[:3]:
            value = parsed[key]
            if isinstance(value, str):
                shown = value if len(value) <= _ARG_VALUE_CHARS else value[:_ARG_VALUE_CHARS] + "…"
                parts.append(f"{key}={shown!r}")
            else:
                dumped = json.dumps(value, ensure_ascii=False, sort_keys=True)
                parts.append(f"{key}={dumped[:40] + '…' if len(dumped) > 40 else dumped}")
        if len(keys) > 3:
            parts.append("…")
        text = ", ".join(parts)
    elif parsed in (None, ""):
        text = ""
    else:
        text = repr(parsed) if isinstance(parsed, str) else json.dumps(parsed)
    return text if len(text) <= _ARGS_CHARS else text[:_ARGS_CHARS] + "…"


def _result_status(text: str) -> str:
    """``exit N``, ``error`` or ``ok``, as visible in a tool result."""
    match = None
    for window in (text[:2_000], text[-2_000:]):
        lowered = window.lower()
        # The regex only runs where one of its words occurs: most results have none.
        if "exit" in lowered or "return" in lowered:
            match = match or _EXIT_CODE.search(window)
    if match:
        return f"exit {match.group(1) or match.group(2)}"
    head = text.lstrip()[:300].lower()
    if head.startswith("error") or "traceback (most recent call last)" in text[-4_000:].lower():
        return "error"
    return "ok"


def _result_record(text: str | None) -> str:
    if text is None:
        return "no result"
    stripped = text.strip()
    status = _result_status(stripped)
    if len(stripped) <= _SHORT_RESULT_CHARS and "\n" not in stripped:
        return f"{status}: {stripped}" if stripped else f"{status}, empty"
    return f"{status}, {_size(len(text))}"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _walk(messages: Sequence[Message]) -> Iterator[tuple[int, str, str]]:
    """``(position, kind, text)`` for the region: requests, action records, texts to index."""
    results: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "tool":
            results.setdefault(
                str(message.get("tool_call_id", "")), content_text(message.get("content"))
            )
    answered: set[str] = set()
    for position, message in enumerate(messages):
        role = message.get("role")
        text = content_text(message.get("content"))
        if role == "user":
            stripped = text.strip()
            if stripped.lower().startswith(_OBSERVATION_PREFIXES):
                # Bash-only agents (mini-swe-agent, SWE-agent) send command
                # output back as user messages; it is a tool result, not a request.
                yield position, "action", f"observation -> {_result_record(text)}"
            elif stripped:
                yield position, "request", stripped
        elif role == "assistant":
            if text.strip():
                yield position, "action", "assistant: " + _one_line(text, _ACTION_TEXT_CHARS)
            for call in message.get("tool_calls") or []:
                if not isinstance(call, dict):
                    continue
                function = call.get("function") or {}
                name = str(function.get("name") or "tool")
                call_id = str(call.get("id", ""))
                answered.add(call_id)
                record = _result_record(results.get(call_id))
                args = _key_args(function.get("arguments"))
                yield position, "action", f"{name}({args}) -> {record}"
        elif role == "tool":
            if str(message.get("tool_call_id", "")) not in answered:
                yield position, "action", f"tool result -> {_result_record(text)}"
        elif text.strip():
            yield position, "action", f"{role}: " + _one_line(text, _ACTION_TEXT_CHARS)


def _region_anchors(messages: Sequence[Message]) -> dict[str, tuple[str, int, int]]:
    """``value -> (kind, messages mentioning it, last position)`` over the region."""
    found: dict[str, tuple[str, int, int]] = {}
    for position, message in enumerate(messages):
        anchors = list(find_anchors(content_text(message.get("content"))))
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                function = call.get("function") or {}
                anchors.extend(
                    _tool_call_anchors(str(function.get("name") or ""), function.get("arguments"))
                )
        seen: set[str] = set()
        for anchor in anchors:
            if anchor.value in seen:
                continue
            seen.add(anchor.value)
            kind, count, _ = found.get(anchor.value, (anchor.kind, 0, 0))
            found[anchor.value] = (kind, count + 1, position)
    return found


# ---------------------------------------------------------------- the summariser


class DeterministicSummarizer:
    """The embedded default summariser: no model, no network, same input → same output.

    Called by engines (the compressor by default, and as the fallback when a
    model summariser fails) with the region being compacted; its work is
    linear in that region. It keeps, in the stable format described in the
    module docstring:

    * the user's requests verbatim (older ones bounded to
      :data:`OLDER_REQUEST_CHARS`, the most recent whole);
    * a one-line record of each assistant message and tool call, with the
      call's key arguments and its result status and size;
    * an anchor index of exact identifiers, grouped by kind.

    A region with no user message (and no earlier request to carry) says so
    under ``## User requests`` instead of leaving the section out.
    Everything from ``request.previous_summary`` is merged in, older than the
    region, and so are ``request.anchors`` (identifiers from parts of the region
    that were not sent in full), ranked after those seen in ``messages``.
    When the result exceeds ``request.token_budget``, the lowest
    priority lines go first: the oldest actions, then the other anchors
    (commands, numbers, whole error lines), then the oldest requests, and last
    the identifiers (:func:`contextengine.identifiers.is_identifier`: paths,
    URLs, ids, error names), ranked by kind
    (:func:`~contextengine.identifiers.identifier_rank`), then by how many
    messages mention them, then by recency, and measured on the packed index.
    The most recent request is kept whole up to two thirds of the budget (cut
    to head and tail beyond, when the identifiers need the room) and goes
    before anything else. Lines mentioning a word of ``request.focus_topic``
    outrank all others except the most recent request.
    """

    def summarize(self, request: SummaryRequest) -> str:
        """Return the summary text for ``request``; never raises for content reasons."""
        previous = _parse_previous(request.previous_summary or "")
        items = self._items(request.messages, previous, request.anchors)
        focus = _focus_words(request.focus_topic)
        if focus:
            for item in items:
                if any(word in item.text.lower() for word in focus):
                    item.priority = (item.priority[0], 1.0, *item.priority[2:])
        if request.messages and not any(item.section == "requests" for item in items):
            # Say so rather than leave readers (a model) to guess at a request.
            note = f"{_REQUESTS}\n{_NO_REQUESTS}"
            budget = max(request.token_budget - count_tokens(note) - 1, 1)
            text = _fit(items, budget)
            return f"{note}\n{text}" if text else note
        text = _fit(items, max(request.token_budget, 1))
        return text or "No earlier content."

    def _items(
        self, messages: Sequence[Message], previous: _Parsed, extra_anchors: Sequence[str] = ()
    ) -> list[_Item]:
        items: list[_Item] = []
        requests: list[tuple[tuple[float, ...], str]] = []
        for index, text in enumerate(previous.requests):
            requests.append(((0, index), text))
        actions: list[_Item] = []
        for index, text in enumerate(previous.actions):
            actions.append(_Item("actions", text, (0, 0, 1, 0, index), (0, index)))
        for sub, (position, kind, text) in enumerate(_walk(messages)):
            if kind == "request":
                requests.append(((1, position), text))
            else:
                actions.append(_Item("actions", text, (0, 0, 1, 1, sub), (1, sub)))
        items.extend(actions)

        # Identical requests ("continue", "yes") are kept once, at their latest place.
        latest_of: dict[str, tuple[float, ...]] = {}
        for order, text in requests:
            latest_of[text] = order
        unique = sorted(latest_of.items(), key=lambda pair: pair[1])
        for rank, (text, order) in enumerate(unique):
            is_latest = rank == len(unique) - 1
            shown = text if is_latest else bound_text(text, OLDER_REQUEST_CHARS)
            items.append(_Item("requests", shown, (float(is_latest), 0, 3, rank), order))

        items.extend(_anchor_items(_region_anchors(messages), previous, extra_anchors))
        if previous.earlier:
            earlier = bound_text(previous.earlier, _EARLIER_SUMMARY_CHARS)
            items.append(_Item("earlier", earlier, (0, 0, 1.5), (0,)))
        return items


def _focus_words(topic: str | None) -> list[str]:
    if not topic:
        return []
    words = [w.lower().strip("./-") for w in _WORD.findall(topic)]
    return sorted({w for w in words if len(w) >= 3 and w not in _STOPWORDS})


def _split_anchor(text: str) -> tuple[str, str]:
    """``(kind, value)`` of a ``"kind:value"`` request anchor (unknown kind: all value)."""
    kind, sep, value = text.partition(":")
    if sep and kind in ANCHOR_KINDS and value:
        return kind, value
    return "ids", text


def _anchor_items(
    region: dict[str, tuple[str, int, int]], previous: _Parsed, extra: Sequence[str] = ()
) -> list[_Item]:
    """Anchor lines ranked by (mentions, recency); previous-only anchors rank as older.

    ``extra`` (``SummaryRequest.anchors``, best first) adds the anchors of the
    parts of the region not sent: one mention each, more recent than the
    previous summary's and older than those of the sent messages, in their order.
    """
    merged: dict[str, tuple[str, int, float]] = {}
    total = sum(len(bucket) for bucket in previous.anchors.values())
    rank = 0
    for kind, bucket in previous.anchors.items():
        for value, count in bucket:
            if value not in merged:
                # Stored order is already best-first, so earlier entries rank higher.
                merged[value] = (kind, count, float(total - rank))
                rank += 1
    for value, (kind, count, position) in region.items():
        old_kind, old_count, _ = merged.get(value, (kind, 0, 0.0))
        merged[value] = (old_kind, old_count + count, float(total + 2 + position))
    unseen = [pair for pair in map(_split_anchor, extra) if pair[1] not in region]
    for rank_in_extra, (kind, value) in enumerate(unseen):
        old_kind, old_count, _ = merged.get(value, (kind, 0, 0.0))
        recency = float(total) + 1.0 - rank_in_extra / (len(unseen) + 1)
        merged[value] = (old_kind, old_count + 1, recency)
    items = []
    for value, (kind, count, recency) in merged.items():
        text = value if count <= 1 else f"{value} (×{count})"
        if is_identifier(kind, value):
            # Identifiers outrank every line of prose: by kind, then reuse, then recency.
            kind_rank = float(identifier_rank(kind, value))
            priority: tuple[float, ...] = (0.0, 0.0, 4.0, -kind_rank, float(count), recency)
            order: tuple[float, ...] = (kind_rank, -float(count), -recency)
            items.append(_Item(kind, text, priority, order, value=value, count=count, ident=True))
        else:
            priority = (0.0, 0.0, 2.0, float(count), recency)
            order = (9.0, -float(count), -recency)
            items.append(_Item(kind, text, priority, order, value=value, count=count))
    return items


def _section_header(section: str) -> list[str]:
    if section == "requests":
        return [_REQUESTS]
    if section == "actions":
        return [_ACTIONS]
    if section == "earlier":
        return [_EARLIER]
    return [f"### {section}"]


def _render(chosen: list[_Item]) -> str:
    by_section: dict[str, list[_Item]] = {}
    for item in chosen:
        by_section.setdefault(item.section, []).append(item)
    lines: list[str] = []
    anchor_kinds = list(ANCHOR_KINDS) + sorted(
        s
        for s in by_section
        if s not in ANCHOR_KINDS and s not in ("requests", "actions", "earlier")
    )
    for section in ("earlier", "requests", "actions"):
        if section in by_section:
            lines.extend(_section_header(section))
            for item in sorted(by_section[section], key=lambda i: i.order):
                lines.extend(_item_lines(item.text))
    if any(kind in by_section for kind in anchor_kinds):
        lines.append(_ANCHORS)
        for kind in anchor_kinds:
            if kind in by_section:
                lines.extend(_section_header(kind))
                lines.extend(_anchor_lines(kind, by_section[kind]))
    return "\n".join(lines)


def _anchor_lines(kind: str, items: list[_Item]) -> list[str]:
    """One section of the anchor index, best first; paths sharing a folder on one line."""
    ordered = sorted(items, key=lambda i: i.order)
    if kind not in _GROUPED_KINDS:
        return [line for item in ordered for line in _item_lines(item.text)]
    lines: list[str] = []
    for group in group_indices([item.value or item.text for item in ordered]):
        if len(group) == 1:
            lines.extend(_item_lines(ordered[group[0]].text))
        else:
            # Counts are not written inside a group: its place in the index ranks it.
            lines.extend(_item_lines(format_group([ordered[i].value for i in group])))
    return lines


def _fit(items: list[_Item], budget: int) -> str:
    """The highest-priority items that fit ``budget`` tokens, rendered.

    Three passes, in priority order: what outranks the identifiers (the
    latest request, cut to leave the identifier index up to a third of the
    budget, and lines on the
    focus topic); then as many identifiers as fit, best first (their cost is
    measured on the rendered index, where folder groups make each path
    cheaper than its own line); then the rest of the prose, line by line.
    """
    ranked = sorted(items, key=lambda i: i.priority, reverse=True)
    idents = [item for item in ranked if item.ident]
    first = [i for i in ranked if not i.ident and (i.priority[0] > 0 or i.priority[1] > 0)]
    rest = [i for i in ranked if not i.ident and not (i.priority[0] > 0 or i.priority[1] > 0)]
    # The latest request keeps at least two thirds of the budget; the
    # identifier index gets the room it needs out of the last third.
    reserve = min(_index_tokens(idents), budget // 3) if idents else 0
    state = _Packing(budget)
    for item in first:
        state.add(item, shrink_to=budget - reserve)
    state.add_identifiers(idents)
    for item in rest:
        state.add(item)
    chosen = state.chosen
    text = _render(chosen)
    # Per-line counts can undercount where BPE merges across line breaks;
    # drop the lowest-priority lines until the real count fits.
    while chosen and count_tokens(text) > budget:
        excess = count_tokens(text) - budget
        while chosen and excess > 0:
            excess -= max(chosen.pop().tokens, 1)
        text = _render(chosen)
    return text


def _index_tokens(idents: list[_Item]) -> int:
    """Tokens of the anchor index of ``idents`` alone, with its headings."""
    return count_tokens(_render(idents)) + 1 if idents else 0


class _Packing:
    """The items chosen so far for :func:`_fit` and the tokens they use."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.chosen: list[_Item] = []
        self.sections: set[str] = set()
        self.anchors_started = False

    def _header_cost(self, section: str) -> int:
        if section in self.sections:
            return 0
        cost = count_tokens(_section_header(section)[0]) + 1
        if section not in ("requests", "actions", "earlier") and not self.anchors_started:
            cost += count_tokens(_ANCHORS) + 1
        return cost

    def _take(self, item: _Item, cost: int) -> None:
        self.used += cost
        self.sections.add(item.section)
        self.anchors_started = self.anchors_started or item.section not in (
            "requests",
            "actions",
            "earlier",
        )
        self.chosen.append(item)

    def add(self, item: _Item, shrink_to: int | None = None) -> None:
        """Take ``item`` when it fits; the latest request is cut to fit ``shrink_to`` instead."""
        item.tokens = count_tokens("\n".join(_item_lines(item.text))) + 1
        header = self._header_cost(item.section)
        if item.section == "requests" and item.priority[0] == 1.0:
            limit = min(self.budget, shrink_to if shrink_to is not None else self.budget)
            if self.used + header + item.tokens > limit:
                item.text = _shrink(item.text, max(limit - self.used - header, 8))
                item.tokens = count_tokens("\n".join(_item_lines(item.text))) + 1
        if self.used + header + item.tokens <= self.budget:
            self._take(item, header + item.tokens)

    def add_identifiers(self, idents: list[_Item]) -> None:
        """Take the most identifiers (best first) whose rendered index fits what is left."""
        if not idents:
            return
        room = self.budget - self.used
        extra = 0 if not self.anchors_started else count_tokens(_ANCHORS) + 1

        def cost(count: int) -> int:
            return _index_tokens(idents[:count]) - extra

        low, high = 0, len(idents)
        if cost(high) > room:
            while low < high:  # the largest count that fits
                middle = (low + high + 1) // 2
                if cost(middle) <= room:
                    low = middle
                else:
                    high = middle - 1
        else:
            low = high
        if low == 0:
            return
        total = cost(low)
        for item in idents[:low]:
            # Each carries the average share, for the final trim's estimate.
            item.tokens = max(total // low, 1)
            self._take(item, 0)
        self.used += total


def _shrink(text: str, tokens: int) -> str:
    """``text`` cut (head and tail) until it fits ``tokens``, for the latest request."""
    limit = max(tokens, 8) * 3
    shrunk = bound_text(text, limit)
    while limit > 40 and count_tokens("\n".join(_item_lines(shrunk))) + 1 > tokens:
        limit = limit * 3 // 4
        shrunk = bound_text(text, limit)
    return shrunk
