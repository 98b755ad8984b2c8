"""Importer for Claude Code session JSONL (format name ``"claude-code"``).

A session file (``~/.claude/projects/<project>/<session>.jsonl``) holds one
record per line. Only ``user`` and ``assistant`` records carry conversation;
``progress``, ``file-history-snapshot``, ``queue-operation`` and ``system``
records are bookkeeping, except the ``compact_boundary`` system record that
marks Claude Code's own compaction. Records are linked by ``uuid`` /
``parentUuid``; this importer keeps the conversation the session ended on:

* the *active chain* runs from the last message record back to the root,
  crossing a compaction through ``logicalParentUuid`` (or, when that record was
  never written, through the message record just before the boundary);
* an assistant reply is streamed as several records sharing ``message.id``,
  one content block each, and parallel tool calls hang off it as siblings, so
  every record of a message on the chain is kept and merged into one
  assistant message, and every ``tool_result`` answering a kept call is kept;
* records off the chain (a rewound branch) and sidechain records (subagents,
  ``isSidechain: true``) are skipped; a subagent file, whose records are all
  sidechain, is imported as its own conversation.

Blocks map to OpenAI messages: ``text`` → content, ``thinking`` →
``reasoning_content``, ``tool_use`` → ``tool_calls`` (arguments as JSON),
``tool_result`` → a ``tool`` message placed right after its call, images and
documents → a ``[image]`` / ``[document]`` placeholder.

The recorded compaction is metadata, not messages: the ``isCompactSummary``
user message is left out and ``metadata["compactions"]`` lists, per boundary,
``index`` (the position in ``messages`` where the boundary falls: messages
before it were what Claude Code summarised), ``pre_tokens``, ``trigger``,
``summary`` (the text Claude Code continued from) and ``timestamp``.

Other metadata: ``session_id``, ``model`` (first assistant model),
``usage`` (``[{"index": i, "usage": {...}}]``: the provider usage recorded for
the assistant message at ``messages[i]``), ``skipped_sidechain_records``,
``skipped_branch_records`` and ``orphan_tool_results`` / ``unanswered_tool_calls``
(dropped so tool calls stay paired).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats._session import Session, finish
from contextengine.formats._source import describe, iter_jsonl

__all__ = ["NAME", "load"]

NAME = "claude-code"


@dataclass(slots=True)
class _Link:
    parent: str | None
    logical_parent: str | None
    lineno: int
    is_message: bool


@dataclass
class _Assistant:
    message_id: str
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    model: str | None = None


@dataclass
class _Boundary:
    pre_tokens: int | None
    trigger: str | None
    timestamp: str | None
    summary: str | None = None


_Item = _Assistant | _Boundary | dict[str, Any]


@dataclass
class Scan:
    """Pass 1 over a session file: the records that can be conversation, and their links."""

    #: (line number, record as ``keep`` returned it) of every message record and
    #: compaction boundary, sidechain records left out when there are main ones.
    records: list[tuple[int, dict[str, Any]]]
    links: dict[str, _Link]
    #: Lines in the file.
    lines: int
    #: The first kept record's ``sessionId`` (the file's stem when it has none).
    session_id: str
    skipped_sidechain: int


def scan(path: Path, keep: Callable[[dict[str, Any]], dict[str, Any]]) -> Scan:
    """Read every record once, checking it; ``keep`` reduces what is held per record.

    Shared by :func:`load` (which keeps records whole) and the streaming
    importer (which keeps a skeleton of each and reads the file again).
    """
    records: list[tuple[int, dict[str, Any]]] = []
    links: dict[str, _Link] = {}
    has_main = False
    lines = 0
    previous: str | None = None
    first_main: str | None = None
    first_any: str | None = None
    for lineno, record in iter_jsonl(path):
        lines = lineno
        kind = record.get("type")
        if not isinstance(kind, str):
            raise FormatError(
                str(path),
                f"line {lineno}",
                "a Claude Code record with a 'type' key",
                found=describe(record),
            )
        uuid = record.get("uuid")
        is_message = kind in ("user", "assistant")
        if isinstance(uuid, str):
            parent = record.get("parentUuid")
            if parent == previous:
                parent = previous  # share the string: most records hang off the one before
            links[uuid] = _Link(parent, record.get("logicalParentUuid"), lineno, is_message)
            previous = uuid
        if is_message or (kind == "system" and record.get("subtype") == "compact_boundary"):
            if is_message:
                _check_message_record(path, lineno, record)
                has_main = has_main or not record.get("isSidechain", False)
            session = record.get("sessionId", path.stem)
            if first_main is None and not record.get("isSidechain", False):
                first_main = session
            first_any = session if first_any is None else first_any
            records.append((lineno, keep(record)))

    # A subagent file is all sidechain: then the sidechain is the conversation.
    skipped_sidechain = 0
    if has_main:
        main = [(n, r) for n, r in records if not r.get("isSidechain", False)]
        skipped_sidechain = len(records) - len(main)
        records = main
    first = first_main if has_main else first_any
    return Scan(records, links, lines, path.stem if first is None else first, skipped_sidechain)


def load(path: Path) -> list[Session]:
    """Import one Claude Code session file (main session or subagent file)."""
    scanned = scan(path, lambda record: record)
    selected, skipped_branch = _select_active(scanned.records, scanned.links)
    items = _items(path, selected)
    messages, metadata = _assemble(items)
    metadata.update(
        session_id=scanned.session_id,
        skipped_sidechain_records=scanned.skipped_sidechain,
        skipped_branch_records=skipped_branch,
    )
    return [finish(id=path.stem, path=path, format=NAME, messages=messages, metadata=metadata)]


def assistant_message(item: _Assistant, calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The OpenAI message of one merged assistant reply with its answered ``calls``.

    None when nothing is left: no text, no answered call, no thinking. A reply
    with thinking only gets empty text, which every provider accepts.
    """
    text = "\n\n".join(t for t in item.text if t.strip())
    if not text and not calls and not item.reasoning:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if item.reasoning:
        message["reasoning_content"] = "\n\n".join(item.reasoning)
    if calls:
        message["tool_calls"] = calls
    elif not text:
        message["content"] = ""
    return message


def _check_message_record(path: Path, lineno: int, record: dict[str, Any]) -> None:
    message = record.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), str | list):
        raise FormatError(
            str(path),
            f"line {lineno}",
            f"a {record['type']} record whose 'message' has 'content' (a string or blocks)",
            found=describe(message),
        )


def _select_active(
    records: list[tuple[int, dict[str, Any]]], links: dict[str, _Link]
) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """Keep the records of the conversation the session ended on; count the others."""
    message_lines = [n for n, r in records if r["type"] in ("user", "assistant")]
    if not message_lines:
        return records, 0
    by_line = {n: r for n, r in records}
    chain: set[str] = set()
    current = by_line[message_lines[-1]].get("uuid")
    while isinstance(current, str) and current in links and current not in chain:
        chain.add(current)
        link = links[current]
        parent = link.parent if link.parent is not None else link.logical_parent
        if isinstance(parent, str) and parent not in links:
            # Seen at compaction boundaries: the logical parent was never written,
            # so the conversation resumes from the message record just before.
            parent = _previous_message_uuid(message_lines, by_line, link.lineno)
        current = parent
    if not chain:
        return records, 0  # no uuids recorded: keep file order

    on_chain_ids = {
        r["message"].get("id")
        for _, r in records
        if r["type"] == "assistant" and r.get("uuid") in chain
    }
    kept: list[tuple[int, dict[str, Any]]] = []
    call_ids: set[str] = set()
    for lineno, record in records:
        uuid = record.get("uuid")
        keep = uuid in chain or not isinstance(uuid, str)
        if record["type"] == "assistant":
            keep = keep or record["message"].get("id") in on_chain_ids
            if keep:
                call_ids.update(
                    b["id"] for b in _blocks(record) if b.get("type") == "tool_use" and "id" in b
                )
        elif record["type"] == "user" and not keep:
            results = [b for b in _blocks(record) if b.get("type") == "tool_result"]
            keep = bool(results) and all(b.get("tool_use_id") in call_ids for b in results)
        if keep:
            kept.append((lineno, record))
    return kept, len(records) - len(kept)


def _previous_message_uuid(
    message_lines: list[int], by_line: dict[int, dict[str, Any]], before: int | None
) -> str | None:
    candidates = [n for n in message_lines if before is None or n < before]
    return by_line[candidates[-1]].get("uuid") if candidates else None


def _blocks(record: dict[str, Any]) -> list[dict[str, Any]]:
    content = record["message"]["content"]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _items(path: Path, records: list[tuple[int, dict[str, Any]]]) -> list[_Item]:
    """Turn records into assistant messages, tool results, user messages and boundaries."""
    items: list[_Item] = []
    by_id: dict[str, _Assistant] = {}
    boundary: _Boundary | None = None
    for lineno, record in records:
        kind = record["type"]
        if kind == "system":
            meta = record.get("compactMetadata") or {}
            boundary = _Boundary(
                meta.get("preTokens"), meta.get("trigger"), record.get("timestamp")
            )
            items.append(boundary)
        elif kind == "assistant":
            message = record["message"]
            message_id = message.get("id") or record.get("uuid") or f"line{lineno}"
            assistant = by_id.get(message_id)
            if assistant is None:
                assistant = by_id[message_id] = _Assistant(message_id)
                items.append(assistant)
            _add_assistant_blocks(path, lineno, assistant, message)
            if isinstance(message.get("usage"), dict):
                assistant.usage = message["usage"]
            if isinstance(message.get("model"), str):
                assistant.model = message["model"]
        elif record.get("isCompactSummary"):
            text = _text_of(record["message"]["content"])
            if boundary is not None and boundary.summary is None:
                boundary.summary = text
            else:
                items.append(_Boundary(None, None, record.get("timestamp"), text))
        else:
            items.extend(_user_items(path, lineno, record["message"]["content"]))
    return items


def _add_assistant_blocks(
    path: Path, lineno: int, assistant: _Assistant, message: dict[str, Any]
) -> None:
    content = message["content"]
    if isinstance(content, str):
        assistant.text.append(content)
        return
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            assistant.text.append(str(block.get("text", "")))
        elif kind == "thinking":
            assistant.reasoning.append(str(block.get("thinking", "")))
        elif kind == "tool_use":
            assert isinstance(block, dict)
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise FormatError(
                    str(path),
                    f"line {lineno}",
                    "a tool_use block with an 'id' and a 'name'",
                    found=describe(block),
                )
            assistant.tool_calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {
                        "name": block["name"],
                        "arguments": json.dumps(block.get("input", {}), ensure_ascii=False),
                    },
                }
            )
        # redacted_thinking and unknown blocks carry nothing a replay can use.


def _user_items(path: Path, lineno: int, content: str | list[Any]) -> list[_Item]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    items: list[_Item] = []
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            raise FormatError(
                str(path),
                f"line {lineno}",
                "content blocks that are objects",
                found=describe(block),
            )
        if block.get("type") == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise FormatError(
                    str(path),
                    f"line {lineno}",
                    "a tool_result block with a 'tool_use_id'",
                    found=describe(block),
                )
            items.append(
                {
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": _text_of(block.get("content", "")),
                }
            )
        else:
            texts.append(_text_of([block]))
    text = "\n\n".join(t for t in texts if t)
    if text:
        items.append({"role": "user", "content": text})
    return items


def _text_of(content: Any) -> str:
    """Flatten Anthropic content (string or blocks) to text, with placeholders for media."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind in ("image", "document"):
                parts.append(f"[{kind}]")
            elif kind == "tool_result":
                parts.append(_text_of(block.get("content", "")))
    return "\n".join(parts)


def _assemble(items: list[_Item]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Place each tool result right after its call and drop unpaired calls and results."""
    results: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, dict) and item["role"] == "tool":
            results.setdefault(item["tool_call_id"], item)
    messages: list[dict[str, Any]] = []
    compactions: list[dict[str, Any]] = []
    usage: list[dict[str, Any]] = []
    used: set[str] = set()
    unanswered = 0
    model: str | None = None
    for item in items:
        if isinstance(item, _Boundary):
            compactions.append(
                {
                    "index": len(messages),
                    "pre_tokens": item.pre_tokens,
                    "trigger": item.trigger,
                    "summary": item.summary,
                    "timestamp": item.timestamp,
                }
            )
        elif isinstance(item, _Assistant):
            calls = [c for c in item.tool_calls if c["id"] in results and c["id"] not in used]
            unanswered += len(item.tool_calls) - len(calls)
            message = assistant_message(item, calls)
            if message is None:
                continue
            model = model or item.model
            if item.usage is not None:
                usage.append({"index": len(messages), "usage": item.usage})
            messages.append(message)
            for call in calls:
                used.add(call["id"])
                messages.append(results[call["id"]])
        elif item["role"] != "tool":
            messages.append(item)
    orphans = sum(1 for i in items if isinstance(i, dict) and i["role"] == "tool") - len(used)
    return messages, {
        "model": model,
        "compactions": compactions,
        "usage": usage,
        "unanswered_tool_calls": unanswered,
        "orphan_tool_results": orphans,
    }
