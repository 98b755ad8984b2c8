"""Pass 1 of the compressor (no model): descriptors, duplicate pointers, shrunk arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compressor_conversations import (
    assistant,
    call,
    coding_session,
    log_output,
    result,
    system,
    tool_pairs_intact,
    user,
)
from contextengine.engines.compressor import ContextCompressor
from contextengine.engines.compressor.prune import (
    ARGS_MAX_CHARS,
    DESCRIPTOR_PREFIX,
    PRUNE_MIN_CHARS,
    describe_tool_output,
    prune_region,
    shrink_arguments,
)
from contextengine.messages import validate_messages

Message = dict[str, Any]


@pytest.mark.parametrize(
    ("name", "args", "text", "expected"),
    [
        pytest.param(
            "bash",
            {"command": "pytest -x tests/test_api.py", "timeout": 60},
            "F" * 500 + "\n<returncode>1</returncode>",
            ["bash(command=pytest -x tests/test_api.py)", "exit 1", "chars", "lines"],
            id="shell-with-exit-status",
        ),
        pytest.param(
            "read_file",
            {"path": "src/app.py"},
            "x\n" * 400,
            ["read_file(path=src/app.py)", "800 chars", "401 lines"],
            id="file-read-no-status",
        ),
        pytest.param(
            "search", {"q": "a" * 300, "k": 5}, "y" * 300, ["search(q=aaa", "…"], id="long-arg-cut"
        ),
    ],
)
def test_descriptor_names_tool_args_size_and_status(
    name: str, args: dict[str, Any], text: str, expected: list[str]
) -> None:
    line = describe_tool_output(name, json.dumps(args), text)
    assert "\n" not in line and len(line) < PRUNE_MIN_CHARS
    for piece in expected:
        assert piece in line
    if "exit" not in " ".join(expected):
        assert "exit" not in line


def test_big_results_get_descriptors_small_ones_stay() -> None:
    region = [
        call(("a", "bash", {"command": "ls"}), ("b", "cat", {"path": "README.md"})),
        result("a", "short listing"),
        result("b", log_output(1)),
    ]
    pruned = prune_region(region)
    assert pruned.messages[1] is region[1]
    assert pruned.messages[2]["content"].startswith("[tool output pruned: cat(path=README.md)")
    assert pruned.messages[2]["tool_call_id"] == "b"
    assert (pruned.results_pruned, pruned.changed) == (1, [2])
    assert region[2]["content"] == log_output(1), "input not mutated"


def test_identical_outputs_point_to_the_first() -> None:
    same = log_output(7)
    region = [
        call(("a", "bash", {"command": "git status"})),
        result("a", same),
        call(("b", "bash", {"command": "git status"})),
        result("b", same),
    ]
    pruned = prune_region(region)
    assert pruned.duplicates == 1
    assert pruned.messages[3]["content"].startswith("[same output as the bash call a earlier")


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(json.dumps({"path": "a.py", "content": "x" * 5_000}), id="long-string-value"),
        pytest.param(json.dumps({f"k{i}": "v" * 40 for i in range(60)}), id="many-keys"),
        pytest.param("not json " * 100, id="not-json"),
        pytest.param(json.dumps(["y" * 2_000, {"deep": ["z" * 2_000]}]), id="nested"),
    ],
)
def test_shrunk_arguments_stay_valid_json(arguments: str) -> None:
    shrunk = shrink_arguments(arguments)
    assert len(shrunk) <= ARGS_MAX_CHARS
    json.loads(shrunk)
    assert shrink_arguments(shrunk) == shrunk


def test_pruning_is_idempotent() -> None:
    convo = coding_session()
    once = prune_region(convo).messages
    twice = prune_region(once)
    assert twice.changed == [] and twice.messages == once


# ---------------------------------------------------------------- prune_tool_results_only


def test_proactive_pruning_is_opt_in() -> None:
    convo = coding_session(turns=30)
    e = ContextCompressor(context_length=200_000)
    out, reclaimed = e.prune_tool_results_only(convo)
    assert out is convo and reclaimed == 0


def test_proactive_pruning_commits_big_savings_and_keeps_pairs() -> None:
    convo = coding_session(turns=30)
    e = ContextCompressor(
        context_length=200_000, proactive_prune_tokens=10_000, tail_token_budget=2_000
    )
    out, reclaimed = e.prune_tool_results_only(convo, current_tokens=20_000)
    assert out is not convo and reclaimed >= 4_096
    validate_messages(out)
    assert tool_pairs_intact(out)
    assert out[-6:] == convo[-6:], "the protected tail is untouched"
    again, more = e.prune_tool_results_only(out, current_tokens=20_000)
    assert again is out and more == 0, "idempotent"
    assert e.compression_count == 0


@pytest.mark.parametrize(
    ("current", "convo"),
    [
        pytest.param(5_000, coding_session(turns=30), id="under-the-trigger"),
        pytest.param(20_000, coding_session(turns=3), id="saves-under-4096"),
    ],
)
def test_proactive_pruning_returns_the_same_list_when_not_worth_it(
    current: int, convo: list[Message]
) -> None:
    e = ContextCompressor(context_length=200_000, proactive_prune_tokens=10_000)
    out, reclaimed = e.prune_tool_results_only(convo, current_tokens=current)
    assert out is convo and reclaimed == 0


def test_pass_one_keeps_user_and_assistant_prose() -> None:
    convo = [system(), user("task"), assistant("plan " * 200)]
    convo += coding_session(turns=8)[1:]
    e = ContextCompressor(context_length=16_000, archive=False)  # the plain pass-1 target
    out = e.compress(convo)
    assert e.last_compression is not None and e.last_compression.reason == "pruned"
    assert [m.get("content") for m in out if m["role"] in ("user", "assistant")] == [
        m.get("content") for m in convo if m["role"] in ("user", "assistant")
    ]


def test_descriptor_keeps_the_outputs_exact_identifiers() -> None:
    output = "\n".join(
        [f"collecting line {n}" for n in range(200)]
        + ["src/billing/invoice.py:88: in total", "KeyError: 'order_7781'"]
        + [f"teardown line {n}" for n in range(200)]
    )
    region = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]
    pruned = prune_region(region).messages[1]["content"]
    assert pruned.startswith(DESCRIPTOR_PREFIX)
    assert "src/billing/invoice.py" in pruned
    assert "order_7781" in pruned
    # A descriptor is never pruned again, however long its identifiers make it.
    assert prune_region([region[0], {**region[1], "content": pruned}]).results_pruned == 0


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        pytest.param({"urls": ["https://example.com/a"]}, "urls=https://example.com/a", id="list"),
        pytest.param(
            {"urls": ["https://example.com/a", "https://example.com/b"]},
            "urls=https://example.com/a (+1 more)",
            id="list-of-two",
        ),
        pytest.param(
            {"source": {"url": "https://example.com/doc"}, "format": "markdown"},
            "source=https://example.com/doc",
            id="object",
        ),
        pytest.param(
            {"urls": [{"url": "https://example.com/x", "render": True}]},
            "urls=https://example.com/x",
            id="list-of-objects",
        ),
    ],
)
def test_descriptors_keep_urls_given_as_objects(args: dict[str, Any], shown: str) -> None:
    descriptor = describe_tool_output("web_extract", json.dumps(args), "page text " * 100)
    assert "web_extract()" not in descriptor
    assert f"web_extract({shown}" in descriptor


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 50_000}}
WEB_IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/chart.png"}}


def test_images_in_pruned_messages_become_one_line_placeholders() -> None:
    region = [
        user([{"type": "text", "text": "What is in these?"}, IMAGE, WEB_IMAGE]),
        assistant("A cat and a chart."),
    ]
    pruned = prune_region(region)
    parts = pruned.messages[0]["content"]
    assert parts[0] == {"type": "text", "text": "What is in these?"}
    assert parts[1] == {"type": "text", "text": "[image omitted after compaction]"}
    assert parts[2]["text"] == "[image omitted after compaction: https://example.com/chart.png]"
    assert pruned.images_replaced == 2 and pruned.changed == [0]
    assert region[0]["content"][1] is IMAGE  # the input is not mutated


def test_a_compaction_replaces_images_in_old_messages_only() -> None:
    history = coding_session(turns=8)
    history.insert(2, user([{"type": "text", "text": "Here is the failure:"}, IMAGE]))
    history.insert(3, assistant("I see the traceback in the screenshot."))
    history.append(user([{"type": "text", "text": "And now this one:"}, WEB_IMAGE]))
    engine = ContextCompressor(context_length=32_000, model="gpt-4o", protect_first_n=1)
    compacted = engine.compress(history, force=True)
    images = [
        part
        for message in compacted
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]
    assert images == [WEB_IMAGE]  # the latest turn keeps its image
    validate_messages(compacted)


def test_blank_user_echoes_are_dropped_from_the_pruned_region() -> None:
    region = [
        call(("c1", "bash", {"command": "ls"})),
        result("c1", log_output(1, 1_000)),
        user(""),
        user([{"type": "text", "text": "   "}]),
        assistant("Listed the files."),
        user("Thanks, now count them."),
    ]
    pruned = prune_region(region)
    assert pruned.dropped == [2, 3]
    assert [m["role"] for m in pruned.kept()] == ["assistant", "tool", "assistant", "user"]
    history = [system(), user("List the files."), *region, assistant("There are 12.")]
    history.append(user("And the hidden ones?"))
    engine = ContextCompressor(
        context_length=32_000, model="gpt-4o", protect_first_n=1, protect_last_n=2
    )
    compacted = engine.compress(history, force=True)
    assert not any(m["role"] == "user" and not m["content"] for m in compacted)
    assert len(compacted) < len(history)
    validate_messages(compacted)


def test_a_blank_user_message_with_no_user_text_after_it_is_kept() -> None:
    # Dropping it could leave a request with no user message at all, which
    # some providers refuse (found by benchmarks/reliability/sessions.py).
    region = [user(""), call(("c1", "bash", {"command": "ls"})), result("c1", "a\nb")]
    assert prune_region(region).dropped == []
