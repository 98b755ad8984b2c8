"""The window guarantee: what is sent never exceeds the context window when it physically fits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contextengine import ContextHost, load_engine
from contextengine.errors import ContextOverflowError
from contextengine.events import Event, HostEvent
from contextengine.messages import validate_messages
from contextengine.tokens import count_message_tokens, count_tokens
from contextengine.window import excerpt, fit_to_window

Message = dict[str, Any]
SYSTEM: Message = {"role": "system", "content": "You are a careful agent."}


def log_lines(n: int, tag: str = "") -> str:
    return "\n".join(f"{tag}line {i}: worker-{i % 7} handled request {i * 7919}" for i in range(n))


def tool_round(call_id: str, output: str, question: str = "Check the logs.") -> list[Message]:
    return [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "cat", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def test_a_request_that_fits_is_returned_as_it_is() -> None:
    messages = [SYSTEM, *tool_round("c1", "short")]
    fit = fit_to_window(messages, budget=10_000)
    assert fit.messages is messages and not fit.cuts


def test_a_huge_tool_output_is_cut_to_an_excerpt_that_says_so() -> None:
    output = log_lines(40_000) + "\nFINAL-MARKER exit 0"
    messages = [SYSTEM, *tool_round("c1", output)]
    fit = fit_to_window(messages, budget=4_000, hint=lambda m: "lcm_expand msg_1")
    assert count_message_tokens(fit.messages) <= 4_000 == 4_000
    validate_messages(fit.messages)
    cut = fit.messages[-1]["content"]
    assert cut.startswith("line 0:") and cut.endswith("FINAL-MARKER exit 0")
    assert "characters of this tool output were cut to fit the context window" in cut
    assert "lcm_expand msg_1" in cut
    assert messages[-1]["content"] == output  # the input is never changed
    # The same request is cut the same way every time (the cache prefix holds).
    assert (
        fit_to_window(messages, budget=4_000).messages[-1]
        == fit_to_window(messages, budget=4_000).messages[-1]
    )


def test_tool_outputs_go_first_then_older_messages_then_whole_groups() -> None:
    chatter = "I looked at the results in detail. " * 400
    messages = [
        SYSTEM,
        *tool_round("c1", log_lines(300), "First question."),
        {"role": "assistant", "content": chatter},
        *tool_round("c2", log_lines(300, "b"), "Latest question, keep me whole."),
    ]
    fit = fit_to_window(messages, budget=2_500)
    assert count_message_tokens(fit.messages) <= 2_500
    validate_messages(fit.messages)
    kinds = [(cut.role, cut.action) for cut in fit.cuts]
    assert kinds[0] == ("tool", "excerpt")
    assert fit.messages[0] == SYSTEM
    assert any(m.get("content") == "Latest question, keep me whole." for m in fit.messages)


def test_only_an_impossible_request_is_refused() -> None:
    huge_question = "Please read this carefully. " * 3_000
    with pytest.raises(ContextOverflowError) as caught:
        fit_to_window([SYSTEM, {"role": "user", "content": huge_question}], budget=2_000)
    assert caught.value.required > caught.value.budget == 2_000
    assert "latest user message" in str(caught.value)


def test_tool_schemas_are_counted_in() -> None:
    messages = [SYSTEM, *tool_round("c1", log_lines(200))]
    size = count_message_tokens(messages)
    assert not fit_to_window(messages, budget=size + 10).cuts
    assert fit_to_window(messages, budget=size + 10, reserved=500).cuts


def test_an_excerpt_keeps_its_budget_exactly() -> None:
    text = json.dumps([{"k": i, "v": "x" * (i % 13)} for i in range(3_000)])
    short = excerpt(text, 300, marker="[… {cut} cut]")
    assert count_tokens(short) <= 300 + count_tokens("[… 99,999 characters cut]") + 8
    assert short.startswith(text[:50]) and short.endswith(text[-20:].split(" ")[-1])


@pytest.mark.parametrize("engine_name", ["compressor", "lcm"])
def test_the_host_never_sends_more_than_the_window(engine_name: str, tmp_path: Path) -> None:
    events: list[Event] = []
    options = {"store": str(tmp_path / "a.db")} if engine_name == "lcm" else {}
    engine = load_engine(engine_name, context_length=8_000, **options)
    host = ContextHost(engine, model="gpt-4o", context_length=8_000, observers=[events.append])
    host.start_session("s")
    output = log_lines(200_000) + "\nLAST LINE"  # about 10 MB
    history = [SYSTEM, *tool_round("c1", output, "What does the log end with?")]
    tools = [{"type": "function", "function": {"name": "cat", "parameters": {}}}]
    request = host.prepare_request(history, tools=tools)
    assert count_message_tokens(request) <= 8_000
    validate_messages(request)
    assert request[0] == SYSTEM
    assert "What does the log end with?" in json.dumps(request)
    assert host.history[-1]["content"] == output  # only what is sent was cut
    if engine_name == "lcm":
        # lcm moved the output out of its view itself: the model sees its id.
        assert request[-1]["content"].startswith("[lcm large content ")
    else:
        assert request[-1]["content"].endswith("LAST LINE")
        assert any(isinstance(e, HostEvent) and e.kind == "window_cut" for e in events)


def test_the_host_refuses_before_sending_when_nothing_can_fit() -> None:
    host = ContextHost(
        load_engine("compressor", context_length=1_000), model="gpt-4o", context_length=1_000
    )
    with pytest.raises(ContextOverflowError):
        host.prepare_request([SYSTEM, {"role": "user", "content": "word " * 5_000}])
