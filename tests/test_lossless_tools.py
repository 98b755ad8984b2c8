"""The lossless engine's model-facing tools: lcm_grep, lcm_describe, lcm_expand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contextengine.engines.lossless import LosslessEngine
from contextengine.engines.lossless.tools import MAX_CONTENT_CHARS, TOOLS
from contextengine.store import SQLiteStore

Message = dict[str, Any]
# Every result must stay well under what a model can take in one tool result.
MAX_RESULT_CHARS = 2 * MAX_CONTENT_CHARS + 4_000


def chat(topic: str, turns: int) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "You help with " + topic}]
    for i in range(turns):
        call = f"{topic[:3]}_{i}"
        messages += [
            {"role": "user", "content": f"{topic} question {i}: where is item {topic}-{i:03d}?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "find", "arguments": json.dumps({"item": i})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": f"{topic}-{i:03d} is in bin {i * 7}"},
            {"role": "assistant", "content": f"Item {topic}-{i:03d} is in bin {i * 7}."},
        ]
    return messages


def call(engine: LosslessEngine, name: str, **args: Any) -> dict[str, Any]:
    raw = engine.handle_tool_call(name, args)
    assert len(raw) <= MAX_RESULT_CHARS
    result = json.loads(raw)
    assert isinstance(result, dict)
    return result


@pytest.fixture
def engine() -> Iterator[LosslessEngine]:
    eng = LosslessEngine(context_length=3_000, store=":memory:")
    eng.on_session_start("tools")
    history = chat("orchard", 40)
    eng.select_context(history, conversation_messages=history)
    eng.compress(history)
    yield eng
    eng.close()


def summary_ids(engine: LosslessEngine) -> list[str]:
    assert engine.conversation_id is not None
    return [r.id for r in engine.store.get_context(engine.conversation_id) if r.kind == "summary"]


# ---------------------------------------------------------------- schemas


def test_schemas_come_from_the_typed_definitions(engine: LosslessEngine) -> None:
    schemas = {s["function"]["name"]: s["function"] for s in engine.get_tool_schemas()}
    assert set(schemas) == {"lcm_grep", "lcm_describe", "lcm_expand"}
    grep = schemas["lcm_grep"]["parameters"]
    assert grep["required"] == ["query"]
    assert grep["properties"]["mode"]["enum"] == ["text", "regex"]
    assert grep["properties"]["scope"]["enum"] == ["messages", "summaries", "all"]
    assert grep["properties"]["limit"]["maximum"] == 50
    assert schemas["lcm_describe"]["parameters"]["required"] == ["id"]
    expand = schemas["lcm_expand"]["parameters"]
    assert expand["required"] == ["id"]
    assert set(expand["properties"]) == {"id", "offset", "limit"}
    for schema in schemas.values():
        assert schema["description"]
        assert schema["parameters"]["additionalProperties"] is False
        # The dispatcher accepts exactly the arguments the schema announces.
        assert [a.name for a in TOOLS[schema["name"]].args] == list(
            schema["parameters"]["properties"]
        )


@pytest.mark.parametrize(
    ("name", "args", "problem"),
    [
        pytest.param("lcm_nope", {}, "Unknown context engine tool", id="unknown-tool"),
        pytest.param("lcm_grep", {}, "needs the argument 'query'", id="missing-query"),
        pytest.param("lcm_grep", {"query": "x", "colour": 1}, "unknown argument", id="extra-arg"),
        pytest.param("lcm_grep", {"query": "x", "mode": "fuzzy"}, "must be one of", id="bad-mode"),
        pytest.param("lcm_grep", {"query": "x", "limit": "many"}, "integer", id="bad-limit"),
        pytest.param("lcm_grep", {"query": "x", "limit": 0}, ">= 1", id="zero-limit"),
        pytest.param("lcm_grep", {"query": "   "}, "empty", id="empty-query"),
        pytest.param("lcm_grep", {"query": "(", "mode": "regex"}, "regular expression", id="regex"),
        pytest.param("lcm_grep", {"query": "x", "cursor": "garbage!"}, "", id="bad-cursor"),
        pytest.param("lcm_describe", {"id": 42}, "string", id="id-not-string"),
        pytest.param("lcm_describe", {"id": "msg_0000000000000000"}, "unknown id", id="unknown"),
        pytest.param("lcm_expand", {"id": "sum_ffffffffffffffff"}, "unknown id", id="no-sum"),
        pytest.param("lcm_expand", {"id": "x", "offset": -1}, ">= 0", id="negative-offset"),
    ],
)
def test_errors_are_json_naming_the_problem(
    engine: LosslessEngine, name: str, args: dict[str, Any], problem: str
) -> None:
    raw = engine.handle_tool_call(name, args)
    result = json.loads(raw)
    assert set(result) == {"error"}
    assert problem in result["error"]
    assert "Traceback" not in raw


def test_arguments_may_arrive_as_a_json_string(engine: LosslessEngine) -> None:
    result = json.loads(engine.handle_tool_call("lcm_grep", '{"query": "orchard-007"}'))  # type: ignore[arg-type]  # models send strings
    assert result["results"]


# ---------------------------------------------------------------- lcm_grep


def test_grep_finds_what_left_the_view_and_names_its_summary(engine: LosslessEngine) -> None:
    result = call(engine, "lcm_grep", query='"orchard-003"')
    hit = result["results"][0]
    assert set(hit) == {"id", "kind", "seq", "role", "snippet", "summary_id"}
    assert hit["kind"] == "message" and isinstance(hit["seq"], int)
    assert hit["summary_id"] is not None  # it left the view; this summary stands for it
    recent = call(engine, "lcm_grep", query='"orchard-039"')["results"]
    assert any(h["summary_id"] is None for h in recent)  # still in the fresh tail


@pytest.mark.parametrize(
    ("mode", "query"),
    [pytest.param("text", "orchard bin", id="text"), pytest.param("regex", r"bin \d+", id="regex")],
)
def test_grep_pages_through_every_result_once(
    engine: LosslessEngine, mode: str, query: str
) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = call(engine, "lcm_grep", query=query, mode=mode, limit=7, cursor=cursor)
        assert len(page["results"]) <= 7
        seen += [hit["id"] for hit in page["results"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages > 2
    assert len(seen) == len(set(seen))
    assert len(seen) >= 40


def test_grep_limit_is_capped_and_snippets_bounded(engine: LosslessEngine) -> None:
    page = call(engine, "lcm_grep", query="orchard", limit=10_000)
    assert 0 < len(page["results"]) <= 50
    assert all(len(hit["snippet"]) <= 300 for hit in page["results"])


@pytest.mark.parametrize(
    "scope", [pytest.param("messages", id="messages"), pytest.param("summaries", id="summaries")]
)
def test_grep_scope(engine: LosslessEngine, scope: str) -> None:
    page = call(engine, "lcm_grep", query="orchard", scope=scope, limit=50)
    kind = "message" if scope == "messages" else "summary"
    assert page["results"]
    assert {hit["kind"] for hit in page["results"]} == {kind}


@pytest.mark.parametrize(
    "query",
    [
        pytest.param('"unbalanced', id="open-quote"),
        pytest.param("AND OR NOT", id="operators"),
        pytest.param("NEAR(orchard bin", id="near"),
        pytest.param("bin* -orchard ^col:x {a}", id="syntax-soup"),
    ],
)
def test_user_text_never_breaks_the_search_syntax(engine: LosslessEngine, query: str) -> None:
    assert "error" not in call(engine, "lcm_grep", query=query)


# ---------------------------------------------------------------- lcm_describe / lcm_expand


def test_describe_a_summary_and_a_message(engine: LosslessEngine) -> None:
    summary_id = summary_ids(engine)[0]
    described = call(engine, "lcm_describe", id=summary_id)
    assert described["kind"] == "summary"
    for key in ("depth", "seq_range", "time_range", "token_count", "source_ids", "parent_summary"):
        assert key in described
    assert described["in_view"] is True
    source = described["source_ids"][0]
    child = call(engine, "lcm_describe", id=source)
    assert child["parent_summary"] == summary_id
    assert child["kind"] in ("message", "summary")


def leaf_summary(engine: LosslessEngine) -> str:
    assert engine.conversation_id is not None
    stack = summary_ids(engine)
    while stack:
        record = engine.store.get_summary(engine.conversation_id, stack.pop(0))
        assert record is not None
        if record.kind == "leaf":
            return record.id
        stack = list(record.source_ids) + stack
    raise AssertionError("no leaf summary")


def test_expand_a_summary_returns_its_sources_in_order_paginated(engine: LosslessEngine) -> None:
    summary_id = leaf_summary(engine)
    first = call(engine, "lcm_expand", id=summary_id, limit=3)
    assert len(first["items"]) == 3
    assert first["next_offset"] == 3
    everything: list[dict[str, Any]] = list(first["items"])
    offset = first["next_offset"]
    while offset is not None:
        page = call(engine, "lcm_expand", id=summary_id, offset=offset, limit=3)
        everything += page["items"]
        offset = page["next_offset"]
    seqs = [item["seq"] for item in everything]
    assert seqs == sorted(seqs) and len(seqs) == first["total_items"]
    assert "orchard" in everything[0]["content"]


def test_expand_a_message_in_character_pages(engine: LosslessEngine) -> None:
    hit = call(engine, "lcm_grep", query='"orchard-005"', scope="messages")["results"][0]
    whole = call(engine, "lcm_expand", id=hit["id"])
    assert "orchard-005" in whole["content"] and whole["next_offset"] is None
    pieces, offset = [], 0
    while offset is not None:
        page = call(engine, "lcm_expand", id=hit["id"], offset=offset, limit=10)
        pieces.append(page["content"])
        offset = page["next_offset"]
    assert "".join(pieces) == whole["content"]


def test_expand_is_bounded_per_call() -> None:
    eng = LosslessEngine(context_length=8_000, store=":memory:", large_content_tokens=500)
    huge = "x" * (5 * MAX_CONTENT_CHARS)
    history = [
        {"role": "user", "content": "dump"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "d", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": huge},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
    ]
    eng.select_context(history, conversation_messages=history)
    tool_hit = call(eng, "lcm_grep", query="dump", scope="messages")["results"][0]
    assert tool_hit["role"] == "user"
    message = call(eng, "lcm_grep", query="x" * 3, mode="regex", scope="messages")["results"][0]
    page = call(eng, "lcm_expand", id=message["id"], limit=10**9)
    assert len(page["content"]) == MAX_CONTENT_CHARS
    assert page["next_offset"] == MAX_CONTENT_CHARS
    eng.close()


# ---------------------------------------------------------------- isolation


def test_nothing_of_another_conversation_is_reachable() -> None:
    store = SQLiteStore(":memory:")
    alice = LosslessEngine(context_length=3_000, store=store)
    bob = LosslessEngine(context_length=3_000, store=store, large_content_tokens=300)
    alice.on_session_start("alice")
    bob.on_session_start("bob")
    a_history = chat("orchard", 30)
    b_history = chat("zeppelin", 30)
    b_history[1] = {"role": "user", "content": "the vault code is KUMQUAT-7781, keep it secret"}
    b_history.append({"role": "user", "content": "paste the manifest"})
    b_history.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "big", "type": "function", "function": {"name": "cat", "arguments": "{}"}}
            ],
        }
    )
    b_history.append({"role": "tool", "tool_call_id": "big", "content": "KUMQUAT " * 2_000})
    for eng, history in ((alice, a_history), (bob, b_history)):
        eng.select_context(history, conversation_messages=history)
        eng.compress(history)
    assert bob.conversation_id is not None
    bob_ids = {m.id for m in store.get_messages(bob.conversation_id)}
    bob_ids |= {r.id for r in store.get_context(bob.conversation_id)}
    large = json.loads(bob.handle_tool_call("lcm_grep", {"query": "manifest"}))
    assert large["results"]
    bob_ids |= {
        json.loads(bob.handle_tool_call("lcm_describe", {"id": i})).get("large_content_id", "")
        for i in list(bob_ids)
    } - {""}
    assert any(not i.startswith(("msg_", "sum_")) for i in bob_ids)  # a large content is included
    # Bob can see his own things...
    assert json.loads(bob.handle_tool_call("lcm_grep", {"query": "KUMQUAT"}))["results"]
    # ...Alice can see none of them, by id, query or regex.
    for item_id in sorted(bob_ids):
        for tool in ("lcm_describe", "lcm_expand"):
            result = call(alice, tool, id=item_id)
            assert "unknown id" in result["error"]
    for query, mode in [
        ("KUMQUAT", "text"),
        ('"KUMQUAT-7781"', "text"),
        ("zeppelin", "text"),
        ("vault OR code OR secret", "text"),
        ("KUMQ.*", "regex"),
        (".", "regex"),
        ("(?s).*", "regex"),
    ]:
        cursor = None
        while True:
            page = call(alice, "lcm_grep", query=query, mode=mode, limit=50, cursor=cursor)
            for hit in page["results"]:
                assert hit["id"] not in bob_ids
                assert "KUMQUAT" not in hit["snippet"] and "zeppelin" not in hit["snippet"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
    # Bob's cursors mean nothing in Alice's conversation either.
    bob_page = json.loads(bob.handle_tool_call("lcm_grep", {"query": "zeppelin", "limit": 1}))
    if bob_page["next_cursor"]:
        stolen = call(alice, "lcm_grep", query="zeppelin", cursor=bob_page["next_cursor"])
        assert not stolen.get("results")
    alice.close()
    bob.close()
    store.close()


# ---------------------------------------------------------------- bounds of errors


def test_errors_quote_a_huge_argument_only_in_part(engine: LosslessEngine) -> None:
    # Found by benchmarks/reliability/isolation.py: a 1 MB id came back whole
    # in "unknown id ...", a 1 MB regex made the check recurse past Python's limit.
    huge = "x" * 1_000_000
    for name, args in [
        ("lcm_expand", {"id": huge}),
        ("lcm_describe", {"id": huge}),
        ("lcm_expand", {"id": "a", "offset": huge}),
        ("lcm_grep", {"query": "orchard", "mode": huge}),
        ("lcm_grep", {"query": "orchard", huge: 1}),
        (huge, {}),
    ]:
        result = (
            call(engine, name, **args)
            if name in TOOLS
            else json.loads(engine.handle_tool_call(name, args))
        )
        assert len(result["error"]) < 400
    nested = "NEAR( OR * " * 100_000
    result = call(engine, "lcm_grep", query=nested, mode="regex")
    assert result["error"] == "regular expression too long (over 1000 characters)"
    assert (
        "invalid regular expression" in call(engine, "lcm_grep", query="(", mode="regex")["error"]
    )


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("lcm_expand", {"id": "msg_\x00x"}),
        ("lcm_describe", {"id": "sum_\x00x"}),
        ("lcm_grep", {"query": "needle\x00", "mode": "regex"}),
        ("lcm_grep", {"query": "needle\x00"}),
    ],
)
def test_a_nul_in_any_argument_is_one_clear_error_that_names_no_archive(
    tool: str, args: dict[str, Any]
) -> None:
    engine = LosslessEngine(store=":memory:", context_length=8_000)
    engine.on_session_start("nul")
    engine.compress([{"role": "user", "content": "needle"}], force=True)
    result = json.loads(engine.handle_tool_call(tool, args))
    assert result == {"error": f"{next(iter(args))} must not contain NUL (0x00) characters"}


def test_grep_shows_a_reply_found_through_the_question_before_it() -> None:
    eng = LosslessEngine(context_length=3_000, store=":memory:")
    try:
        eng.on_session_start("codeword")
        history: list[Message] = [
            {"role": "user", "content": "The codeword is marmoset."},
            {"role": "assistant", "content": "noted"},
        ]
        eng.select_context(history, conversation_messages=history)
        question, reply = call(eng, "lcm_grep", query="codeword")["results"]
    finally:
        eng.close()
    assert "matched_in" not in question and "«codeword»" in question["snippet"]
    assert reply["matched_in"] == "context" and reply["snippet"] == "noted"
    assert reply["context"] == "The «codeword» is marmoset."
