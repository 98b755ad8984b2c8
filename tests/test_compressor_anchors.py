"""The compressor keeps the identifiers of the parts of the middle it does not send in full."""

from __future__ import annotations

from typing import Any

import pytest

from compressor_conversations import (
    RecordingSummarizer,
    assistant,
    call,
    coding_session,
    result,
    user,
)
from contextengine.anchors import anchor_cache_clear, anchor_cache_info
from contextengine.engines.compressor import ContextCompressor, is_summary_message
from contextengine.identifiers import listed_identifiers
from contextengine.messages import message_text
from contextengine.summary_prompt import PROMPT_ANCHORS_LIMIT, render_summary_prompt

Message = dict[str, Any]

BURIED = (
    "src/pkg/deep_module.py",
    "KeyError: 'order_7781'",
    "9fceb02d0ae598e95dc970b74767f19372d61af8",
)


def buried_log(chars: int = 20_000) -> str:
    """A long tool output with the identifiers of :data:`BURIED` in its middle only."""
    filler = "".join(f"line {i}: nothing to see here, all fine\n" for i in range(chars // 70))
    half = len(filler) // 2
    middle = (
        "Traceback (most recent call last):\n"
        '  File "src/pkg/deep_module.py", line 42, in lookup\n'
        "KeyError: 'order_7781'\n"
        "introduced by commit 9fceb02d0ae598e95dc970b74767f19372d61af8\n"
        "DB_PASSWORD=hunter2_buried_secret\n"
    )
    return filler[:half] + middle + filler[half:]


def prose_heavy_session(turns: int = 16) -> list[Message]:
    """A session whose assistant prose alone is over the target: pass 1 cannot suffice."""
    return coding_session(turns=turns, output_chars=2_000, chatter=3_000)


def session_with_buried_output() -> list[Message]:
    messages = prose_heavy_session()
    # Early in the middle region: never among the newest messages sent in full.
    at = 4
    messages[at:at] = [
        call(("call_buried", "bash", {"command": "python -m pkg.run"})),
        result("call_buried", buried_log()),
        assistant("That run crashed; moving on."),
    ]
    return messages


def summary_text(messages: list[Message]) -> str:
    return "\n".join(message_text(m) for m in messages if is_summary_message(m))


def test_identifiers_buried_in_a_long_output_reach_the_summary() -> None:
    engine = ContextCompressor(context_length=16_000)
    out = engine.compress(session_with_buried_output(), force=True)
    assert engine.last_compression is not None
    assert engine.last_compression.reason == "summarized"
    summary = summary_text(out)
    readable = summary + "\n".join(listed_identifiers(summary))  # folder groups expanded
    for identifier in ("src/pkg/deep_module.py", "order_7781", BURIED[2]):
        assert identifier in readable
    assert "hunter2_buried_secret" not in summary


def test_request_carries_anchors_the_sent_messages_lack() -> None:
    recorder = RecordingSummarizer()
    engine = ContextCompressor(context_length=16_000, summarizer=recorder)
    engine.compress(session_with_buried_output(), force=True)
    (request,) = recorder.requests
    sent = "\n".join(message_text(m) for m in request.messages)
    values = {anchor.partition(":")[2] for anchor in request.anchors}
    assert BURIED[0] not in sent
    assert {BURIED[0], BURIED[2]} <= values
    assert all(anchor.partition(":")[0] for anchor in request.anchors)
    assert not any("hunter2" in anchor for anchor in request.anchors)
    assert "Identifiers to keep verbatim" in request.prompt
    assert BURIED[0] in request.prompt


@pytest.mark.parametrize("turns", [pytest.param(8, id="short"), pytest.param(16, id="longer")])
def test_warm_cache_means_compress_scans_nothing(turns: int) -> None:
    anchor_cache_clear()
    history = prose_heavy_session(turns)
    engine = ContextCompressor(context_length=16_000)
    engine.on_turn_complete(history)
    warmed = anchor_cache_info().scans
    assert warmed == len(history)
    engine.compress(history, force=True)
    assert engine.last_compression is not None
    assert engine.last_compression.reason == "summarized"
    assert anchor_cache_info().scans == warmed
    ContextCompressor(context_length=16_000).compress(history, force=True)
    assert anchor_cache_info().scans == warmed


def test_each_turn_scans_only_the_new_messages() -> None:
    anchor_cache_clear()
    history = coding_session(turns=6)
    engine = ContextCompressor(context_length=16_000)
    engine.on_turn_complete(history)
    before = anchor_cache_info()
    new = [user("Then look at src/turn_two.py"), assistant("Looked at src/turn_two.py.")]
    history = [*history, *new]
    engine.on_turn_complete(history)
    after = anchor_cache_info()
    assert after.scans - before.scans == len(new)
    assert after.hits == before.hits  # the old prefix is not even looked up


def test_rewritten_history_is_looked_up_not_rescanned() -> None:
    anchor_cache_clear()
    history = prose_heavy_session()
    engine = ContextCompressor(context_length=16_000)
    engine.on_turn_complete(history)
    compacted = engine.compress(history, force=True)
    assert len(compacted) < len(history)
    info = anchor_cache_info()
    engine.on_turn_complete([*compacted, user("next")])
    # Only the summary message and the new request are new texts; the rest are hits.
    assert anchor_cache_info().scans - info.scans == 2
    assert anchor_cache_info().hits - info.hits == len(compacted) - 1


def test_prompt_lists_a_bounded_number_of_identifiers() -> None:
    anchors = tuple(f"files:src/listed/module_{i}.py" for i in range(PROMPT_ANCHORS_LIMIT + 50))
    prompt = render_summary_prompt(messages=[user("hi")], anchors=(*anchors, "https://x.io/a"))
    assert "Identifiers to keep verbatim" in prompt
    assert "- src/listed/module_0.py" in prompt
    assert f"module_{PROMPT_ANCHORS_LIMIT - 1}.py" in prompt
    assert f"module_{PROMPT_ANCHORS_LIMIT}.py" not in prompt
    assert "files:" not in prompt
    assert "Identifiers to keep verbatim" not in render_summary_prompt(messages=[user("hi")])
