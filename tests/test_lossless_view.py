"""The lossless engine's per-request work: the incremental view and proportional compaction.

The view kept between requests must be exactly what a from-scratch assembly
gives, whatever happens between requests (appends, compactions, budget
changes, a resume in a new engine); and the work per request and per
compaction step must follow what changed, not the whole history. Work is
counted (rebuilds, rows written, messages validated), never timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextengine._host_requests as host_requests
from contextengine import ContextHost
from contextengine.engines.lossless import LosslessEngine
from contextengine.engines.lossless.assemble import assemble_view
from contextengine.store import ContextSplice, SQLiteStore
from contextengine.tokens import count_message_tokens

Message = dict[str, Any]
SYSTEM: Message = {"role": "system", "content": "You are a careful agent. Keep exact ids."}


def group(i: int, kind: int, size: int) -> list[Message]:
    """One unit of conversation: a user turn, a tool round, or a plain answer."""
    text = f"item {i} " + "word " * size
    if kind == 0:
        return [{"role": "user", "content": f"Request R-{i}: " + text}]
    if kind == 1:
        calls = [
            {
                "id": f"c{i}_{n}",
                "type": "function",
                "function": {"name": "grep", "arguments": json.dumps({"q": i, "n": n})},
            }
            for n in range(1 + size % 2)
        ]
        results = [
            {"role": "tool", "tool_call_id": call["id"], "content": f"result {i} " + text}
            for call in calls
        ]
        return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]
    return [{"role": "assistant", "content": f"Answer A-{i}: " + text}]


def from_scratch(engine: LosslessEngine, budget: int) -> list[Message]:
    """The view as a fresh assembly of the engine's active context gives it."""
    items = engine._context.items
    return assemble_view(
        system=engine._system,
        items=items,
        budget=budget if budget > 0 else engine.threshold_tokens,
        split=engine._split(items),
        model=engine.model or None,
    ).messages


operation = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 60)),
    st.tuples(st.just("request"), st.sampled_from([0, 0, 0, 900, 2_500]), st.just(0)),
    st.tuples(st.just("compress"), st.booleans(), st.just(0)),
    st.tuples(st.just("resume"), st.just(0), st.just(0)),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=st.lists(operation, min_size=5, max_size=40))
def test_the_kept_view_is_the_view_a_fresh_assembly_gives(
    tmp_path: Path, operations: list[tuple[str, Any, int]]
) -> None:
    store = SQLiteStore(tmp_path / f"view-{abs(hash(str(operations)))}.db")
    engine = LosslessEngine(context_length=3_000, store=store)
    engine.on_session_start("s")
    history: list[Message] = [SYSTEM]
    for index, (kind, arg, size) in enumerate(operations):
        if kind == "append":
            history.extend(group(index, arg, size))
        elif kind == "request":
            view = engine.select_context(history, conversation_messages=history, budget_tokens=arg)
            assert view == from_scratch(engine, arg)
            assert engine._last_view_tokens == count_message_tokens(view or [], None)
        elif kind == "compress":
            engine.compress(history, force=arg)
            assert engine.current_view() == from_scratch(engine, 0)
        else:
            before = engine.current_view()
            engine = LosslessEngine(context_length=3_000, store=store)
            engine.on_session_start("s")
            # A resumed engine shows the same view, before and after it sees the history.
            assert engine.current_view() == before
            engine.select_context(history, conversation_messages=history)
            assert engine.current_view() == from_scratch(engine, 0)
    store.close()


def chat(n: int) -> list[Message]:
    history = [SYSTEM]
    for i in range(n):
        history += group(i, i % 3, 20)
    return history


def request_points(history: list[Message]) -> list[int]:
    """Lengths of the history at which an agent sends a request: after a user turn or results."""
    return [
        end
        for end in range(2, len(history) + 1)
        if history[end - 1]["role"] in ("user", "tool")
        and (end == len(history) or history[end]["role"] != "tool")
    ]


def test_requests_that_only_append_never_reassemble_the_view(tmp_path: Path) -> None:
    engine = LosslessEngine(context_length=10_000_000, store=tmp_path / "a.db")
    engine.on_session_start("s")
    full = chat(300)
    history = full[:2]
    engine.select_context(history, conversation_messages=history)
    rebuilds = engine._view.rebuilds
    for end in request_points(full)[1:]:
        history = full[:end]
        view = engine.select_context(history, conversation_messages=history)
        assert view == history
    assert engine._view.rebuilds == rebuilds
    engine.close()


def test_the_host_checks_only_what_the_view_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[int] = []
    real = host_requests.validate_messages

    def counting(messages: list[Message]) -> None:
        checked.append(len(messages))
        real(messages)

    monkeypatch.setattr(host_requests, "validate_messages", counting)
    engine = LosslessEngine(context_length=10_000_000, store=tmp_path / "a.db")
    host = ContextHost(engine, model="gpt-4o", context_length=10_000_000)
    host.start_session("s")
    full = chat(200)
    sizes = []
    for end in request_points(full):
        checked.clear()
        request = host.prepare_request(full[:end])
        assert request == full[:end]
        sizes.append(sum(checked))
    # Each request validates the messages it added since the last request (a
    # few), never the history again.
    assert max(sizes[1:]) <= 4


class RecordingStore:
    """A SQLite store that records what every compaction step asked it to change."""

    def __init__(self, path: Path) -> None:
        self.inner = SQLiteStore(path)
        self.steps: list[Any] = []
        self.context_reads = 0

    def commit_compaction(self, conversation_id: str, summaries: Any, new_context: Any) -> Any:
        self.steps.append(new_context)
        return self.inner.commit_compaction(conversation_id, summaries, new_context)

    def load_context(self, conversation_id: str) -> Any:
        self.context_reads += 1
        return self.inner.load_context(conversation_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_compaction_step_changes_only_the_run_it_summarises(tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "a.db")
    engine = LosslessEngine(context_length=8_000, store=store)  # type: ignore[arg-type]
    engine.on_session_start("s")
    history = chat(600)
    engine.on_turn_complete(history)
    reads = store.context_reads
    view = engine.compress(history, force=True)
    assert engine.last_compression is not None and engine.last_compression.written
    # Every step is a splice of the items it summarised; the context is never
    # rewritten whole, nor read back, by a compaction on SQLite.
    assert store.steps and all(isinstance(step, ContextSplice) for step in store.steps)
    written = engine.last_compression.written
    assert [step.count for step in store.steps] == [len(r.source_ids) for r in written]
    assert store.context_reads == reads
    # The store holds exactly the context the engine mirrors.
    resumed = LosslessEngine(context_length=8_000, store=store)  # type: ignore[arg-type]
    resumed.on_session_start("s")
    assert resumed.current_view() == view
    store.inner.close()


def test_a_conflicting_writer_stops_the_compaction_and_the_engine_adopts_the_store(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    first = LosslessEngine(context_length=6_000, store=path)
    second = LosslessEngine(context_length=6_000, store=path)
    history = chat(200)
    for engine in (first, second):
        engine.on_session_start("shared")
        engine.on_turn_complete(history)
    first.compress(history, force=True)
    # The second engine's mirror is stale: its first splice no longer matches.
    second.compress(history, force=True)
    assert second.last_compression is not None
    assert (second.last_compression.stopped or "").startswith("conflict")
    assert second.current_view() == first.current_view()
    first.close()
    second.close()


class ReadCountingStore(RecordingStore):
    """Also counts reads of stored messages (the slow path matches against them)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.messages_read = 0

    def get_messages(self, conversation_id: str, seq_start: int = 0, seq_end: Any = None) -> Any:
        rows = self.inner.get_messages(conversation_id, seq_start, seq_end)
        self.messages_read += len(rows)
        return rows


def test_a_host_that_adopts_the_compacted_view_is_recognised_without_reading_the_archive(
    tmp_path: Path,
) -> None:
    store = ReadCountingStore(tmp_path / "a.db")
    engine = LosslessEngine(context_length=4_000, store=store)  # type: ignore[arg-type]
    host = ContextHost(engine, model="gpt-4o", context_length=4_000)
    host.start_session("s")
    full = chat(400)
    history: list[Message] = []
    fed = 0
    for end in request_points(full):
        history = history + full[fed:end]  # the agent appends to what the host gave back
        fed = end
        host.prepare_request(history)
        history = host.history
        host.record_response({"prompt_tokens": 0, "completion_tokens": 1})
    assert host.compactions >= 3
    assert store.messages_read == 0
    assert engine.conversation_id is not None
    assert store.message_count(engine.conversation_id) == len(full)
    store.inner.close()


def test_a_view_over_budget_leaves_out_unsummarised_messages_before_summaries(
    tmp_path: Path,
) -> None:
    engine = LosslessEngine(context_length=6_000, store=tmp_path / "a.db", max_passes=3)
    engine.on_session_start("s")
    history = chat(300)
    engine.on_turn_complete(history)
    view = engine.compress(history, force=True)
    assert engine.last_compression is not None
    assert engine.last_compression.stopped == "max_passes"
    block = view[1]["content"]
    # The summaries written are all shown; the note about what is left out
    # comes after them, where the left-out messages stood.
    for record in engine.last_compression.written:
        if record.id in engine._context:
            assert f"[summary {record.id}" in block
    assert block.index("[summary ") < block.index("[Not shown for space")
    assert count_message_tokens(view, None) <= engine.threshold_tokens
