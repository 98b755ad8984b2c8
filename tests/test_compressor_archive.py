"""The recoverable compressor: with ``archive=``, nothing it summarises or prunes is lost.

The compressor stores what leaves the context verbatim in the lossless
engine's archive format, names the ids in its summaries and descriptors, and
offers ``lcm_grep`` / ``lcm_describe`` / ``lcm_expand`` over them. Without an
archive it is the compressor as before; an archive that fails is dropped with
a warning and the conversation goes on.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compressor_conversations import (
    RecordingSummarizer,
    assistant,
    call,
    coding_session,
    result,
    system,
    user,
)
from contextengine import ContextCompressor, ContextHost, HostEvent, SQLiteStore, load_engine
from contextengine.engines.compressor.prune import DESCRIPTOR_PREFIX
from contextengine.engines.compressor.summary import is_summary_message, split_summary
from contextengine.store import Store
from pg_support import pg_store

Message = dict[str, Any]
SECRET_FACT = "The staging database password rotation happens every 41 days at 03:15 UTC."


def compressor(archive: Any, **kwargs: Any) -> ContextCompressor:
    options: dict[str, Any] = {
        "context_length": 8_000,
        "model": "gpt-4o",
        "protect_first_n": 1,
        "protect_last_n": 2,
        "summarizer": RecordingSummarizer("## Goal\nFix the failing test."),
    }
    return ContextCompressor(archive=archive, **{**options, **kwargs})


def without_archive_like(engine: ContextCompressor) -> ContextCompressor:
    """Today's compressor at ``engine``'s settings: the archive chose its defaults when built."""
    return compressor(
        None, threshold_percent=engine.threshold_percent, target_percent=engine.target_percent
    )


def chat_with_a_fact(turns: int = 14) -> list[Message]:
    """A coding session whose early user message holds a fact no summary keeps."""
    messages = coding_session(turns, output_chars=2_500, chatter=400)
    messages.insert(2, user(f"Remember this for later: {SECRET_FACT}"))
    messages.insert(3, assistant("Noted."))
    return messages


def tool(engine: ContextCompressor, name: str, **args: Any) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(engine.handle_tool_call(name, args))
    return answer


def summary_text(messages: list[Message]) -> str:
    found = [split_summary(m).text for m in messages if is_summary_message(m)]
    assert len(found) == 1
    return found[0]


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "archive.db"


@pytest.fixture(params=["sqlite", "postgres"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """An archive spec per store: a SQLite path, or one PostgreSQL schema (tests/pg_support.py)."""
    if request.param == "sqlite":
        yield lambda: tmp_path / "archive.db"
        return
    with pg_store() as store:
        yield lambda: store


def test_a_summarised_fact_is_found_and_expanded_verbatim(
    store_factory: Callable[[], Any],
) -> None:
    engine = compressor(store_factory())
    engine.on_session_start("session-a")
    messages = chat_with_a_fact()
    output = engine.compress(messages, force=True)
    report = engine.last_compression
    assert report is not None and report.reason == "summarized"
    assert not any(SECRET_FACT in json.dumps(m) for m in output)

    hits = tool(engine, "lcm_grep", query="password rotation")["results"]
    assert hits and hits[0]["kind"] == "message"
    assert hits[0]["summary_id"] == report.summary_id
    expanded = tool(engine, "lcm_expand", id=hits[0]["id"])
    assert expanded["content"] == f"Remember this for later: {SECRET_FACT}"


def test_the_summary_names_the_archive_summary_that_reopens_it(sqlite_path: Path) -> None:
    engine = compressor(sqlite_path)
    output = engine.compress(chat_with_a_fact(), force=True)
    report = engine.last_compression
    assert report is not None and report.summary_id is not None
    text = summary_text(output)
    assert f"lcm_expand {report.summary_id}" in text

    described = tool(engine, "lcm_describe", id=report.summary_id)
    assert described["kind"] == "summary"
    assert described["source_count"] == report.summarized_messages
    reopened = tool(engine, "lcm_expand", id=report.summary_id)
    assert any(SECRET_FACT in item["content"] for item in reopened["items"])


def test_descriptors_name_the_id_that_reopens_the_output(sqlite_path: Path) -> None:
    # A big target: pass 1 (pruning) alone is enough, no summary.
    engine = compressor(sqlite_path, context_length=32_000, target_percent=1.0)
    messages = coding_session(10, output_chars=2_500)
    output = engine.compress(messages, force=True)
    assert engine.last_compression is not None and engine.last_compression.reason == "pruned"
    descriptors = [
        m["content"]
        for m in output
        if m.get("role") == "tool" and str(m.get("content")).startswith(DESCRIPTOR_PREFIX)
    ]
    assert descriptors
    for descriptor in descriptors:
        found = re.search(r"— lcm_expand (\S+)\]$", descriptor)
        assert found, descriptor
        original = next(
            m for m in messages if m.get("tool_call_id") == _call_id_of(output, descriptor)
        )
        assert tool(engine, "lcm_expand", id=found.group(1))["content"] == original["content"]


def _call_id_of(messages: list[Message], content: str) -> str:
    return str(next(m["tool_call_id"] for m in messages if m.get("content") == content))


def test_the_same_message_always_gets_the_same_descriptor(sqlite_path: Path) -> None:
    # Prompt caching: a second compaction of the same history prunes it identically.
    messages = coding_session(10, output_chars=2_500)
    first = compressor(sqlite_path, context_length=32_000, target_percent=1.0)
    first.on_session_start("cache")
    again = compressor(sqlite_path, context_length=32_000, target_percent=1.0)
    again.on_session_start("cache")
    assert first.compress(messages, force=True) == again.compress(messages, force=True)


def test_a_second_compaction_archives_only_what_is_new(sqlite_path: Path) -> None:
    engine = compressor(sqlite_path)
    engine.on_session_start("grow")
    messages = chat_with_a_fact()
    output = engine.compress(messages, force=True)
    store = SQLiteStore(sqlite_path)
    conversation = store.open_conversation("grow")
    stored = store.message_count(conversation)
    assert stored == len(messages)

    grown = [*output, user("One more thing: rename module_3."), assistant("Renamed.")]
    first_summary = engine.last_compression.summary_id  # type: ignore[union-attr]
    summarizer = engine.summarizer
    assert isinstance(summarizer, RecordingSummarizer)
    second = engine.compress(grown, force=True, keep_last=2)
    # The summariser gets the previous summary without its archive line: the ids are ours.
    previous = summarizer.requests[-1].previous_summary
    assert "Fix the failing test." in previous and "lcm_expand" not in previous
    assert store.message_count(conversation) == stored + 2
    # The second summary names the first, which still reopens the fact.
    report = engine.last_compression
    assert report is not None and report.summary_id is not None
    text = summary_text(second)
    assert f"lcm_expand {report.summary_id}" in text
    assert f"earlier summaries: {first_summary}" in text
    assert tool(engine, "lcm_grep", query="password rotation")["results"]
    store.close()


def test_sessions_of_one_archive_cannot_see_each_other(store_factory: Callable[[], Any]) -> None:
    alice = compressor(store_factory())
    alice.on_session_start("alice")
    alice.compress(chat_with_a_fact(), force=True)
    bob = compressor(store_factory())
    bob.on_session_start("bob")
    bob.compress(coding_session(14, output_chars=2_500, chatter=400), force=True)

    assert tool(alice, "lcm_grep", query="password rotation")["results"]
    assert tool(bob, "lcm_grep", query="password rotation")["results"] == []
    alice_id = tool(alice, "lcm_grep", query="password rotation")["results"][0]["id"]
    assert "unknown id" in tool(bob, "lcm_expand", id=alice_id)["error"]
    assert "unknown id" in tool(bob, "lcm_describe", id=alice.last_compression.summary_id)["error"]  # type: ignore[union-attr]


def test_a_resumed_session_reopens_what_an_earlier_process_archived(sqlite_path: Path) -> None:
    first = compressor(sqlite_path)
    first.on_session_start("resume-me")
    output = first.compress(chat_with_a_fact(), force=True)
    first.close()

    later = compressor(sqlite_path)
    later.on_session_start("resume-me")
    assert tool(later, "lcm_grep", query="password rotation")["results"]
    # Handing the compacted history back stores nothing twice.
    later.compress([*output, user("And now?"), assistant("Done.")], force=True)
    store = SQLiteStore(sqlite_path)
    rows = store.get_messages(store.open_conversation("resume-me"))
    assert sum(SECRET_FACT in json.dumps(r.message) for r in rows) == 1
    store.close()


def test_secrets_are_redacted_at_rest_only_when_asked(sqlite_path: Path) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    messages = chat_with_a_fact()
    messages.insert(4, user(f"My key is {secret}, keep it safe."))
    messages.insert(5, assistant("Noted."))
    verbatim = compressor(sqlite_path)
    verbatim.on_session_start("verbatim")
    verbatim.compress(messages, force=True)
    redacted = compressor(sqlite_path, redact_at_rest=True)
    redacted.on_session_start("redacted")
    redacted.compress(messages, force=True)

    def text_of(engine: ContextCompressor) -> str:
        hit = tool(engine, "lcm_grep", query="key keep safe")["results"][0]
        return str(tool(engine, "lcm_expand", id=hit["id"])["content"])

    assert secret in text_of(verbatim)
    assert secret not in text_of(redacted) and "[REDACTED" in text_of(redacted)


def test_without_an_archive_nothing_changes(sqlite_path: Path) -> None:
    messages = chat_with_a_fact()
    plain = compressor(None)
    off = compressor(False)
    assert plain.compress(messages, force=True) == off.compress(messages, force=True)
    assert plain.get_tool_schemas() == off.get_tool_schemas() == []
    assert "Unknown context engine tool" in tool(off, "lcm_grep", query="password")["error"]
    assert "lcm_expand" not in summary_text(off.compress(messages, force=True))
    assert not sqlite_path.exists()


def test_the_tools_are_offered_only_with_an_archive(sqlite_path: Path) -> None:
    names = [s["function"]["name"] for s in compressor(sqlite_path).get_tool_schemas()]
    assert names == ["lcm_grep", "lcm_describe", "lcm_expand"]


def test_archive_true_uses_the_default_archive_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTENGINE_HOME", str(tmp_path / "home"))
    engine = compressor(True)
    engine.compress(chat_with_a_fact(), force=True)
    assert (tmp_path / "home" / "archive.db").is_file()
    engine.close()


def test_archive_true_without_a_writable_data_directory_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A data directory that can never be created (its parent is a file); a
    # read-only directory would not do, since tests may run as root.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("CONTEXTENGINE_HOME", str(blocker / "home"))
    engine = compressor(True)
    assert engine.archive is None and engine.get_tool_schemas() == []
    engine.compress(chat_with_a_fact(), force=True)
    assert engine.last_compression is not None and engine.last_compression.warning is None


def test_an_unwritable_archive_falls_back_with_a_warning_event(tmp_path: Path) -> None:
    path = tmp_path / "archive.db"
    SQLiteStore(path).close()
    # Another process holds the write lock for the whole compaction.
    locker = sqlite3.connect(path, timeout=0)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        engine = compressor(SQLiteStore(path, busy_timeout_ms=50))
        events: list[Any] = []
        host = ContextHost(engine, model="gpt-4o", context_length=8_000, observers=[events.append])
        messages = chat_with_a_fact()
        output = host.compress_now(messages)
    finally:
        locker.rollback()
        locker.close()
    assert output == without_archive_like(engine).compress(messages, force=True)
    warnings = [e for e in events if isinstance(e, HostEvent) and e.kind == "engine_warning"]
    assert warnings and "archive" in str(warnings[0].message)
    assert engine.archive is None and engine.get_tool_schemas() == []


def test_the_host_offers_and_routes_the_archive_tools(sqlite_path: Path) -> None:
    engine = compressor(sqlite_path)
    host = ContextHost(engine, model="gpt-4o", context_length=8_000)
    host.start_session("routed")
    host.compress_now(chat_with_a_fact())
    names = [s["function"]["name"] for s in host.tool_schemas()]
    assert "lcm_grep" in names
    answer = json.loads(host.handle_tool_call("lcm_grep", {"query": "password rotation"}))
    assert answer["results"]


def test_load_engine_passes_the_archive_option(sqlite_path: Path) -> None:
    engine = load_engine("compressor", strict=True, archive=str(sqlite_path), context_length=8_000)
    assert isinstance(engine, ContextCompressor) and engine.archive is not None
    assert isinstance(engine.archive.store, Store)
    engine.close()


def test_a_pruned_tool_call_is_not_stored_twice(sqlite_path: Path) -> None:
    big_args = {"command": "python - <<'EOF'\n" + "print('x')\n" * 120 + "EOF"}
    messages = [
        system(),
        user("Run the script."),
        call(("c1", "bash", big_args)),
        result("c1", "x\n" * 400),
        assistant("It printed x."),
        *coding_session(8, output_chars=2_500)[1:],
    ]
    engine = compressor(sqlite_path, context_length=32_000, target_percent=1.0)
    engine.on_session_start("shrunk")
    output = engine.compress(messages, force=True)
    assert engine.last_compression is not None and engine.last_compression.shrunk_arguments
    engine.compress([*output, user("Again?"), assistant("No.")], force=True)
    store = SQLiteStore(sqlite_path)
    conversation = store.open_conversation("shrunk")
    assert store.message_count(conversation) == len(messages) + 2
    store.close()


def test_an_archive_that_cannot_be_opened_never_breaks_the_conversation(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    engine = compressor(blocker / "archive.db")  # opened on first use, which fails
    messages = chat_with_a_fact()
    output = engine.compress(messages, force=True)
    assert output == without_archive_like(engine).compress(messages, force=True)
    report = engine.last_compression
    assert report is not None and report.reason == "summarized"
    assert report.warning is not None and "archive" in report.warning
    assert engine.archive is None
    assert "Unknown context engine tool" in tool(engine, "lcm_grep", query="password")["error"]


def test_a_session_that_never_compacts_creates_no_archive(sqlite_path: Path) -> None:
    engine = compressor(sqlite_path)
    engine.on_session_start("quiet")
    assert engine.get_tool_schemas()
    engine.on_session_end("quiet", chat_with_a_fact())
    assert not sqlite_path.exists()


def test_the_end_of_a_compacted_session_is_archived_too(sqlite_path: Path) -> None:
    engine = compressor(sqlite_path)
    engine.on_session_start("ending")
    output = engine.compress(chat_with_a_fact(), force=True)
    engine.on_session_end("ending", [*output, user("Last words: ship it on Friday.")])
    assert tool(engine, "lcm_grep", query="ship Friday")["results"]


def test_an_archive_makes_the_compressor_compact_earlier_and_keep_less() -> None:
    # What a recoverable compressor removes can be searched back: its defaults
    # come from the cost-against-recall sweep (docs/design.md), from a 32K window up.
    plain = compressor(False, context_length=128_000)
    recoverable = compressor(":memory:", context_length=128_000)
    assert (plain.threshold_percent, plain.target_percent) == (0.75, 0.5)
    assert (recoverable.threshold_percent, recoverable.target_percent) == (0.6, 0.2)
    assert recoverable.threshold_tokens < plain.threshold_tokens
    assert recoverable.target_tokens < plain.target_tokens
    # A small window keeps the plain defaults: head and tail would fill 60%.
    small = compressor(":memory:", context_length=8_000)
    assert (small.threshold_percent, small.target_percent) == (0.75, 0.5)
    # ... and a model switch re-derives them; given values never move.
    small.update_model("gpt-4o", 128_000)
    assert (small.threshold_percent, small.target_percent) == (0.6, 0.2)
    assert small.threshold_tokens == recoverable.threshold_tokens
    chosen = compressor(":memory:", threshold_percent=0.8, target_percent=0.4)
    chosen.update_model("gpt-4o", 128_000)
    assert (chosen.threshold_percent, chosen.target_percent) == (0.8, 0.4)
    for engine in (recoverable, small, chosen):
        engine.close()
