"""The incremental replay gives the figures the whole-history replay gave.

The replay loop, the unmanaged baseline and the recorded trace used to
recount every request over the whole history; they now keep running sums and
take messages one at a time, from a list or a stream. The oracles below are
those whole-history computations as they were written before (token count
of the whole request, digest of every message, the prefix cache over the
whole history); every field of every request must match, except the CPU time.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from contextengine.formats import (
    Session,
    iter_sessions,
    load_session,
    load_sessions,
    stream_session,
)
from contextengine.host import ContextHost
from contextengine.replay import (
    PrefixCache,
    RequestRecord,
    Trace,
    baseline_trace,
    compare_sessions,
    message_fingerprint,
    parse_price,
    recorded_trace,
    replay_session,
)
from contextengine.replay.loop import build_engine, compare_stream
from contextengine.tokens import count_message_tokens, message_tokens

FIXTURES = Path(__file__).parent / "fixtures"
FILES = [
    FIXTURES / "replay" / "agent_session.json",
    FIXTURES / "replay" / "claude_code_compacted.jsonl",
    FIXTURES / "formats" / "claude_code_session.jsonl",
    FIXTURES / "formats" / "tau_bench.json",
]
MODEL = "gpt-4o"
Message = dict[str, Any]


def _digest(fingerprints: Sequence[str]) -> str:
    return hashlib.blake2b("|".join(fingerprints).encode(), digest_size=16).hexdigest()


def _whole_history_replay(messages: list[Message], engine: str, context_length: int) -> Trace:
    """The replay loop before it became incremental: every request recounted whole."""
    host = ContextHost(
        build_engine(engine, context_length=context_length, model=MODEL),
        model=MODEL,
        context_length=context_length,
    )
    trace = Trace(engine)
    cache = PrefixCache()
    host.start_session("replay")
    history: list[Message] = []
    tools_pending = turn_open = False
    for index, message in enumerate(messages):
        role = message.get("role")
        if role != "assistant" or not history:
            if role == "user" and turn_open:
                host.end_turn(history, None)
                turn_open = False
            tools_pending = tools_pending and role == "tool"
            history.append(message)
            continue
        if tools_pending:
            history = host.after_tool_calls(history)
        request = host.prepare_request(history)
        history = host.history
        prompt = count_message_tokens(request, MODEL)
        completion = message_tokens(message, MODEL)
        fingerprints = [message_fingerprint(m) for m in request]
        tokens = [message_tokens(m, MODEL) for m in request]
        cached = cache.observe(fingerprints, tokens, prompt)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion}
        host.record_response(usage)
        history.append(message)
        tools_pending = turn_open = bool(message.get("tool_calls"))
        if not tools_pending:
            host.end_turn(history, usage)
        trace.requests.append(
            RequestRecord(
                index=index,
                prompt_tokens=prompt,
                cached_tokens=cached,
                completion_tokens=completion,
                messages_sent=len(request),
                fingerprint=_digest(fingerprints),
                overflow=prompt > context_length,
            )
        )
    host.end_session(history)
    return trace


def _whole_history_baseline(messages: list[Message], context_length: int) -> Trace:
    fingerprints = [message_fingerprint(m) for m in messages]
    tokens = [message_tokens(m, MODEL) for m in messages]
    trace = Trace("baseline")
    cache = PrefixCache()
    for index, message in enumerate(messages):
        if index == 0 or message.get("role") != "assistant":
            continue
        full = sum(tokens[:index]) + 3
        prompt = min(full, context_length)
        trace.requests.append(
            RequestRecord(
                index=index,
                prompt_tokens=prompt,
                cached_tokens=cache.observe(fingerprints[:index], tokens[:index], prompt),
                completion_tokens=tokens[index],
                messages_sent=index,
                overflow=full > context_length,
            )
        )
    return trace


def _whole_history_recorded(session: Session) -> Trace | None:
    boundaries = sorted(
        (c for c in session.metadata.get("compactions") or [] if c.get("summary")),
        key=lambda c: int(c["index"]),
    )
    if not boundaries:
        return None
    messages = session.messages
    trace = Trace("recorded")
    cache = PrefixCache()
    current = -1
    for index, message in enumerate(messages):
        if index == 0 or message.get("role") != "assistant":
            continue
        latest = current
        while latest + 1 < len(boundaries) and int(boundaries[latest + 1]["index"]) <= index:
            latest += 1
        phases = tuple(
            str(b.get("trigger") or "auto") for b in boundaries[current + 1 : latest + 1]
        )
        current = latest
        if current < 0:
            request = list(messages[:index])
        else:
            summary = {"role": "user", "content": str(boundaries[current]["summary"])}
            request = [summary, *messages[int(boundaries[current]["index"]) : index]]
        tokens = [message_tokens(m, MODEL) for m in request]
        prompt = sum(tokens) + 3
        trace.requests.append(
            RequestRecord(
                index=index,
                prompt_tokens=prompt,
                cached_tokens=cache.observe(
                    [message_fingerprint(m) for m in request], tokens, prompt
                ),
                completion_tokens=message_tokens(message, MODEL),
                messages_sent=len(request),
                compactions=phases,
                summarizer_calls=len(phases),
            )
        )
    return trace


def _figures(trace: Trace | None, *, keep: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every field of every request but the CPU time (and the phases unless kept)."""
    assert trace is not None
    rows = []
    for record in trace.requests:
        row = dataclasses.asdict(record)
        del row["cpu_ms"]
        for key in ("compactions", "summarizer_calls"):
            if key not in keep:
                del row[key]
        rows.append(row)
    return rows


def _sessions() -> list[Any]:
    return [
        pytest.param(session, id=f"{path.name}#{n}")
        for path in FILES
        for n, session in enumerate(load_sessions(path))
    ]


@pytest.mark.parametrize("session", _sessions())
@pytest.mark.parametrize("engine", ["compressor", "lcm"])
@pytest.mark.parametrize("context_length", [1_024, 4_096, 100_000])
def test_engine_requests_are_those_of_the_whole_history_replay(
    session: Session, engine: str, context_length: int
) -> None:
    new = replay_session(session.messages, engine=engine, context_length=context_length)
    old = _whole_history_replay(session.messages, engine, context_length)
    assert _figures(new) == _figures(old)


@pytest.mark.parametrize("session", _sessions())
@pytest.mark.parametrize("context_length", [1_024, 100_000])
def test_reference_traces_are_those_of_the_whole_history(
    session: Session, context_length: int
) -> None:
    baseline = baseline_trace(session.messages, context_length=context_length)
    assert _figures(baseline) == _figures(_whole_history_baseline(session.messages, context_length))
    old = _whole_history_recorded(session)
    if old is None:
        assert recorded_trace(session) is None
    else:
        assert _figures(recorded_trace(session), keep=("compactions", "summarizer_calls")) == (
            _figures(old, keep=("compactions", "summarizer_calls"))
        )


def test_recorded_trace_over_several_compactions_matches_the_whole_history() -> None:
    """Three boundaries, one of them before any request, two at the same index."""
    session = load_session(FIXTURES / "replay" / "agent_session.json")
    session.metadata["compactions"] = [
        {"index": 1, "summary": "first", "trigger": "manual"},
        {"index": 20, "summary": "second"},
        {"index": 20, "summary": "third", "trigger": "auto"},
        {"index": 40, "summary": ""},  # no summary: not a boundary the trace can use
    ]
    keep = ("compactions", "summarizer_calls")
    assert _figures(recorded_trace(session), keep=keep) == _figures(
        _whole_history_recorded(session), keep=keep
    )


def _rows(comparisons: Sequence[Any]) -> list[dict[str, Any]]:
    rows = [row for c in comparisons for row in c.to_json(parse_price("openai-gpt-4o"))]
    for row in rows:
        for key in ("overhead_ms_median", "overhead_ms_p95"):
            row.pop(key)
    return rows


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in FILES])
def test_a_streamed_comparison_equals_the_loaded_one(path: Path) -> None:
    engines = ["compressor", "lcm"]
    loaded = compare_sessions(load_sessions(path), engines, context_length=2_048)
    streamed = compare_sessions(iter_sessions(path), engines, context_length=2_048)
    assert _rows(streamed) == _rows(loaded)
    if path.suffix == ".jsonl":
        (one,) = loaded
        assert _rows([compare_stream(stream_session(path), engines, context_length=2_048)]) == (
            _rows([one])
        )


def test_a_replay_reads_a_stream_once_as_it_goes() -> None:
    path = FIXTURES / "replay" / "claude_code_compacted.jsonl"
    stream = stream_session(path)
    trace = replay_session(stream, engine="compressor", context_length=2_048)
    assert stream.consumed == len(load_session(path).messages)
    expected = replay_session(
        load_session(path).messages, engine="compressor", context_length=2_048
    )
    assert _figures(trace) == _figures(expected)
