"""The lossless engine replayed over real transcripts at a small context length.

tau-bench airline runs (native tool calls) and mini-swe-agent SWE-bench runs
(long bash sessions with huge outputs) from ../shared/data, turn by turn
through a generic host loop at 8k tokens: every view validates, keeps tool
calls paired, fits the budget, and nothing is lost from the archive.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextengine.engines.lossless import LosslessEngine
from contextengine.tokens import count_message_tokens

pytestmark = pytest.mark.shared_data

Message = dict[str, Any]
CONTEXT = 8_000


def assert_pairs_intact(view: list[Message]) -> None:
    index = 0
    while index < len(view):
        calls = [call["id"] for call in view[index].get("tool_calls") or []]
        assert view[index]["role"] != "tool", f"tool result without its call at {index}"
        index += 1
        results = []
        while index < len(view) and view[index]["role"] == "tool":
            results.append(view[index]["tool_call_id"])
            index += 1
        assert sorted(results) == sorted(calls)


def replay(history: list[Message], *, keep_view_as_history: bool) -> LosslessEngine:
    """Feed ``history`` request by request, as a host would, checking every view."""
    try:
        from contextengine.messages import validate_messages
    except ImportError:  # written in parallel; the pair check still runs
        validate_messages = None
    engine = LosslessEngine(context_length=CONTEXT, store=":memory:")
    engine.on_session_start("replay")
    host: list[Message] = []
    fed = 0
    for end in range(1, len(history) + 1):
        if history[end - 1]["role"] not in ("user", "tool") or (
            end < len(history) and history[end]["role"] == "tool"
        ):
            continue  # a request goes out after a user message or the last of a tool batch
        host = host + history[fed:end]
        fed = end
        if engine.should_compress_preflight(host):
            compacted = engine.compress(host)
            if keep_view_as_history:
                host = compacted
        view = engine.select_context(list(host), conversation_messages=host)
        assert view is not None
        if validate_messages is not None:
            validate_messages(view)
        assert_pairs_intact(view)
        assert view[0] == history[0]  # the system prompt, byte-identical
        assert count_message_tokens(view) <= engine.threshold_tokens
        latest_user = next(m for m in reversed(history[:end]) if m["role"] == "user")
        assert latest_user in view or any(
            m.get("content") == latest_user.get("content") for m in view
        )
        engine.on_turn_complete(host)
    engine.on_turn_complete(host + history[fed:])
    return engine


def tau_runs(shared: Path) -> list[list[Message]]:
    path = shared / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    runs = json.loads(path.read_text())
    # The longest runs, where compaction has to happen at 8k.
    longest = sorted(runs, key=lambda run: -len(json.dumps(run["traj"])))[:6]
    return [run["traj"] for run in longest]


def swe_runs(shared: Path) -> list[list[Message]]:
    folder = shared / "mini-swe-agent" / "trajs"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    files = sorted(folder.glob("*.traj.json"), key=lambda p: p.stat().st_size)
    chosen = files[:: max(1, len(files) // 5)][:5]
    runs = []
    for path in chosen:
        messages = json.loads(path.read_text())["messages"]
        # "extra" holds the provider's raw response: recorder metadata, not conversation.
        runs.append([{k: v for k, v in m.items() if k != "extra"} for m in messages])
    return runs


@pytest.mark.parametrize(
    "keep_view_as_history",
    [pytest.param(False, id="full-history"), pytest.param(True, id="view-as-history")],
)
def test_tau_bench_replays_keep_views_valid(shared_data: Path, keep_view_as_history: bool) -> None:
    compactions = 0
    for traj in tau_runs(shared_data):
        engine = replay(traj, keep_view_as_history=keep_view_as_history)
        compactions += engine.compression_count
        assert engine.conversation_id is not None
        assert engine.store.message_count(engine.conversation_id) == len(traj)
        engine.close()
    assert compactions > 0


def test_tau_bench_facts_stay_recoverable(shared_data: Path) -> None:
    traj = tau_runs(shared_data)[0]
    engine = replay(traj, keep_view_as_history=False)
    first_call = next(m for m in traj if m.get("tool_calls"))
    arguments = json.loads(first_call["tool_calls"][0]["function"]["arguments"])
    value = str(next(iter(arguments.values())))
    hits = json.loads(engine.handle_tool_call("lcm_grep", {"query": json.dumps(value)}))
    assert hits["results"], f"{value!r} not found"
    engine.close()


def test_mini_swe_agent_replays_keep_views_valid(shared_data: Path) -> None:
    for messages in swe_runs(shared_data):
        engine = replay(messages, keep_view_as_history=False)
        assert engine.conversation_id is not None
        assert engine.store.message_count(engine.conversation_id) == len(messages)
        engine.close()
