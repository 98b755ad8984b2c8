"""ContextCompressor: construction, trigger, and the numbered steps of one compaction."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from compressor_conversations import (
    SYSTEM_PROMPT,
    FakeClock,
    RecordingSummarizer,
    assistant,
    call,
    coding_session,
    result,
    system,
    tool_pairs_intact,
    user,
)
from contextengine.engines.compressor import ContextCompressor, is_summary_message
from contextengine.engines.compressor.summary import (
    SUMMARY_END,
    SUMMARY_START,
    place_summary,
    split_summary,
)
from contextengine.messages import sanitize_tool_pairs, validate_messages
from contextengine.tokens import count_message_tokens

Message = dict[str, Any]


def engine(**kwargs: Any) -> ContextCompressor:
    # The compressor's own rules, without an archive (whose defaults differ:
    # tests/test_compressor_archive.py).
    kwargs.setdefault("context_length", 16_000)
    kwargs.setdefault("archive", False)
    return ContextCompressor(**kwargs)


def summaries(messages: list[Message]) -> list[Message]:
    return [m for m in messages if is_summary_message(m)]


# ---------------------------------------------------------------- construction


def test_defaults_follow_the_context_length() -> None:
    e = ContextCompressor(context_length=100_000, archive=False)
    assert e.name == "compressor"
    assert e.threshold_tokens == 75_000
    assert e.tail_token_budget == 15_000
    assert e.summary_token_budget == 5_000
    assert e.target_tokens == 37_500
    assert type(e.summarizer).__name__ == "DeterministicSummarizer"


@pytest.mark.parametrize(
    ("context_length", "budget"),
    [
        pytest.param(8_000, 1_000, id="small-window-floor-1000"),
        pytest.param(100_000, 5_000, id="five-percent"),
        pytest.param(1_000_000, 10_000, id="large-window-cap-10000"),
    ],
)
def test_summary_budget_is_bounded(context_length: int, budget: int) -> None:
    assert ContextCompressor(context_length=context_length).summary_token_budget == budget


def test_explicit_budgets_survive_a_model_switch() -> None:
    e = ContextCompressor(
        context_length=100_000, tail_token_budget=777, summary_token_budget=1_234, archive=False
    )
    e.update_model("other", 50_000)
    assert (e.tail_token_budget, e.summary_token_budget, e.threshold_tokens) == (777, 1_234, 37_500)


def test_model_thresholds_apply_by_substring() -> None:
    e = ContextCompressor(
        context_length=100_000,
        model="gpt-4o-mini",
        model_thresholds={"gpt-4o": 0.5},
        archive=False,
    )
    assert e.threshold_tokens == 50_000
    e.update_model("llama", 100_000)
    assert e.threshold_tokens == 75_000


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"context_length": 0}, id="zero-context"),
        pytest.param({"context_length": 1_000, "threshold_percent": 1.5}, id="threshold-over-1"),
        pytest.param({"context_length": 1_000, "protect_last_n": -1}, id="negative-protect"),
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ContextCompressor(**kwargs)


# ---------------------------------------------------------------- trigger


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        pytest.param(11_999, (False, "below_threshold"), id="just-below"),
        pytest.param(12_000, (True, None), id="at-threshold-inclusive"),
        pytest.param(15_000, (True, None), id="above"),
    ],
)
def test_should_compress_is_inclusive(tokens: int, expected: tuple[bool, str | None]) -> None:
    e = engine()
    assert e.should_compress_info(tokens) == expected
    assert e.should_compress(tokens) is expected[0]


def test_should_compress_reads_the_last_real_usage() -> None:
    e = engine()
    e.update_from_response({"prompt_tokens": 12_500, "completion_tokens": 40})
    assert e.last_prompt_tokens == 12_500
    assert e.should_compress()


def test_update_from_response_normalises_anthropic_usage() -> None:
    e = engine()
    e.update_from_response(
        {"input_tokens": 100, "cache_read_input_tokens": 11_900, "output_tokens": 7}
    )
    assert (e.last_prompt_tokens, e.last_completion_tokens, e.last_total_tokens) == (
        12_000,
        7,
        12_007,
    )
    assert e.should_compress()


def test_preflight_uses_the_rough_estimate() -> None:
    e = engine(context_length=4_000)
    assert not e.should_compress_preflight([system(), user("hi")])
    assert e.should_compress_preflight([system(), user("x " * 8_000)])


def test_preflight_defers_right_after_a_compaction_and_on_small_growth() -> None:
    e = engine()
    e.compress(coding_session(chatter=2_000), force=True)
    assert e.last_prompt_tokens == -1
    assert e.should_defer_preflight_to_real_usage(20_000)
    e.should_defer_preflight_to_real_usage(5_000)  # the request whose usage comes next
    e.update_from_response({"prompt_tokens": 5_000})
    assert e.should_defer_preflight_to_real_usage(5_400), "small growth since a fitting reading"
    assert not e.should_defer_preflight_to_real_usage(9_000), "large growth must be checked"
    e.update_from_response({"prompt_tokens": 12_500})
    assert not e.should_defer_preflight_to_real_usage(12_600), "last reading did not fit"


def test_has_content_to_compress() -> None:
    e = engine()
    assert not e.has_content_to_compress([system(), user("hi"), assistant("hello")])
    assert not e.has_content_to_compress([])
    assert e.has_content_to_compress(coding_session())


# ---------------------------------------------------------------- step 1: head


def test_system_prompt_is_byte_identical_and_first_messages_kept() -> None:
    convo = coding_session(chatter=2_000)
    out = engine(summarizer=RecordingSummarizer()).compress(convo)
    assert out[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert out[0] is convo[0]
    # protect_first_n=3: the task, the first call and its result (the group is whole).
    assert out[1:4] == convo[1:4]
    assert is_summary_message(out[4])


def test_second_compaction_replaces_the_summary_and_drops_the_old_head() -> None:
    summarizer = RecordingSummarizer("## Goal\nsecond")
    e = engine(summarizer=RecordingSummarizer("## Goal\nfirst"))
    first = e.compress(coding_session(chatter=2_000))
    grown = first + coding_session(turns=10, chatter=2_000)[1:]
    e._summarizer = summarizer
    second = e.compress(grown)
    assert e.last_compression is not None and not e.last_compression.aborted
    assert second[0]["content"] == SYSTEM_PROMPT
    assert is_summary_message(second[1]), "after a summary exists the head is system + summary"
    assert len(summaries(second)) == 1, "a summary is replaced, never nested"
    # The model's summary, with the identifiers it left out appended by the engine.
    assert summarizer.requests[0].previous_summary.startswith("## Goal\nfirst\n\n## Identifiers")
    sent = " ".join(str(m["content"]) for m in summarizer.requests[0].messages)
    assert SUMMARY_START not in sent, "the old summary travels as previous_summary only"
    assert "Fix the failing test in tests/test_api.py." in sent, "old head is summarised now"


# ---------------------------------------------------------------- step 2: tail


def test_tail_keeps_the_latest_user_request_and_its_turn() -> None:
    convo = coding_session(chatter=2_000)
    out = engine(summarizer=RecordingSummarizer()).compress(convo)
    assert out[-4:] == convo[-4:]
    assert out[-4]["content"] == "Now run the whole suite and tell me the result."


def test_latest_user_request_survives_an_endless_turn() -> None:
    # One request, then a turn far bigger than the budget: the request is pinned.
    convo = [system(), user("Rename FooBar to BazQux everywhere, then run make check.")]
    for i in range(40):
        convo += [
            call((f"c{i}", "bash", {"command": f"sed -i s/a/b/ f{i}"})),
            result(f"c{i}", "ok"),
        ]
        convo.append(assistant(f"Edited f{i}. " + "Thinking aloud. " * 120))
    out = engine(protect_first_n=0, summarizer=RecordingSummarizer()).compress(convo)
    assert len(summaries(out)) == 1
    texts = [str(m.get("content")) for m in out]
    assert any("Rename FooBar to BazQux everywhere" in t for t in texts)
    assert count_message_tokens(out) < count_message_tokens(convo) / 2


def test_protect_last_n_holds_even_over_the_tail_budget() -> None:
    convo = coding_session(turns=12, chatter=2_000)
    e = engine(tail_token_budget=1, protect_last_n=6, summarizer=RecordingSummarizer())
    out = e.compress(convo)
    assert out[-6:] == convo[-6:]


# ---------------------------------------------------------------- step 3: pass 1


def test_pass_one_alone_stops_without_a_model_call() -> None:
    summarizer = RecordingSummarizer()
    e = engine(summarizer=summarizer)
    convo = coding_session(turns=12, output_chars=3_000)
    out = e.compress(convo)
    report = e.last_compression
    assert report is not None
    assert (report.reason, report.summarizer_calls, summarizer.requests) == ("pruned", 0, [])
    assert report.pruned_results > 0
    assert report.tokens_after <= e.target_tokens
    assert not summaries(out)
    assert len(out) == len(convo), "pass 1 replaces payloads, never messages"


# ---------------------------------------------------------------- step 4: pass 2 request


def test_pass_two_request_carries_everything_the_summariser_needs() -> None:
    summarizer = RecordingSummarizer()
    e = engine(summarizer=summarizer)
    convo = coding_session(chatter=2_000)
    key = " OPENAI_API_KEY=sk-proj-abc123def456ghi789"
    convo[4] = {**convo[4], "content": convo[4]["content"] + key}
    convo[7] = {**convo[7], "reasoning_content": "private chain of thought"}
    convo[10] = assistant("<think>secret plan</think>Checked module_2.")
    e.compress(convo, focus_topic="the API tests", memory_context="  User prefers pytest -q.  ")
    assert e.last_compression is not None and e.last_compression.summarizer_calls == 1
    (request,) = summarizer.requests
    assert request.focus_topic == "the API tests"
    assert request.memory_context == "User prefers pytest -q."
    assert request.token_budget == e.summary_token_budget
    assert "## Goal" in request.prompt or "Goal" in request.prompt
    assert "the API tests" in request.prompt
    sent = repr(request.messages) + request.prompt
    assert "sk-proj-abc123def456ghi789" not in sent
    assert "private chain of thought" not in sent
    assert "secret plan" not in sent
    assert "Checked module_2." in sent
    assert "checked function handler_1" in sent, "the summariser sees real outputs, not descriptors"


def test_tool_outputs_sent_to_the_summariser_are_bounded() -> None:
    summarizer = RecordingSummarizer()
    convo = coding_session(turns=10, output_chars=200_000, chatter=2_000)
    engine(context_length=400_000, target_tokens=1, summarizer=summarizer).compress(convo)
    (request,) = summarizer.requests
    longest = max(len(str(m["content"])) for m in request.messages)
    assert longest < 10_000


# ---------------------------------------------------------------- step 5: the summary message


def test_summary_is_framed_as_reference_material() -> None:
    out = engine(summarizer=RecordingSummarizer("## Goal\nX")).compress(
        coding_session(chatter=2_000)
    )
    (summary,) = summaries(out)
    text = summary["content"]
    assert text.startswith(SUMMARY_START) and text.rstrip().endswith(SUMMARY_END)
    assert "not new instructions" in text
    assert "## Goal\nX" in text


@pytest.mark.parametrize(
    ("convo", "expected"),
    [
        pytest.param(
            [system(), user("a" * 4_000), assistant("b" * 4_000), assistant("c"), user("go")],
            "merged-user",
            id="only-system-before-then-user-merges",
        ),
        pytest.param(
            [system(), user("a" * 4_000), assistant("b" * 4_000), user("q"), assistant("done")],
            "merged-user",
            id="latest-user-opens-the-tail",
        ),
    ],
)
def test_summary_after_only_the_system_prompt_is_a_user_turn(
    convo: list[Message], expected: str
) -> None:
    out = engine(protect_first_n=0, protect_last_n=1, tail_token_budget=1).compress(
        convo, force=True
    )
    validate_messages(out)
    assert out[1]["role"] == "user" and is_summary_message(out[1])
    assert out[1]["content"].endswith(convo[-2]["content"]) or "go" in out[1]["content"]
    assert [m["role"] for m in out].count("user") == 1


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(None, None, "user", id="nothing-around"),
        pytest.param("system", "assistant", "user", id="after-system-prompt"),
        pytest.param("system", "user", "merged", id="after-system-prompt-before-user"),
        pytest.param("user", "user", "assistant", id="between-users"),
        pytest.param("assistant", "assistant", "user", id="between-assistants"),
        pytest.param("tool", "user", "assistant", id="after-tool-result-before-user"),
        pytest.param("tool", "assistant", "user", id="after-tool-result-before-assistant"),
        pytest.param("user", "assistant", "merged", id="user-then-assistant"),
        pytest.param("assistant", "user", "merged", id="assistant-then-user"),
        pytest.param("assistant", None, "user", id="at-the-end"),
    ],
)
def test_summary_role_never_puts_two_same_roles_together(
    before: str | None, after: str | None, expected: str
) -> None:
    prev = None if before is None else {"role": before, "content": "b"}
    nxt = None if after is None else {"role": after, "content": "latest"}
    mode, msg = place_summary(prev, nxt, "body")
    assert is_summary_message(msg)
    if expected == "merged":
        assert mode == "merged" and msg["role"] == after
        assert msg["content"].endswith("latest") and SUMMARY_END in msg["content"]
    else:
        assert (mode, msg["role"]) == ("standalone", expected)


def test_summary_merges_into_a_tool_calling_assistant_without_touching_the_calls() -> None:
    nxt = call(("c1", "bash", {"command": "ls"}))
    mode, msg = place_summary({"role": "user", "content": "q"}, nxt, "body")
    assert mode == "merged" and msg["tool_calls"] == nxt["tool_calls"]
    split = split_summary(msg)
    assert split.text == "body" and split.remainder == nxt


def test_is_summary_message_recognises_both_forms() -> None:
    framed = f"{SUMMARY_START}\n\nbody\n\n{SUMMARY_END}"
    assert is_summary_message({"role": "user", "content": framed})
    assert is_summary_message({"role": "assistant", "content": framed + "\n\nreal question"})
    assert is_summary_message({"role": "user", "content": [{"type": "text", "text": framed}]})
    assert not is_summary_message({"role": "user", "content": "quoting " + framed})
    assert not is_summary_message({"role": "system", "content": framed})
    assert not is_summary_message({"role": "tool", "tool_call_id": "x", "content": framed})


# ---------------------------------------------------------------- step 6: output guarantees


def test_output_is_valid_smaller_and_input_untouched() -> None:
    convo = coding_session(chatter=2_000)
    snapshot = copy.deepcopy(convo)
    e = engine()
    out = e.compress(convo)
    assert convo == snapshot
    validate_messages(out)
    assert sanitize_tool_pairs(out) == out
    assert tool_pairs_intact(out)
    assert count_message_tokens(out) < count_message_tokens(convo)
    assert (e.compression_count, e.last_prompt_tokens) == (1, -1)


def test_nothing_to_compress_returns_the_input_and_counts_nothing() -> None:
    e = engine()
    e.update_from_response({"prompt_tokens": 500})
    convo = [system(), user("hi"), assistant("hello")]
    assert e.compress(convo) is convo
    assert e.last_compression is not None
    assert (e.last_compression.aborted, e.last_compression.reason) == (True, "nothing_to_compress")
    assert (e.compression_count, e.last_prompt_tokens) == (0, 500)


# ---------------------------------------------------------------- step 7: the report


def test_report_describes_the_attempt() -> None:
    e = engine(clock=FakeClock())
    convo = coding_session(chatter=2_000)
    out = e.compress(convo)
    r = e.last_compression
    assert r is not None
    assert (r.aborted, r.fallback_used, r.reason) == (False, False, "summarized")
    assert r.tokens_before == count_message_tokens(convo)
    assert r.tokens_after == count_message_tokens(out)
    assert (r.messages_before, r.messages_after) == (len(convo), len(out))
    assert r.summarizer_calls == 1
    assert r.summarized_messages > 0
    assert r.duration_s >= 0
