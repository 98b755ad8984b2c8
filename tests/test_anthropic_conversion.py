"""Conversion between Anthropic Messages and OpenAI chat-completions messages.

A conversation converted either way must keep its text, its tool_use /
tool_result pairs, its images and its thinking blocks, and the OpenAI side
must always pass :func:`validate_messages`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from contextengine.anthropic_format import from_anthropic, to_anthropic
from contextengine.messages import validate_messages

Message = dict[str, Any]

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6"
    "kgAAAABJRU5ErkJggg=="
)

THINKING = {
    "type": "thinking",
    "thinking": "The user wants both files.",
    "signature": "EqQBCgIYAhIM",
}
REDACTED_THINKING = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def anthropic_session() -> list[Message]:
    """A realistic Anthropic session: image, thinking, parallel tool use, an error result."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this screenshot, and in config.toml?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                THINKING,
                REDACTED_THINKING,
                {"type": "text", "text": "Reading both."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read",
                    "input": {"path": "config.toml"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "read",
                    "input": {"path": "missing.txt"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "debug = true"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "No such file"}],
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A cat; debug is on."}]},
        {"role": "user", "content": "Thanks!"},
    ]


# ---------------------------------------------------------------------------- from_anthropic


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        pytest.param("Be terse.", "Be terse.", id="string"),
        pytest.param(
            [
                {"type": "text", "text": "Be terse."},
                {"type": "text", "text": "Cite files.", "cache_control": {"type": "ephemeral"}},
            ],
            "Be terse.\n\nCite files.",
            id="block-list",
        ),
    ],
)
def test_system_becomes_the_first_message(system: Any, expected: str) -> None:
    out = from_anthropic([{"role": "user", "content": "hi"}], system=system)
    assert out == [{"role": "system", "content": expected}, {"role": "user", "content": "hi"}]


def test_no_system_message_without_a_system_prompt() -> None:
    assert from_anthropic([{"role": "user", "content": "hi"}]) == [
        {"role": "user", "content": "hi"}
    ]


def test_text_blocks() -> None:
    out = from_anthropic(
        [
            {"role": "user", "content": [{"type": "text", "text": "one"}]},
            {"role": "assistant", "content": "two"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "three"}, {"type": "text", "text": "four"}],
            },
        ]
    )
    assert out[0] == {"role": "user", "content": "one"}
    assert out[1] == {"role": "assistant", "content": "two"}
    assert out[2]["content"] == [
        {"type": "text", "text": "three"},
        {"type": "text", "text": "four"},
    ]


def test_parallel_tool_use_becomes_tool_calls_and_tool_messages() -> None:
    out = from_anthropic(anthropic_session())
    assistant = out[1]
    assert assistant["content"] == "Reading both."
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert assistant["tool_calls"][0]["type"] == "function"
    assert assistant["tool_calls"][0]["function"]["name"] == "read"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {
        "path": "config.toml"
    }
    assert out[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "debug = true"}
    assert out[3] == {
        "role": "tool",
        "tool_call_id": "toolu_2",
        "content": "No such file",
        "is_error": True,
    }
    validate_messages(out)


def test_images_become_image_url_parts() -> None:
    out = from_anthropic(
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
                    {"type": "text", "text": "compare"},
                ],
            }
        ]
    )
    assert out[0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
        {"type": "text", "text": "compare"},
    ]


def test_thinking_and_redacted_thinking_are_kept() -> None:
    out = from_anthropic(anthropic_session())
    assert out[1]["thinking_blocks"] == [THINKING, REDACTED_THINKING]
    assert out[1]["reasoning_content"] == "The user wants both files."


def test_tool_results_come_before_the_users_text_of_the_same_message() -> None:
    out = from_anthropic(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and also this"},
                    {"type": "tool_result", "tool_use_id": "t", "content": "done"},
                ],
            },
        ]
    )
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "user"]
    assert out[3] == {"role": "user", "content": "and also this"}
    validate_messages(out)


def test_assistant_with_only_thinking_gets_empty_text() -> None:
    out = from_anthropic(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": [THINKING]}]
    )
    assert out[1]["content"] == ""
    validate_messages(out)


def test_from_anthropic_output_is_valid_and_input_unchanged() -> None:
    session = anthropic_session()
    before = copy.deepcopy(session)
    out = from_anthropic(session, system="sys")
    validate_messages(out)
    assert session == before
    # The result shares no blocks with the input: editing it leaves the input alone.
    out[2]["thinking_blocks"][0]["thinking"] = "edited"
    assert session == before


# ---------------------------------------------------------------------------- to_anthropic


def _call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "run", "arguments": arguments}}


def test_system_and_developer_messages_join_the_system_prompt() -> None:
    system, messages = to_anthropic(
        [
            {"role": "system", "content": "Be terse."},
            {"role": "developer", "content": [{"type": "text", "text": "Cite files."}]},
            {"role": "user", "content": "hi"},
        ]
    )
    assert system == "Be terse.\n\nCite files."
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert to_anthropic([{"role": "user", "content": "hi"}])[0] is None


def test_consecutive_same_role_turns_are_merged() -> None:
    _, messages = to_anthropic(
        [
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "three"},
            {"role": "assistant", "content": "four"},
        ]
    )
    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "three"}, {"type": "text", "text": "four"}],
        },
    ]


def test_tool_messages_become_tool_results_in_one_user_turn() -> None:
    _, messages = to_anthropic(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("a", '{"x": 1}'), _call("b", "{}")],
            },
            {"role": "tool", "tool_call_id": "a", "content": "ra"},
            {"role": "tool", "tool_call_id": "b", "content": "rb", "is_error": True},
            {"role": "user", "content": "next"},
        ]
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "a", "name": "run", "input": {"x": 1}},
        {"type": "tool_use", "id": "b", "name": "run", "input": {}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "ra"},
        {"type": "tool_result", "tool_use_id": "b", "content": "rb", "is_error": True},
        {"type": "text", "text": "next"},
    ]


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param("not json", id="invalid-json"),
        pytest.param("[1, 2]", id="json-array"),
        pytest.param('{"unterminated": ', id="truncated"),
    ],
)
def test_arguments_that_are_not_a_json_object_travel_as_raw(arguments: str) -> None:
    _, messages = to_anthropic(
        [{"role": "assistant", "content": None, "tool_calls": [_call("a", arguments)]}]
    )
    assert messages[0]["content"][0]["input"] == {"_raw": arguments}


def test_empty_arguments_become_an_empty_input() -> None:
    _, messages = to_anthropic(
        [{"role": "assistant", "content": None, "tool_calls": [_call("a", "")]}]
    )
    assert messages[0]["content"][0]["input"] == {}


def test_data_urls_become_base64_image_sources() -> None:
    _, messages = to_anthropic(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                ],
            }
        ]
    )
    assert messages[0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
    ]


def test_tool_result_with_an_image_keeps_its_blocks() -> None:
    _, messages = to_anthropic(
        [
            {"role": "assistant", "content": None, "tool_calls": [_call("a", "{}")]},
            {
                "role": "tool",
                "tool_call_id": "a",
                "content": [
                    {"type": "text", "text": "screenshot:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,QUJD"}},
                ],
            },
        ]
    )
    assert messages[1]["content"][0]["content"] == [
        {"type": "text", "text": "screenshot:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}},
    ]


def test_thinking_blocks_lead_the_assistant_turn() -> None:
    _, messages = to_anthropic(
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "answer",
                "reasoning_content": THINKING["thinking"],
                "thinking_blocks": [THINKING],
            },
        ]
    )
    assert messages[1]["content"] == [THINKING, {"type": "text", "text": "answer"}]


def test_to_anthropic_does_not_mutate_its_input() -> None:
    openai = from_anthropic(anthropic_session(), system="sys")
    before = copy.deepcopy(openai)
    _, messages = to_anthropic(openai)
    messages[1]["content"][0]["thinking"] = "edited"
    assert openai == before


# ---------------------------------------------------------------------------- round trips


def test_round_trip_from_anthropic_is_lossless_for_a_realistic_session() -> None:
    session = anthropic_session()
    openai = from_anthropic(session, system="Be terse.")
    system, back = to_anthropic(openai)
    assert system == "Be terse."
    again = from_anthropic(back, system=system)
    assert again == openai
    # Text, images, thinking and tool pairs survive in the Anthropic shape too.
    assert back[0] == session[0]
    assert back[1] == session[1]
    assert back[2]["content"][0] == session[2]["content"][0]
    assert back[2]["content"][1]["content"] == "No such file"
    assert back[2]["content"][1]["is_error"] is True


def test_round_trip_to_anthropic_keeps_text_tool_pairs_images_and_thinking() -> None:
    openai: list[Message] = [
        {"role": "system", "content": "Be terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Running.",
            "tool_calls": [_call("a", '{"cmd": "ls"}'), _call("b", "not json")],
            "thinking_blocks": [THINKING, REDACTED_THINKING],
            "reasoning_content": THINKING["thinking"],
        },
        {"role": "tool", "tool_call_id": "a", "content": "a.py b.py"},
        {"role": "tool", "tool_call_id": "b", "content": "bad args", "is_error": True},
        {"role": "assistant", "content": "Two files."},
    ]
    system, messages = to_anthropic(openai)
    again = from_anthropic(messages, system=system)
    validate_messages(again)
    assert again[:2] == openai[:2]
    assert again[2]["content"] == "Running."
    assert again[2]["thinking_blocks"] == [THINKING, REDACTED_THINKING]
    assert again[2]["reasoning_content"] == THINKING["thinking"]
    assert [c["id"] for c in again[2]["tool_calls"]] == ["a", "b"]
    assert json.loads(again[2]["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls"}
    # Arguments that were not a JSON object come back as the same text.
    assert again[2]["tool_calls"][1]["function"]["arguments"] == "not json"
    assert again[3:] == openai[3:]
