"""A replay runs in bounded memory: a session 4x longer does not need 4x the memory.

A Claude Code session is generated (tool calls reading files, about 2 KB of
distinct output each) at 1x and 4x the length and streamed through each engine
with both reference traces, as ``contextengine replay`` does, under
tracemalloc. Before the replay became incremental the 4x peak was 3.9x (the
compressor) to 4.9x (lcm) the 1x one; now what grows is only the trace (one
small record per request) and what an engine keeps of its own.

Three process-wide caches are keyed by text and bounded by a constant (the
token caches and the anchor cache hold up to 64M characters each): a session
small enough for a test never fills them, so their growth would hide the
replay's. The test bounds them small, as a long replay reaches their bound.
No time is asserted.
"""

from __future__ import annotations

import json
import os
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from contextengine import anchors, tokens
from contextengine.formats import stream_session
from contextengine.replay import Replayer
from contextengine.replay.loop import compare_stream

#: Turns of the 1x session: a request, a tool call and its result, an answer.
TURNS = 60
CONTEXT_LENGTH = 16_000
#: Largest 4x/1x peak ratio allowed per engine. Before the replay became
#: incremental it was 3.9 (compressor) and 4.9 (lcm) here: every message was kept.
#: Now the compressor's growth is the trace (about 900 bytes per request for
#: the three traces); lcm also keeps a fingerprint index of every message it
#: archived (the engine's own state), hence its wider bound.
MAX_RATIO = {"compressor": 2.0, "lcm": 2.5}


def write_session(path: Path, turns: int) -> Path:
    """A Claude Code session of ``turns`` tool-calling turns with distinct outputs."""
    rng = random.Random(turns)
    words = [f"w{n}" for n in range(5_000)]
    lines: list[str] = []
    parent: str | None = None

    def record(kind: str, message: dict[str, Any]) -> None:
        nonlocal parent
        uuid = f"00000000-0000-4000-8000-{len(lines):012d}"
        lines.append(
            json.dumps(
                {
                    "type": kind,
                    "uuid": uuid,
                    "parentUuid": parent,
                    "sessionId": "generated",
                    "isSidechain": False,
                    "message": message,
                }
            )
        )
        parent = uuid

    for turn in range(turns):
        record("user", {"role": "user", "content": f"turn {turn}: read src/m{turn}.py"})
        call = {"type": "tool_use", "id": f"toolu_{turn}", "name": "Read", "input": {"n": turn}}
        record("assistant", {"id": f"msg_{turn}a", "model": "claude-x", "content": [call]})
        output = " ".join(rng.choice(words) for _ in range(400))
        result = {"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": output}
        record("user", {"role": "user", "content": [result]})
        answer = {"type": "text", "text": " ".join(rng.choice(words) for _ in range(60))}
        record("assistant", {"id": f"msg_{turn}b", "model": "claude-x", "content": [answer]})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _peak(path: Path, engine: str) -> int:
    tokens.cache_clear()
    anchors.anchor_cache_clear()
    tracemalloc.start()
    try:
        comparison = compare_stream(
            stream_session(path), [engine], context_length=CONTEXT_LENGTH, model="gpt-4o"
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert comparison.traces[engine].requests
    return peak


@pytest.mark.parametrize("engine", ["compressor", "lcm"])
def test_a_4x_longer_session_stays_within_a_small_factor_of_the_memory(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bounds the 1x session already reaches, so the caches are as full at 1x as at 4x.
    monkeypatch.setattr(tokens, "_text_cache", tokens._LRU(max_entries=100, max_weight=100_000))
    monkeypatch.setattr(tokens, "_message_cache", tokens._LRU(max_entries=100, max_weight=100_000))
    monkeypatch.setattr(anchors, "_cache", anchors._AnchorCache(max_entries=100, max_chars=100_000))
    one = write_session(tmp_path / "one.jsonl", TURNS)
    four = write_session(tmp_path / "four.jsonl", 4 * TURNS)
    assert four.stat().st_size > 3.9 * one.stat().st_size
    # Imports, the vocabulary and the archive's migrations load once, outside the figures.
    warm = write_session(tmp_path / "warm.jsonl", 3)
    compare_stream(stream_session(warm), [engine], context_length=CONTEXT_LENGTH)
    small = _peak(one, engine)
    large = _peak(four, engine)
    ratio = large / small
    assert ratio < MAX_RATIO[engine], (
        f"{engine}: the 4x session's peak is {ratio:.2f}x the 1x one ({large:,} / {small:,} bytes)"
    )


def test_the_archive_of_a_replay_is_a_temporary_file(tmp_path: Path) -> None:
    session = write_session(tmp_path / "s.jsonl", 5)
    with Replayer(stream_session(session), engine="lcm", context_length=CONTEXT_LENGTH) as replayer:
        replayer.run()
        archive = Path(replayer.engine.store.path)  # type: ignore[attr-defined]
        assert archive.is_file()
        assert archive.parent.name.startswith("contextengine-replay-")
    assert not archive.parent.exists()
    home = Path(os.environ["CONTEXTENGINE_HOME"])
    assert not any(home.rglob("*")), "a replay wrote into the user's data directory"
