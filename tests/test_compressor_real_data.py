"""ContextCompressor on real transcripts (../shared/data): tau-bench and mini-swe-agent.

Skips when the shared data folder is absent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compressor_conversations import RecordingSummarizer, tool_pairs_intact
from contextengine.engines.compressor import ContextCompressor, is_summary_message
from contextengine.engines.compressor.engine import DEFAULT_SUMMARY_INPUT_CHARS
from contextengine.messages import validate_messages
from contextengine.tokens import count_message_tokens

pytestmark = pytest.mark.shared_data

Message = dict[str, Any]
_KEEP = ("role", "content", "tool_calls", "tool_call_id", "name")


def _clean(msg: dict[str, Any]) -> Message:
    return {k: msg[k] for k in _KEEP if msg.get(k) is not None}


@pytest.fixture(scope="module")
def tau_runs(shared_data: Path) -> list[dict[str, Any]]:
    path = shared_data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    if not path.is_file():
        pytest.skip(f"real-data test: {path} is absent")
    runs: list[dict[str, Any]] = json.loads(path.read_text())
    for run in runs:
        run["traj"] = [_clean(m) for m in run["traj"]]
    return runs


def _chain(runs: list[dict[str, Any]], limit: int) -> list[Message]:
    out: list[Message] = []
    index = 0
    while len(out) < limit:
        traj = runs[index % len(runs)]["traj"]
        out += traj if not out else [m for m in traj if m["role"] != "system"]
        index += 1
    out = out[:limit]
    while out[-1].get("tool_calls"):
        out.pop()
    return out


def _text(messages: list[Message]) -> str:
    return "\n".join(
        str(m.get("content")) + json.dumps(m.get("tool_calls") or "") for m in messages
    )


def test_tau_bench_runs_compress_validly_and_keep_the_customer_id(
    tau_runs: list[dict[str, Any]],
) -> None:
    checked = 0
    for run in tau_runs[::5]:
        traj = run["traj"]
        tokens = count_message_tokens(traj)
        if len(traj) < 16:
            continue
        engine = ContextCompressor(context_length=max(4_000, tokens // 2), protect_first_n=1)
        out = engine.compress(traj, force=True)
        report = engine.last_compression
        assert report is not None
        validate_messages(out)
        assert tool_pairs_intact(out)
        assert out[0] == traj[0], "the airline policy prompt is byte-identical"
        assert count_message_tokens(out) <= tokens
        if not report.aborted:
            checked += 1
            latest_user = [m for m in traj if m["role"] == "user"][-1]
            assert any(latest_user["content"] in str(m.get("content")) for m in out)
            assert run["info"]["task"]["user_id"] in _text(out), "the customer id survives"
    assert checked >= 10


def test_chained_tau_bench_sessions_survive_repeated_compaction(
    tau_runs: list[dict[str, Any]],
) -> None:
    engine = ContextCompressor(context_length=16_000)
    context: list[Message] = []
    for msg in _chain(tau_runs, 600):
        context = [*context, msg]
        if msg["role"] == "assistant" and not msg.get("tool_calls"):
            tokens = count_message_tokens(context)
            engine.update_from_response({"prompt_tokens": tokens})
            if engine.should_compress():
                context = engine.compress(context)
                validate_messages(context)
                assert tool_pairs_intact(context)
                assert sum(is_summary_message(m) for m in context) <= 1
    assert engine.compression_count >= 3
    assert count_message_tokens(context) < 16_000


def test_what_is_sent_does_not_grow_with_the_history(tau_runs: list[dict[str, Any]]) -> None:
    sent_chars: dict[int, int] = {}
    for size in (1_000, 5_000):
        summarizer = RecordingSummarizer()
        session = _chain(tau_runs, size)
        engine = ContextCompressor(context_length=200_000, target_tokens=1, summarizer=summarizer)
        engine.compress(session)
        (request,) = summarizer.requests
        sent_chars[size] = sum(len(str(m.get("content"))) for m in request.messages)
    assert sent_chars[5_000] <= DEFAULT_SUMMARY_INPUT_CHARS + 20_000
    assert sent_chars[5_000] / sent_chars[1_000] < 1.5, sent_chars


def test_mini_swe_agent_trajectories_compress_validly(shared_data: Path) -> None:
    folder = shared_data / "mini-swe-agent" / "trajs"
    if not folder.is_dir():
        pytest.skip(f"real-data test: {folder} is absent")
    for path in sorted(folder.glob("*.traj.json"))[::6]:
        raw = json.loads(path.read_text())
        traj = [{"role": m["role"], "content": m.get("content") or ""} for m in raw["messages"]]
        engine = ContextCompressor(context_length=16_000)
        out = engine.compress(traj, force=True)
        validate_messages(out)
        assert out[0] == traj[0]
        assert out[-1] == traj[-1]
        assert count_message_tokens(out) <= count_message_tokens(traj)
