"""What leaves for a summariser is redacted: focus topics, earlier summaries, cut excerpts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextengine import load_engine
from contextengine.engines.compressor.summary import frame_summary
from contextengine.summarizers import DeterministicSummarizer, SummaryRequest

SECRET = "hunter2hunter2hunter2"


class Recording:
    """Writes the offline summary and keeps every request it received."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return DeterministicSummarizer().summarize(request)


def sent(summarizer: Recording) -> str:
    return json.dumps(
        [
            [r.messages, r.prompt, r.previous_summary, r.focus_topic, r.memory_context, r.anchors]
            for r in summarizer.requests
        ],
        default=str,
    )


def long_history(tool_output: str) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for i in range(14):
        call = f"c{i}"
        history += [
            {"role": "user", "content": f"step {i} " + "please look " * 50},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call, "type": "function", "function": {"name": "sh", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": tool_output},
            {"role": "assistant", "content": f"done {i} " + "words " * 40},
        ]
    return history


ENGINES = [pytest.param("compressor", id="compressor"), pytest.param("lcm", id="lcm")]


def engine(name: str, summarizer: Recording, context_length: int = 4_000) -> Any:
    options: dict[str, Any] = {}
    if name == "lcm":
        # A small fresh tail, so a forced compaction has something to summarise.
        options = {"store": ":memory:", "fresh_tail_tokens": 500}
    return load_engine(name, context_length=context_length, summarizer=summarizer, **options)


@pytest.mark.parametrize("name", ENGINES)
def test_a_focus_topic_is_redacted(name: str) -> None:
    summarizer = Recording()
    engine(name, summarizer).compress(
        long_history("ok"), force=True, focus_topic=f"the deploy with PASSWORD={SECRET}"
    )
    assert summarizer.requests and SECRET not in sent(summarizer)


@pytest.mark.parametrize(
    ("name", "tail", "window"),
    [
        # The engines keep the head and the tail of a long text: the compressor the
        # last 1,000 characters of a tool output, lcm the last 2,667 of 8,000 (at a
        # window wide enough that it keeps the output in its view rather than as a
        # large content, which never reaches a summariser).
        pytest.param("compressor", 1_000, 4_000, id="compressor"),
        pytest.param("lcm", 8_000 - 8_000 * 2 // 3, 200_000, id="lcm"),
    ],
)
@pytest.mark.parametrize("shift", [-2, 0, 3])
def test_a_secret_the_excerpt_cut_goes_through_is_not_sent_in_part(
    name: str, tail: int, window: int, shift: int
) -> None:
    # The kept tail starts right at the secret's value: its name is cut off.
    after = f"{SECRET} " + "z " * 5_000
    output = "y " * 20_000 + "PGPASSWORD=" + after[: tail + shift]
    summarizer = Recording()
    engine(name, summarizer, context_length=window).compress(long_history(output), force=True)
    assert summarizer.requests and "z z z" in sent(summarizer)
    assert SECRET[:8] not in sent(summarizer)


def test_an_earlier_summary_from_elsewhere_is_redacted() -> None:
    summarizer = Recording()
    history = long_history("ok")
    history.insert(1, {"role": "user", "content": frame_summary(f"Use DB_PASSWORD={SECRET} here.")})
    engine("compressor", summarizer).compress(history, force=True)
    assert summarizer.requests and SECRET not in sent(summarizer)
