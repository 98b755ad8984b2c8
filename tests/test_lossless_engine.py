"""The lossless engine "lcm": ingest, the view, compaction into a summary DAG, large contents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contextengine.engines.lossless import LosslessEngine
from contextengine.engines.lossless.assemble import REFERENCE_CLOSE, is_reference_message
from contextengine.engines.lossless.compaction import FALLBACK_PREFIX, strip_covers
from contextengine.errors import SummarizerAuthError, SummarizerTransientError
from contextengine.store import SQLiteStore
from contextengine.summarizers import SummaryRequest
from contextengine.tokens import count_message_tokens, count_tokens

Message = dict[str, Any]
SYSTEM: Message = {"role": "system", "content": "You are a careful coding agent. Be concise."}


def turn(i: int, filler: int = 40) -> list[Message]:
    """One agent turn: a request, a tool call, its result, an answer; with a unique fact."""
    call_id = f"call_{i:04d}"
    return [
        {
            "role": "user",
            "content": f"Step {i}: check the ledger entry ZEBRA-{i:04d}. " + "pad " * 20,
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "read_ledger", "arguments": json.dumps({"entry": i})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": f"entry {i}: " + "ok " * filler},
        {"role": "assistant", "content": f"Entry ZEBRA-{i:04d} balances at {i * 13} credits."},
    ]


def conversation(turns: int, filler: int = 40) -> list[Message]:
    messages = [SYSTEM]
    for i in range(turns):
        messages += turn(i, filler)
    return messages


def requests(history: list[Message]) -> Iterator[list[Message]]:
    """The host's history at each request: after every user message and every tool result."""
    for end in range(2, len(history) + 1):
        if history[end - 1]["role"] in ("user", "tool"):
            yield history[:end]


def assert_pairs_intact(view: list[Message]) -> None:
    """Every tool call is answered right after its assistant message; every result has a call."""
    index = 0
    while index < len(view):
        message = view[index]
        if message["role"] == "tool":
            raise AssertionError(f"tool result without its call at {index}")
        calls = [call["id"] for call in message.get("tool_calls") or []]
        index += 1
        results = []
        while index < len(view) and view[index]["role"] == "tool":
            results.append(view[index]["tool_call_id"])
            index += 1
        assert sorted(results) == sorted(calls), f"calls {calls} answered by {results}"


def assert_valid(view: list[Message]) -> None:
    try:
        from contextengine.messages import validate_messages
    except ImportError:  # messages.py is written in parallel; the pair check below still runs
        validate_messages = None
    if validate_messages is not None:
        validate_messages(view)
    assert all(m["role"] in ("system", "user", "assistant", "tool") for m in view)
    assert_pairs_intact(view)


class Host:
    """A generic host loop: its history grows by the new messages of the recorded session.

    With ``replace_history`` it adopts the list ``compress`` returns as its
    history, as ``ContextHost.history`` does.
    """

    def __init__(self, engine: LosslessEngine, *, replace_history: bool = False) -> None:
        self.engine = engine
        self.replace_history = replace_history
        self.history: list[Message] = []
        self.fed = 0

    def request(self, recorded: list[Message], budget_tokens: int = 0) -> list[Message]:
        self.history = self.history + recorded[self.fed :]
        self.fed = len(recorded)
        if self.engine.should_compress_preflight(self.history):
            self.compact()
        view = self.engine.select_context(
            list(self.history), conversation_messages=self.history, budget_tokens=budget_tokens
        )
        assert view is not None
        return view

    def compact(self) -> list[Message]:
        compacted = self.engine.compress(self.history)
        if self.replace_history:
            self.history = list(compacted)
        return compacted

    def after_response(self) -> list[Message] | None:
        compacted = self.compact() if self.engine.should_compress() else None
        self.engine.on_turn_complete(self.history)
        return compacted

    def finish(self, recorded: list[Message]) -> None:
        self.history = self.history + recorded[self.fed :]
        self.fed = len(recorded)
        self.engine.on_turn_complete(self.history)


def drive(engine: LosslessEngine, history: list[Message], *, replace_history: bool = False) -> None:
    host = Host(engine, replace_history=replace_history)
    for target in requests(history):
        host.request(target)
        host.after_response()
    host.finish(history)


def make_engine(**kwargs: Any) -> LosslessEngine:
    kwargs.setdefault("context_length", 4_000)
    kwargs.setdefault("store", ":memory:")
    return LosslessEngine(**kwargs)


@pytest.fixture
def engine() -> Iterator[LosslessEngine]:
    eng = make_engine()
    eng.on_session_start("session-1")
    yield eng
    eng.close()


# ---------------------------------------------------------------- ingest


class CountingStore:
    """A Store that delegates to SQLite and records how many messages each append was given."""

    def __init__(self) -> None:
        self.inner = SQLiteStore(":memory:")
        self.appended: list[int] = []

    def append_messages(self, conversation_id: str, messages: Any, **kwargs: Any) -> Any:
        self.appended.append(len(messages))
        return self.inner.append_messages(conversation_id, messages, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize(
    "second_pass",
    [
        pytest.param("select_context", id="select-again"),
        pytest.param("on_turn_complete", id="turn-complete-again"),
        pytest.param("resume", id="resumed-engine"),
    ],
)
def test_ingest_is_idempotent(second_pass: str) -> None:
    store = SQLiteStore(":memory:")
    history = conversation(6)
    first = make_engine(store=store)
    first.on_session_start("idem")
    first.select_context(history, conversation_messages=history)
    conversation_id = first.conversation_id
    assert conversation_id is not None
    if second_pass == "select_context":
        first.select_context(history, conversation_messages=history)
    elif second_pass == "on_turn_complete":
        first.on_turn_complete(history)
    else:
        again = make_engine(store=store)
        again.on_session_start("idem")
        again.select_context(history, conversation_messages=history)
        assert again.conversation_id == conversation_id
    assert store.message_count(conversation_id) == len(history)
    store.close()


def test_ingest_work_grows_with_new_messages_only() -> None:
    store = CountingStore()
    eng = make_engine(store=store, context_length=1_000_000)
    eng.on_session_start("incremental")
    history = conversation(30)
    for target in requests(history):
        eng.select_context(target, conversation_messages=target)
        eng.on_turn_complete(target)
    eng.on_turn_complete(history)
    # Every message is handed to the store exactly once, not once per request.
    assert sum(store.appended) == len(history)
    store.inner.close()


def test_history_replaced_by_the_view_is_not_stored_twice() -> None:
    eng = make_engine(context_length=3_000)
    eng.on_session_start("replaced")
    history = conversation(25)
    drive(eng, history, replace_history=True)
    assert eng.compression_count >= 1
    assert eng.conversation_id is not None
    assert eng.store.message_count(eng.conversation_id) == len(history)
    eng.close()


def test_incoming_message_is_stored_once() -> None:
    eng = make_engine()
    history = conversation(2)
    incoming: Message = {"role": "user", "content": "And what about ZEBRA-9999?"}
    view = eng.select_context(history, conversation_messages=history, incoming_message=incoming)
    assert view is not None and view[-1] == incoming
    eng.select_context([*history, incoming], conversation_messages=[*history, incoming])
    assert eng.conversation_id is not None
    assert eng.store.message_count(eng.conversation_id) == len(history) + 1
    eng.close()


# ---------------------------------------------------------------- the view


@pytest.mark.parametrize(
    "replace_history",
    [pytest.param(False, id="host-keeps-full-history"), pytest.param(True, id="host-keeps-view")],
)
def test_every_view_is_valid_and_within_budget(replace_history: bool) -> None:
    eng = make_engine(context_length=3_000)
    eng.on_session_start("budget")
    host = Host(eng, replace_history=replace_history)
    history = conversation(40)
    for target in requests(history):
        view = host.request(target)
        assert_valid(view)
        assert view[0] == SYSTEM
        assert count_message_tokens(view) <= eng.threshold_tokens
        latest_user = next(m for m in reversed(target) if m["role"] == "user")
        assert latest_user in view
        compacted = host.after_response()
        if compacted is not None:
            assert_valid(compacted)
            assert count_message_tokens(compacted) <= eng.threshold_tokens
    host.finish(history)
    assert eng.compression_count >= 2
    assert eng.conversation_id is not None
    assert eng.store.message_count(eng.conversation_id) == len(history)
    eng.close()


def test_view_fits_an_explicit_smaller_budget(engine: LosslessEngine) -> None:
    history = conversation(12)
    view = engine.select_context(history, conversation_messages=history, budget_tokens=1_200)
    assert view is not None
    assert_valid(view)
    assert count_message_tokens(view) <= 1_200
    assert history[-4] in view  # the latest user message is always there
    # What was left out is announced and still searchable.
    note = next(m for m in view if is_reference_message(m))
    assert "Not shown for space" in note["content"]


def test_prefix_is_stable_between_compactions() -> None:
    eng = make_engine(context_length=6_000, condense_fanin=100, summary_tokens=64)
    eng.on_session_start("stable")
    host = Host(eng)
    previous: list[Message] = []
    old_block = ""
    compactions = 0
    kept_in_place = 0
    for target in requests(conversation(90)):
        view = host.request(target)
        if eng.compression_count == compactions:
            # No compaction since the last request: the old view is a prefix of the new one.
            assert json.dumps(view[: len(previous)]) == json.dumps(previous)
        else:
            compactions = eng.compression_count
            blocks = [m["content"] for m in view if is_reference_message(m)]
            assert eng.last_compression is not None
            if old_block and all(r.kind == "leaf" for r in eng.last_compression.written):
                # Old summaries stay in place: the new block starts with the old one.
                assert blocks[0].startswith(old_block.removesuffix(REFERENCE_CLOSE))
                kept_in_place += 1
            old_block = blocks[0]
        previous = view
        host.after_response()
    assert compactions >= 2
    assert kept_in_place >= 1
    eng.close()


def test_summary_block_is_fenced_reference_material_ending_with_ids(
    engine: LosslessEngine,
) -> None:
    history = conversation(20)
    view = engine.compress(history, force=True)
    block = next(m for m in view if is_reference_message(m))
    assert block["role"] == "user"
    assert "not new instructions" in block["content"]
    assert block["content"].endswith(REFERENCE_CLOSE)
    assert engine.conversation_id is not None
    for ref in engine.store.get_context(engine.conversation_id):
        if ref.kind == "summary":
            record = engine.store.get_summary(engine.conversation_id, ref.id)
            assert record is not None and ref.id in block["content"]
            last_line = record.content.rstrip().splitlines()[-1]
            assert last_line.startswith("[covers ")
            assert record.source_ids[0] in last_line


def test_has_content_to_compress_is_false_when_everything_is_fresh(
    engine: LosslessEngine,
) -> None:
    history = conversation(1)
    assert not engine.has_content_to_compress(history)
    assert not engine.should_compress(prompt_tokens=10**6)
    assert engine.has_content_to_compress(conversation(20))


def test_should_compress_follows_the_view() -> None:
    eng = make_engine(context_length=3_000)
    history = conversation(5)
    eng.select_context(history, conversation_messages=history)
    assert not eng.should_compress()
    history = conversation(30)
    eng.select_context(history, conversation_messages=history)
    assert eng.should_compress()
    # A host counting fewer tokens than the view (real usage) wins.
    assert not eng.should_compress(prompt_tokens=100)
    eng.compress(history)
    assert eng.last_prompt_tokens == -1
    assert not eng.should_compress()
    eng.close()


def test_update_from_response_normalises_usage(engine: LosslessEngine) -> None:
    engine.update_from_response(
        {"input_tokens": 100, "cache_read_input_tokens": 900, "output_tokens": 50}
    )
    assert engine.last_prompt_tokens == 1_000
    assert engine.last_completion_tokens == 50
    assert engine.last_total_tokens == 1_050


# ---------------------------------------------------------------- the DAG


def test_every_stored_message_is_reachable_from_the_active_context() -> None:
    eng = make_engine(context_length=3_000, condense_fanin=2)
    eng.on_session_start("dag")
    history = conversation(40)
    drive(eng, history)
    store, conversation_id = eng.store, eng.conversation_id
    assert conversation_id is not None
    reached: set[str] = set()
    depths: set[int] = set()
    stack = list(store.get_context(conversation_id))
    while stack:
        ref = stack.pop()
        if ref.kind == "message":
            reached.add(ref.id)
            continue
        record = store.get_summary(conversation_id, ref.id)
        assert record is not None
        depths.add(record.depth)
        for source in record.source_ids:
            assert store.parent_summary(conversation_id, source) == record.id
            kind = "message" if record.kind == "leaf" else "summary"
            stack.append(type(ref)(kind=kind, id=source))
    stored = store.get_messages(conversation_id)
    expected = {m.id for m in stored if not (m.seq == 0 and m.role == "system")}
    assert reached == expected
    assert max(depths) >= 1  # condensation happened
    eng.close()


# ---------------------------------------------------------------- escalation ladder


class LongerSummarizer:
    """Always answers with more text than it was given."""

    def __init__(self) -> None:
        self.levels: list[str] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.levels.append(request.metadata["level"])
        return "very long summary " * 5_000


class TerseOnAggressive:
    """Too long at the normal level, fine when asked to be aggressive."""

    def __init__(self) -> None:
        self.levels: list[str] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.levels.append(request.metadata["level"])
        return "word " * 5_000 if request.metadata["level"] == "normal" else "Ledger checked."


class FailingSummarizer:
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        self.requests.append(request)
        raise self.error


def summaries_in_context(eng: LosslessEngine) -> list[Any]:
    assert eng.conversation_id is not None
    refs = eng.store.get_context(eng.conversation_id)
    found = [eng.store.get_summary(eng.conversation_id, r.id) for r in refs if r.kind == "summary"]
    return [record for record in found if record is not None]


def test_longer_result_falls_back_to_truncation_strictly_smaller() -> None:
    summarizer = LongerSummarizer()
    eng = make_engine(context_length=3_000, summarizer=summarizer, condense_fanin=100)
    view = eng.compress(conversation(20), force=True)
    assert_valid(view)
    records = summaries_in_context(eng)
    assert records and all(r.fallback for r in records)
    assert all(r.content.startswith(FALLBACK_PREFIX.strip()) for r in records)
    assert eng.conversation_id is not None
    written = eng.last_compression.written if eng.last_compression else []
    for record in written:
        if record.kind == "leaf":
            messages = [eng.store.get_message(eng.conversation_id, s) for s in record.source_ids]
            covered = sum(m.token_count for m in messages if m is not None)
        else:
            children = [eng.store.get_summary(eng.conversation_id, s) for s in record.source_ids]
            covered = sum(count_tokens(strip_covers(c.content)) for c in children if c)
        assert count_tokens(strip_covers(record.content)) < covered
    # Normal, then aggressive, then truncation; a summariser that cannot write a
    # short enough summary is not asked again in this compaction.
    assert summarizer.levels == ["normal", "aggressive"]
    assert len(written) > 1
    assert eng.last_compression is not None and eng.last_compression.fallback_used
    assert eng.last_compression.cause == "over_budget"
    eng.close()


def test_aggressive_level_is_accepted_when_it_is_smaller() -> None:
    summarizer = TerseOnAggressive()
    eng = make_engine(context_length=3_000, summarizer=summarizer, condense_fanin=100)
    eng.compress(conversation(20), force=True)
    records = summaries_in_context(eng)
    assert records and not any(r.fallback for r in records)
    assert all(r.content.startswith("Ledger checked.") for r in records)
    assert "aggressive" in summarizer.levels
    eng.close()


def test_transient_failure_gives_flagged_fallback_summaries() -> None:
    summarizer = FailingSummarizer(SummarizerTransientError("HTTP 503"))
    eng = make_engine(context_length=3_000, summarizer=summarizer, condense_fanin=100)
    history = conversation(20)
    view = eng.compress(history, force=True)
    assert_valid(view)
    records = summaries_in_context(eng)
    assert records and all(r.fallback for r in records)
    # A summariser that is down is asked once per compaction, not once per summary.
    assert eng.last_compression is not None
    assert len(eng.last_compression.written) > 1 and summarizer.calls == 1
    assert eng.last_compression.cause == "server_error"
    # Nothing is lost: the facts of the summarised turns are still searchable.
    result = json.loads(eng.handle_tool_call("lcm_grep", {"query": '"ZEBRA-0001"'}))
    top = json.loads(eng.handle_tool_call("lcm_expand", {"id": result["results"][0]["id"]}))
    assert "ZEBRA-0001" in json.dumps(top)
    eng.close()


def test_auth_failure_persists_nothing() -> None:
    summarizer = FailingSummarizer(SummarizerAuthError("401 invalid api key"))
    eng = make_engine(context_length=3_000, summarizer=summarizer)
    eng.on_session_start("auth")
    history = conversation(20)
    before = eng.select_context(history, conversation_messages=history)
    assert eng.conversation_id is not None
    refs_before = eng.store.get_context(eng.conversation_id)
    after = eng.compress(history, force=True)
    assert summarizer.calls == 1
    assert eng.store.get_context(eng.conversation_id) == refs_before
    assert all(ref.kind == "message" for ref in refs_before)
    assert after == before
    assert eng.compression_count == 0
    assert eng.last_compression is not None and eng.last_compression.aborted
    eng.close()


def test_secrets_are_redacted_before_reaching_the_summarizer() -> None:
    summarizer = FailingSummarizer(SummarizerTransientError("down"))
    eng = make_engine(context_length=3_000, summarizer=summarizer)
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    history = conversation(20)
    history[1] = {"role": "user", "content": f"use the key {secret} for ZEBRA-0000"}
    eng.compress(history, force=True)
    sent = json.dumps([r.messages for r in summarizer.requests]) + "".join(
        r.prompt for r in summarizer.requests
    )
    assert "ZEBRA-0000" in sent
    assert secret not in sent
    eng.close()


class TickingClock:
    """A clock that advances 10 s every time the summariser is called."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        self.now += 10.0
        return "short"


@pytest.mark.parametrize(
    ("options", "stopped", "written"),
    [
        pytest.param({"compaction_deadline_s": 25.0}, "deadline", 3, id="deadline"),
        pytest.param({"max_passes": 2}, "max_passes", 2, id="pass-count"),
    ],
)
def test_compaction_is_bounded(options: dict[str, Any], stopped: str, written: int) -> None:
    clock = TickingClock()
    eng = make_engine(
        context_length=3_000, summarizer=clock, clock=clock, condense_fanin=100, **options
    )
    view = eng.compress(conversation(40), force=True)
    assert_valid(view)
    assert eng.last_compression is not None
    assert eng.last_compression.stopped == stopped
    assert len(eng.last_compression.written) == written
    eng.close()


# ---------------------------------------------------------------- large content


def test_large_tool_result_round_trips_through_lcm_expand(engine: LosslessEngine) -> None:
    big = "\n".join(f"line {n}: value={n * n} status=ok" for n in range(4_000))
    history = [
        SYSTEM,
        {"role": "user", "content": "dump the table"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "dump", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": big},
        {"role": "assistant", "content": "Dumped."},
    ]
    view = engine.select_context(history, conversation_messages=history)
    assert view is not None
    assert_valid(view)
    reference = view[3]["content"]
    assert reference.startswith("[lcm large content ")
    assert "line 0: value=0" in reference  # the digest shows the first lines
    assert count_message_tokens(view) < 1_000
    content_id = reference.removeprefix("[lcm large content ").split(":")[0]
    described = json.loads(engine.handle_tool_call("lcm_describe", {"id": content_id}))
    assert described["kind"] == "large_content"
    assert described["chars"] == len(big)
    pieces: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = json.loads(
            engine.handle_tool_call("lcm_expand", {"id": content_id, "offset": offset})
        )
        pieces.append(page["content"])
        offset = page["next_offset"]
    assert "".join(pieces) == big
    assert len(pieces) > 1
    # Stored once, even when the same history comes again.
    engine.select_context(history, conversation_messages=history)
    engine.on_turn_complete(history)
    assert engine.store.stats()["large_contents"] == 1
