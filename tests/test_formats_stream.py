"""Streaming import: `iter_sessions` and `stream_session` give exactly what `load_sessions` gives.

The list importers are the reference. Every fixture of ``tests/fixtures/formats``,
the Claude Code fixtures of the replay tests, variants of the Claude Code
fixture written to provoke the streamed importer's lookahead (a tool result
written before its call, an assistant message streamed around its results,
duplicated and orphan results, a boundary without a summary), and, when
``../shared/data`` is there, the real Claude Code sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextengine.errors import FormatError
from contextengine.formats import (
    Session,
    SessionStream,
    iter_sessions,
    load_session,
    load_sessions,
    stream_session,
)

FIXTURES = Path(__file__).parent / "fixtures"
CLAUDE = FIXTURES / "formats" / "claude_code_session.jsonl"


def _same(path: Path) -> None:
    listed = load_sessions(path)
    streamed: list[tuple[SessionStream, list[dict[str, Any]]]] = []
    for stream in iter_sessions(path):
        streamed.append((stream, list(stream)))
    assert len(streamed) == len(listed)
    for session, (stream, messages) in zip(listed, streamed, strict=True):
        assert (stream.id, stream.source, stream.format) == (
            session.id,
            session.source,
            session.format,
        )
        assert messages == session.messages
        assert stream.metadata == session.metadata


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=p.name)
        for p in sorted((FIXTURES / "formats").iterdir())
        + sorted((FIXTURES / "replay").glob("*.jsonl"))
    ],
)
def test_fixture_streams_as_it_loads(path: Path) -> None:
    _same(path)


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CLAUDE.read_text(encoding="utf-8").splitlines()]


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "variant.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _at(records: list[dict[str, Any]], uuid_end: str) -> int:
    return next(i for i, r in enumerate(records) if str(r.get("uuid", "")).endswith(uuid_end))


def _drop(records: list[dict[str, Any]], uuid_end: str) -> list[dict[str, Any]]:
    """Remove one record and hang its children on its parent, so the chain holds."""
    gone = records.pop(_at(records, uuid_end))
    parent = gone.get("parentUuid") or gone.get("logicalParentUuid")
    for record in records:
        if record.get("parentUuid") == gone["uuid"]:
            record["parentUuid"] = parent
    return records


# The fixture's records (uuid ends): 003-007 one streamed reply (msg_A) calling
# toolu_A1 (005) and toolu_A2 (007); 008 answers A1 off the chain, 009 answers A2
# on it; 015 calls toolu_D1, 016 answers it; 017 is the compact boundary and 018
# its summary; 020 the last reply.


def _result_first(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The result of toolu_A2 written before the record that calls it."""
    result = records.pop(_at(records, "009"))
    records.insert(_at(records, "007"), result)
    return records


def _interleaved(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The result of toolu_A1 written between two records of the reply that calls it."""
    result = records.pop(_at(records, "008"))
    records.insert(_at(records, "005") + 1, result)
    return records


def _duplicated(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool result written twice, the second time with other text."""
    out: list[dict[str, Any]] = []
    for record in records:
        out.append(record)
        content = record.get("message", {}).get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            twin = json.loads(json.dumps(record))
            twin["uuid"] = record["uuid"] + "-twin"
            twin["message"]["content"][0]["content"] = "a second, different result"
            out.append(twin)
    return out


def _orphan(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A result on the chain that nothing called, and a call never answered."""
    at = _at(records, "016")
    orphan = json.loads(json.dumps(records[at]))
    orphan["uuid"] = "orphan-result"
    orphan["message"]["content"][0]["tool_use_id"] = "toolu_nobody"
    records[at]["parentUuid"] = orphan["uuid"]
    records.insert(at, orphan)
    last = records[_at(records, "020")]["message"]
    last["content"].append({"type": "tool_use", "id": "toolu_never", "name": "Bash", "input": {}})
    return records


def _no_summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _drop(records, "018")


def _summary_only(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _drop(records, "017")


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(_result_first, id="result-before-its-call"),
        pytest.param(_interleaved, id="result-inside-a-streamed-reply"),
        pytest.param(_duplicated, id="duplicated-results"),
        pytest.param(_orphan, id="orphan-and-unanswered"),
        pytest.param(_no_summary, id="boundary-without-summary"),
        pytest.param(_summary_only, id="summary-without-boundary"),
    ],
)
def test_claude_code_variants_stream_as_they_load(tmp_path: Path, variant: Any) -> None:
    path = _write(tmp_path, variant(_records()))
    assert load_session(path).metadata["skipped_branch_records"] == 2  # the chain held
    _same(path)


def test_the_variants_reach_the_cases_they_name(tmp_path: Path) -> None:
    orphan = load_session(_write(tmp_path, _orphan(_records()))).metadata
    assert (orphan["orphan_tool_results"], orphan["unanswered_tool_calls"]) == (1, 1)
    duplicated = load_session(_write(tmp_path, _duplicated(_records()))).metadata
    assert duplicated["orphan_tool_results"] == 3
    (lone,) = load_session(_write(tmp_path, _no_summary(_records()))).metadata["compactions"]
    assert lone["summary"] is None and lone["trigger"] == "auto"
    (summary,) = load_session(_write(tmp_path, _summary_only(_records()))).metadata["compactions"]
    assert summary["summary"] and summary["trigger"] is None


def test_a_compaction_is_known_before_the_message_at_its_index() -> None:
    stream = stream_session(CLAUDE)
    seen: list[int] = []
    for index, _ in enumerate(stream):
        seen.extend(c["index"] for c in stream.metadata["compactions"] if c["index"] == index)
    assert seen == [c["index"] for c in load_session(CLAUDE).metadata["compactions"]]


def test_recorded_model_reads_ahead_and_keeps_what_it_read() -> None:
    stream = stream_session(CLAUDE)
    assert stream.recorded_model() == "claude-opus-4-6"
    assert list(stream) == load_session(CLAUDE).messages


def test_to_session_is_the_loaded_session() -> None:
    session = stream_session(CLAUDE).to_session()
    assert isinstance(session, Session)
    assert session == load_session(CLAUDE)


def test_a_bad_record_fails_before_the_first_message(tmp_path: Path) -> None:
    records = _records()
    records.append({"uuid": "no-type"})
    with pytest.raises(FormatError, match="line 23"):
        stream_session(_write(tmp_path, records))


def test_stream_session_refuses_a_file_of_several_sessions() -> None:
    with pytest.raises(FormatError, match="2 sessions"):
        stream_session(FIXTURES / "formats" / "openai_sessions.jsonl")


@pytest.mark.shared_data
def test_real_claude_code_sessions_stream_as_they_load(shared_data: Path) -> None:
    files = sorted((shared_data / "spotter" / "transcripts").rglob("*.jsonl"))
    if not files:
        pytest.skip("no Claude Code transcripts under shared data")
    for path in files:
        _same(path)
