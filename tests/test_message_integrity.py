"""Message integrity: validation, tool-call pairing, safe cut points and plain text.

Providers reject a conversation in which a tool call has no result or a result
has no call, so these tests pin down what :func:`validate_messages` reports and
that :func:`sanitize_tool_pairs` always produces something it accepts.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextengine.errors import InvalidMessagesError
from contextengine.messages import (
    PLACEHOLDER_FOR_REMOVED_CALLS,
    align_cut_backward,
    align_cut_forward,
    is_tool_call_message,
    message_text,
    safe_cut_points,
    sanitize_tool_pairs,
    tool_call_ids,
    tool_groups,
    validate_messages,
)

Message = dict[str, Any]


def call(call_id: str, name: str = "read_file", arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def calls(*ids: str, content: Any = None) -> Message:
    return {"role": "assistant", "content": content, "tool_calls": [call(i) for i in ids]}


def result(call_id: str, content: str = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(text: str = "hello") -> Message:
    return {"role": "user", "content": text}


def assistant(text: str = "sure") -> Message:
    return {"role": "assistant", "content": text}


SYSTEM: Message = {"role": "system", "content": "You are a coding agent."}


def realistic_conversation() -> list[Message]:
    """A coding-agent session with parallel calls, image parts and extra provider keys."""
    return [
        SYSTEM,
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Why does the build fail? Screenshot attached."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me look at the config and the log.",
            "tool_calls": [
                call("call_cfg", "read_file", '{"path": "pyproject.toml"}'),
                call("call_log", "read_file", '{"path": "build.log"}'),
            ],
            "reasoning_content": "Two files, read them in parallel.",
        },
        result("call_cfg", "[project]\nname = 'demo'"),
        {**result("call_log", "error: missing module foo"), "name": "read_file"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_fix", "edit")]},
        result("call_fix", "edited"),
        {"role": "assistant", "content": "Fixed: foo was missing.", "x_provider_meta": {"a": 1}},
        user("thanks"),
        {"role": "developer", "content": "Be brief."},
        {"role": "assistant", "content": "", "refusal": None, "tool_calls": [call("c9")]},
        result("c9"),
        {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    ]


# ---------------------------------------------------------------------------- validate_messages


@pytest.mark.parametrize(
    ("messages", "index", "problem"),
    [
        pytest.param({"role": "user"}, None, "expected a list", id="not-a-list"),
        pytest.param([user(), "hello"], 1, "expected a dict", id="element-not-a-dict"),
        pytest.param([user(), {"content": "x"}], 1, "missing 'role'", id="missing-role"),
        pytest.param([{"role": "robot", "content": "x"}], 0, "unknown role", id="unknown-role"),
        pytest.param(
            [calls("a"), {"role": "tool", "content": "ok"}],
            1,
            "without a tool_call_id",
            id="tool-without-tool-call-id",
        ),
        pytest.param(
            [user(), {"role": "assistant", "content": None, "tool_calls": call("a")}],
            1,
            "tool_calls must be a list",
            id="tool-calls-not-a-list",
        ),
        pytest.param(
            [user(), {"role": "assistant", "content": "x", "tool_calls": []}],
            1,
            "empty list",
            id="tool-calls-empty",
        ),
        pytest.param(
            [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}],
            0,
            "tool_calls[0] has no id",
            id="call-without-id",
        ),
        pytest.param(
            [{"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {}}]}],
            0,
            "tool_calls[0] has no function name",
            id="call-without-function-name",
        ),
        pytest.param(
            [
                user(),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        call("a"),
                        {"id": "b", "function": {"name": "f", "arguments": {"x": 1}}},
                    ],
                },
            ],
            1,
            "tool_calls[1].function.arguments must be a JSON string",
            id="arguments-not-a-string",
        ),
        pytest.param(
            [user(), {"role": "assistant", "content": 42}],
            1,
            "content must be a string, a list of parts or None, got int",
            id="content-wrong-type",
        ),
        pytest.param(
            [{"role": "user", "content": ["plain string part"]}],
            0,
            "content[0] must be a dict",
            id="content-part-not-a-dict",
        ),
        pytest.param(
            [SYSTEM, {"role": "user", "content": None}],
            1,
            "user message has no content",
            id="user-content-none",
        ),
        pytest.param(
            [user(), {"role": "assistant", "content": None}],
            1,
            "neither content nor tool_calls",
            id="assistant-neither-content-nor-calls",
        ),
        pytest.param(
            [user(), {"role": "user", "content": "x", "tool_calls": [call("a")]}],
            1,
            "only assistant messages carry tool_calls",
            id="tool-calls-on-user",
        ),
        pytest.param(
            [user(), calls("a", "b"), result("a"), user("next")],
            1,
            "tool call 'b' has no result",
            id="call-without-result",
        ),
        pytest.param(
            [user(), calls("a"), user("interrupts"), result("a")],
            1,
            "tool call 'a' has no result",
            id="result-separated-from-call",
        ),
        pytest.param(
            [user(), assistant(), result("ghost")],
            2,
            "answers no tool call",
            id="orphan-result",
        ),
        pytest.param(
            [user(), calls("a"), result("a"), result("a")],
            3,
            "answers a tool call a second time",
            id="result-answers-twice",
        ),
    ],
)
def test_validate_names_index_and_problem(messages: Any, index: int | None, problem: str) -> None:
    with pytest.raises(InvalidMessagesError) as caught:
        validate_messages(messages)
    assert caught.value.index == index
    assert problem in caught.value.problem
    where = "messages" if index is None else f"messages[{index}]"
    assert str(caught.value).startswith(f"{where}: ")


def test_invalid_messages_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        validate_messages([{"role": "nobody", "content": ""}])


def test_realistic_conversation_with_parallel_calls_is_valid() -> None:
    validate_messages(realistic_conversation())


def test_empty_list_is_valid() -> None:
    validate_messages([])


def test_results_may_come_in_any_order_within_their_group() -> None:
    validate_messages([user(), calls("a", "b", "c"), result("c"), result("a"), result("b")])


def test_responses_style_call_id_pairs() -> None:
    assistant_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{**call("fc_1"), "call_id": "call_1"}],
    }
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    validate_messages([user(), assistant_message, answer])


# ---------------------------------------------------------------------------- sanitize_tool_pairs


def test_sanitize_keeps_a_valid_conversation_unchanged() -> None:
    messages = realistic_conversation()
    assert sanitize_tool_pairs(messages) == messages


def test_sanitize_parallel_calls_with_one_result_missing_removes_that_call() -> None:
    messages = [user(), calls("a", "b", "c", content="checking"), result("a"), result("c")]
    out = sanitize_tool_pairs(messages)
    assert [c["id"] for c in out[1]["tool_calls"]] == ["a", "c"]
    assert out[1]["content"] == "checking"
    assert out[2:] == [result("a"), result("c")]
    validate_messages(out)


def test_sanitize_call_without_any_result_leaves_placeholder_text() -> None:
    messages = [user(), calls("a", "b"), user("never mind")]
    out = sanitize_tool_pairs(messages)
    assert out == [
        user(),
        {"role": "assistant", "content": PLACEHOLDER_FOR_REMOVED_CALLS},
        user("never mind"),
    ]
    validate_messages(out)


def test_sanitize_keeps_the_assistant_text_when_all_calls_go() -> None:
    out = sanitize_tool_pairs([user(), calls("a", content="I will look."), assistant("done")])
    assert out[1] == {"role": "assistant", "content": "I will look."}


def test_sanitize_drops_an_orphan_result() -> None:
    messages = [user(), assistant(), result("ghost"), user("again")]
    assert sanitize_tool_pairs(messages) == [user(), assistant(), user("again")]


def test_sanitize_drops_a_result_naming_an_unknown_call_inside_a_group() -> None:
    out = sanitize_tool_pairs([user(), calls("a"), result("a"), result("zzz")])
    assert out == [user(), calls("a"), result("a")]


def test_sanitize_result_separated_from_its_call_by_another_message() -> None:
    messages = [user(), calls("a"), user("interrupts"), result("a"), assistant()]
    out = sanitize_tool_pairs(messages)
    assert out == [
        user(),
        {"role": "assistant", "content": PLACEHOLDER_FOR_REMOVED_CALLS},
        user("interrupts"),
        assistant(),
    ]
    validate_messages(out)


def test_sanitize_matches_results_on_call_id() -> None:
    responses_call = {**call("fc_1"), "call_id": "call_1"}
    assistant_message = {"role": "assistant", "content": None, "tool_calls": [responses_call]}
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    messages = [user(), assistant_message, answer]
    assert sanitize_tool_pairs(messages) == messages


def test_sanitize_matches_a_result_carrying_call_id() -> None:
    answer = {"role": "tool", "tool_call_id": "unknown", "call_id": "a", "content": "ok"}
    messages = [user(), calls("a"), answer]
    assert sanitize_tool_pairs(messages) == messages


def test_sanitize_keeps_the_first_of_duplicate_results() -> None:
    messages = [user(), calls("a"), result("a", "first"), result("a", "second")]
    out = sanitize_tool_pairs(messages)
    assert out == [user(), calls("a"), result("a", "first")]


def test_sanitize_removes_an_empty_tool_calls_list() -> None:
    messages = [user(), {"role": "assistant", "content": None, "tool_calls": []}]
    out = sanitize_tool_pairs(messages)
    assert out[1] == {"role": "assistant", "content": PLACEHOLDER_FOR_REMOVED_CALLS}
    validate_messages(out)


def test_sanitize_keeps_unknown_keys() -> None:
    message = {**calls("a", "b", content="x"), "x_meta": {"trace": 7}}
    out = sanitize_tool_pairs([user(), message, result("a")])
    assert out[1]["x_meta"] == {"trace": 7}


def test_sanitize_does_not_mutate_its_input() -> None:
    messages = [
        user(),
        calls("a", "b"),
        result("a"),
        result("a", "dup"),
        assistant(),
        result("orphan"),
        calls("c"),
        user(),
    ]
    before = copy.deepcopy(messages)
    sanitize_tool_pairs(messages)
    assert messages == before


def test_sanitize_is_idempotent() -> None:
    messages = [user(), calls("a", "b"), result("b"), result("x"), calls("c"), assistant()]
    once = sanitize_tool_pairs(messages)
    assert sanitize_tool_pairs(once) == once


def test_sanitize_accepts_a_tuple() -> None:
    assert sanitize_tool_pairs((user(), result("x"))) == [user()]


# ---------------------------------------------------------------------------- cut points


CUT_CASES = [
    pytest.param(realistic_conversation(), id="realistic"),
    pytest.param([], id="empty"),
    pytest.param([calls("a", "b"), result("a"), result("b")], id="starts-with-a-group"),
    pytest.param([user(), calls("a"), result("a")], id="ends-with-a-group"),
    pytest.param([user(), result("x"), result("y"), calls("a"), result("a"), user()], id="orphans"),
    pytest.param([calls("a"), calls("b"), result("b")], id="unanswered-call"),
]


def _group_of(spans: list[tuple[int, int]], index: int) -> tuple[int, int]:
    return next(span for span in spans if span[0] <= index < span[1])


@pytest.mark.parametrize("messages", CUT_CASES)
def test_tool_groups_cover_the_list_in_order(messages: list[Message]) -> None:
    spans = tool_groups(messages)
    flattened = [i for start, end in spans for i in range(start, end)]
    assert flattened == list(range(len(messages)))
    for start, end in spans:
        if end - start > 1:
            assert is_tool_call_message(messages[start])
            assert all(m["role"] == "tool" for m in messages[start + 1 : end])


@pytest.mark.parametrize("messages", CUT_CASES)
def test_safe_cut_points_never_split_a_group(messages: list[Message]) -> None:
    spans = tool_groups(messages)
    points = safe_cut_points(messages)
    assert points[0] == 0 and points[-1] == len(messages)
    for point in points:
        assert all(not start < point < end for start, end in spans)
        # The second part never starts with a result whose call stays in the first.
        if 0 < point < len(messages) and messages[point]["role"] == "tool":
            assert _group_of(spans, point)[0] == point


@pytest.mark.parametrize("messages", CUT_CASES)
def test_align_cut_lands_on_the_nearest_safe_point(messages: list[Message]) -> None:
    points = safe_cut_points(messages)
    for index in range(-2, len(messages) + 3):
        clamped = max(0, min(index, len(messages)))
        backward = align_cut_backward(messages, index)
        forward = align_cut_forward(messages, index)
        assert backward == max(p for p in points if p <= clamped)
        assert forward == min(p for p in points if p >= clamped)


def test_align_cut_walks_out_of_a_parallel_group() -> None:
    messages = [user(), calls("a", "b", "c"), result("a"), result("b"), result("c"), user()]
    assert [align_cut_backward(messages, i) for i in range(7)] == [0, 1, 1, 1, 1, 5, 6]
    assert [align_cut_forward(messages, i) for i in range(7)] == [0, 1, 5, 5, 5, 5, 6]


# ---------------------------------------------------------------------------- text helpers


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(user("plain words"), "plain words", id="string"),
        pytest.param({"role": "assistant", "content": None, "refusal": "no"}, "", id="none"),
        pytest.param(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "first"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "second"},
                ],
            },
            "first\nsecond",
            id="parts-without-images",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "tool_result", "content": "nested"}]},
            "nested",
            id="nested-string-content",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    call("a", "read_file", '{"path": "a.py"}'),
                    {"id": "b", "function": {"name": "ls", "arguments": None}},
                ],
            },
            'Reading.\nread_file({"path": "a.py"})\nls()',
            id="tool-calls",
        ),
    ],
)
def test_message_text(message: Message, expected: str) -> None:
    assert message_text(message) == expected


def test_tool_call_ids_and_is_tool_call_message() -> None:
    assert tool_call_ids(calls("a", "b")) == ["a", "b"]
    assert tool_call_ids(assistant()) == []
    assert tool_call_ids(user()) == []
    assert is_tool_call_message(calls("a"))
    assert not is_tool_call_message({"role": "assistant", "content": "x", "tool_calls": []})
    assert not is_tool_call_message({"role": "user", "content": "x", "tool_calls": [call("a")]})


# ---------------------------------------------------------------------------- property


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Random agent conversations, damaged the ways real transcripts are damaged.

    Calls lose results, results lose calls or get repeated, results land after
    an interrupting message, and the odd role (developer, function) shows up.
    """
    ids = iter(f"call_{n}" for n in range(10_000))
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(SYSTEM)
    text = st.text(alphabet="abc xyz", max_size=8)
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(
            st.sampled_from(["user", "assistant", "calls", "orphan", "developer", "function"])
        )
        if kind == "user":
            messages.append(user(draw(text)))
        elif kind == "assistant":
            messages.append(assistant(draw(text)))
        elif kind == "developer":
            messages.append({"role": "developer", "content": draw(text)})
        elif kind == "function":
            messages.append({"role": "function", "name": "f", "content": draw(text)})
        elif kind == "orphan":
            messages.append(result(f"orphan_{draw(st.integers(0, 3))}"))
        else:
            call_ids = [next(ids) for _ in range(draw(st.integers(1, 4)))]
            content = draw(st.sampled_from([None, "", "thinking aloud"]))
            messages.append(calls(*call_ids, content=content))
            if draw(st.booleans()):
                messages.append(user("interruption"))
            answered = draw(st.lists(st.sampled_from(call_ids), max_size=6))
            messages.extend(result(call_id) for call_id in answered)
    return messages


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_sanitized_conversations_are_valid_and_stable(messages: list[Message]) -> None:
    before = copy.deepcopy(messages)
    once = sanitize_tool_pairs(messages)
    validate_messages(once)
    assert sanitize_tool_pairs(once) == once
    assert messages == before
    # Nothing but tool results, tool calls and emptied content may be lost.
    non_tool = [m for m in messages if m["role"] != "tool"]
    assert len([m for m in once if m["role"] != "tool"]) == len(non_tool)
