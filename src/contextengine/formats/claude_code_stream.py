"""Claude Code session JSONL, streamed: the messages of :mod:`.claude_code`, read as they go.

The list importer holds every record of the file while it works out the
active chain, then every message. This one reads the file twice and keeps
neither:

1. **index pass**: every record is parsed and reduced to what the choice of
   the active chain needs (its uuid links, and for message records a skeleton
   with the message id and the tool ids, no text). The list importer's own
   :func:`~.claude_code._select_active` runs on those skeletons, so the
   records kept are the same by construction. What survives the pass is
   small and fixed per record kept: a byte per line (kept, last record of a
   streamed assistant message), the ids of the tool calls and results kept,
   and which compaction boundary each recorded summary belongs to. The links
   themselves (about 200 bytes per record) are dropped before pass 2.
2. **message pass**: the file is read again and only the kept records are
   turned into messages, exactly as the list importer does, in the same
   order. An item is held back only while it is incomplete: an assistant
   message until its last streamed record, a tool call until its result has
   been read (Claude Code writes it a few records later), a compaction
   boundary until its summary. That lookahead is a few records in any real
   session; a result written far from its call is waited for, never dropped.

The result is :class:`~.._stream.SessionStream`: the same messages and, once
read to the end, the same metadata as :func:`.claude_code.load` (the module
docstring of :mod:`.claude_code` lists the keys). A file the list importer
rejects is rejected here too; errors in a record's framing come from the
index pass, before the first message, and errors in a kept message's content
when that message is reached.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine.formats._source import iter_jsonl
from contextengine.formats._stream import SessionStream, finish_stream
from contextengine.formats.claude_code import (
    NAME,
    _add_assistant_blocks,
    _Assistant,
    _Boundary,
    _select_active,
    _text_of,
    _user_items,
    assistant_message,
    scan,
)

__all__ = ["stream"]

Message = dict[str, Any]


@dataclass
class _Index:
    """What pass 2 needs from pass 1; small and fixed per record."""

    #: 1 at the line number of every record kept (messages and boundaries).
    kept: bytearray
    #: 1 at the line of the last kept record of each assistant message.
    last: bytearray
    #: Boundary line -> line of the compact summary that completes it.
    summary_for: dict[int, int]
    #: tool_use_id of every tool result a kept user record holds.
    result_ids: set[str]
    #: id of every tool call a kept assistant record holds.
    call_ids: set[str]
    session_id: str
    skipped_sidechain: int
    skipped_branch: int


def _skeleton(record: dict[str, Any]) -> dict[str, Any]:
    """The record reduced to what ``_select_active`` and the index pass read.

    Absent keys read as their default there (``isSidechain`` False, no tool
    blocks), so only what is set is kept: about 300 bytes a message record.
    """
    skeleton: dict[str, Any] = {"type": record["type"]}
    for key in ("uuid", "isSidechain", "isCompactSummary"):
        if record.get(key):
            skeleton[key] = record[key]
    message = record.get("message")
    if isinstance(message, dict):
        content = message.get("content")
        stubs: list[dict[str, Any]] = []
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "tool_use":
                    stubs.append({"type": kind, **({"id": block["id"]} if "id" in block else {})})
                elif kind == "tool_result":
                    stubs.append({"type": kind, "tool_use_id": block.get("tool_use_id")})
        skeleton["message"] = {"id": message.get("id"), "content": stubs or ""}
    return skeleton


def _index(path: Path) -> _Index:
    """Pass 1: choose the records to keep, as :func:`.claude_code.load` does."""
    scanned = scan(path, _skeleton)
    selected, skipped_branch = _select_active(scanned.records, scanned.links)
    index = _Index(
        kept=bytearray(scanned.lines + 1),
        last=bytearray(scanned.lines + 1),
        summary_for={},
        result_ids=set(),
        call_ids=set(),
        session_id=scanned.session_id,
        skipped_sidechain=scanned.skipped_sidechain,
        skipped_branch=skipped_branch,
    )
    del scanned  # the skeletons not selected and the links: the bulk of pass 1's memory
    last_line: dict[str, int] = {}
    boundary: int | None = None
    filled = False
    for lineno, skeleton in selected:
        index.kept[lineno] = 1
        kind = skeleton["type"]
        blocks = skeleton.get("message", {}).get("content") or []
        if kind == "system":
            boundary, filled = lineno, False
        elif kind == "assistant":
            key = skeleton["message"].get("id") or skeleton.get("uuid") or f"line{lineno}"
            last_line[key] = lineno
            index.call_ids.update(
                b["id"] for b in blocks if b["type"] == "tool_use" and isinstance(b.get("id"), str)
            )
        elif skeleton.get("isCompactSummary"):
            if boundary is not None and not filled:
                index.summary_for[boundary] = lineno
                filled = True
        else:
            index.result_ids.update(
                b["tool_use_id"]
                for b in blocks
                if b["type"] == "tool_result" and isinstance(b.get("tool_use_id"), str)
            )
    for lineno in last_line.values():
        index.last[lineno] = 1
    return index


@dataclass
class _Pending:
    """An item of pass 2 waiting for its turn; ``done`` once nothing more can change it."""

    item: _Assistant | _Boundary | dict[str, Any]
    done: bool = True
    summary_line: int = 0


@dataclass
class _Assembler:
    """Pass 2's state: ``_assemble`` of the list importer, one item at a time."""

    index: _Index
    metadata: dict[str, Any]
    queue: deque[_Pending] = field(default_factory=deque)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    open_assistants: dict[str, _Pending] = field(default_factory=dict)
    emitted: int = 0
    tool_items: int = 0
    unanswered: int = 0
    #: The file has ended: nothing more can arrive, so nothing waits.
    ended: bool = False

    def add_tool(self, item: dict[str, Any]) -> None:
        self.tool_items += 1
        call_id = item["tool_call_id"]
        # The first result of an id wins; one no kept call asks for is an orphan.
        if call_id in self.results or call_id in self.used or call_id not in self.index.call_ids:
            return
        self.results[call_id] = item

    def _waiting(self, pending: _Pending) -> bool:
        item = pending.item
        if self.ended:
            return False
        if not pending.done:
            return True
        if isinstance(item, _Assistant):
            return any(
                c["id"] in self.index.result_ids
                and c["id"] not in self.used
                and c["id"] not in self.results
                for c in item.tool_calls
            )
        return False

    def drain(self) -> Iterator[Message]:
        """Emit the items at the head of the queue that nothing can change any more."""
        queue = self.queue
        while queue and not self._waiting(queue[0]):
            item = queue.popleft().item
            if isinstance(item, _Boundary):
                self.metadata["compactions"].append(
                    {
                        "index": self.emitted,
                        "pre_tokens": item.pre_tokens,
                        "trigger": item.trigger,
                        "summary": item.summary,
                        "timestamp": item.timestamp,
                    }
                )
            elif isinstance(item, _Assistant):
                yield from self._assistant(item)
            else:
                self.emitted += 1
                yield item

    def _assistant(self, item: _Assistant) -> Iterator[Message]:
        results, used = self.results, self.used
        calls = [c for c in item.tool_calls if c["id"] in results and c["id"] not in used]
        self.unanswered += len(item.tool_calls) - len(calls)
        message = assistant_message(item, calls)
        if message is None:
            return
        if not self.metadata["model"]:
            self.metadata["model"] = item.model
        if item.usage is not None:
            self.metadata["usage"].append({"index": self.emitted, "usage": item.usage})
        self.emitted += 1
        yield message
        answers = [results[call["id"]] for call in calls]
        for call in calls:
            used.add(call["id"])
            # Placed: the buffer only holds results still waiting for their call.
            results.pop(call["id"], None)
        for answer in answers:
            self.emitted += 1
            yield answer


def _messages(path: Path, index: _Index, metadata: dict[str, Any]) -> Iterator[Message]:
    """Pass 2: the kept records as assembled messages, in the list importer's order."""
    state = _Assembler(index, metadata)
    boundary: _Pending | None = None
    kept, last = index.kept, index.last
    for lineno, record in iter_jsonl(path):
        if lineno >= len(kept) or not kept[lineno]:
            continue
        kind = record["type"]
        if kind == "system":
            meta = record.get("compactMetadata") or {}
            item = _Boundary(meta.get("preTokens"), meta.get("trigger"), record.get("timestamp"))
            summary_line = index.summary_for.get(lineno, 0)
            boundary = _Pending(item, done=not summary_line, summary_line=summary_line)
            state.queue.append(boundary)
        elif kind == "assistant":
            message = record["message"]
            message_id = message.get("id") or record.get("uuid") or f"line{lineno}"
            pending = state.open_assistants.get(message_id)
            if pending is None:
                pending = _Pending(_Assistant(message_id), done=False)
                state.open_assistants[message_id] = pending
                state.queue.append(pending)
            assistant = pending.item
            assert isinstance(assistant, _Assistant)
            _add_assistant_blocks(path, lineno, assistant, message)
            if isinstance(message.get("usage"), dict):
                assistant.usage = message["usage"]
            if isinstance(message.get("model"), str):
                assistant.model = message["model"]
            if last[lineno]:
                pending.done = True
                del state.open_assistants[message_id]
        elif record.get("isCompactSummary"):
            text = _text_of(record["message"]["content"])
            if (
                boundary is not None
                and isinstance(boundary.item, _Boundary)
                and boundary.item.summary is None
            ):
                boundary.item.summary = text
                boundary.done = True
            else:
                state.queue.append(_Pending(_Boundary(None, None, record.get("timestamp"), text)))
        else:
            for user_item in _user_items(path, lineno, record["message"]["content"]):
                assert isinstance(user_item, dict)
                if user_item["role"] == "tool":
                    state.add_tool(user_item)
                else:
                    state.queue.append(_Pending(user_item))
        yield from state.drain()
    state.ended = True
    yield from state.drain()
    metadata["unanswered_tool_calls"] = state.unanswered
    metadata["orphan_tool_results"] = state.tool_items - len(state.used)


def stream(path: Path) -> SessionStream:
    """Stream one Claude Code session file (main session or subagent file).

    Runs the index pass now (so a malformed file fails here, before any
    message) and returns a :class:`SessionStream` that reads the messages.
    """
    index = _index(path)
    metadata: dict[str, Any] = {
        "model": None,
        "compactions": [],
        "usage": [],
        "session_id": index.session_id,
        "skipped_sidechain_records": index.skipped_sidechain,
        "skipped_branch_records": index.skipped_branch,
    }
    messages = finish_stream(
        _messages(path, index, metadata), path=path, format=NAME, metadata=metadata
    )
    return SessionStream(
        id=path.stem,
        source=str(path),
        format=NAME,
        messages=messages,
        metadata=metadata,
        model_in_messages=True,
    )
