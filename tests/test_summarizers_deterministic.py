"""DeterministicSummarizer: requests verbatim, actions, anchors, merged and fitted to a budget."""

from __future__ import annotations

from typing import Any

import pytest

from contextengine.anchors import anchor_set
from contextengine.identifiers import listed_identifiers
from contextengine.summarizers import DeterministicSummarizer, Summarizer, SummaryRequest
from contextengine.tokens import count_tokens

Message = dict[str, Any]


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _session() -> list[Message]:
    return [
        {
            "role": "user",
            "content": "Fix the failing test in tests/test_api.py.\nKeep the public API stable.",
        },
        {
            "role": "assistant",
            "content": "Running the tests first.",
            "tool_calls": [_call("call_1", "bash", '{"command": "pytest -q tests/test_api.py"}')],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "F.\nFAILED tests/test_api.py::test_get - KeyError: 'user_id'\n"
            + "x" * 2_000
            + "\n1 failed, 1 passed in 0.35s\nexit code 1",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("call_2", "read_file", '{"path": "src/api/app.py"}')],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "def get(u): return u['user_id']"},
        {"role": "user", "content": "Also check commit 3f2a9c1 and PR #45 before you push."},
    ]


def _summarize(messages: list[Message], **kwargs: Any) -> str:
    return DeterministicSummarizer().summarize(SummaryRequest(messages=messages, **kwargs))


def test_is_a_summarizer() -> None:
    assert isinstance(DeterministicSummarizer(), Summarizer)


def test_keeps_user_requests_verbatim() -> None:
    summary = _summarize(_session())
    assert "Fix the failing test in tests/test_api.py.\n  Keep the public API stable." in summary
    assert "Also check commit 3f2a9c1 and PR #45 before you push." in summary


def test_records_each_tool_call_with_key_args_and_result_status() -> None:
    summary = _summarize(_session())
    assert "bash(command='pytest -q tests/test_api.py') -> exit 1, 2.1k chars" in summary
    assert "read_file(path='src/api/app.py') -> ok: def get(u): return u['user_id']" in summary
    assert "assistant: Running the tests first." in summary


def test_keeps_the_anchors_of_the_region() -> None:
    session = _session()
    summary = _summarize(session, token_budget=2_000)
    region = anchor_set("\n".join(str(m.get("content") or "") for m in session))
    assert {"tests/test_api.py", "3f2a9c1", "PR #45", "KeyError"} <= region
    assert [anchor for anchor in region if anchor not in summary] == []
    assert "- src/api/app.py" in summary  # from the tool call's arguments


@pytest.mark.parametrize(
    "budget", [pytest.param(b, id=f"budget-{b}") for b in (40, 120, 300, 2_000)]
)
def test_fits_the_token_budget(budget: int) -> None:
    summary = _summarize(_session(), token_budget=budget)
    assert count_tokens(summary) <= budget


def test_the_most_recent_request_is_the_last_thing_dropped() -> None:
    summary = _summarize(_session(), token_budget=40)
    assert "Also check commit 3f2a9c1 and PR #45 before you push." in summary
    assert "bash(" not in summary


def test_actions_go_before_anchors_when_the_budget_is_tight() -> None:
    full = _summarize(_session(), token_budget=2_000)
    tight = _summarize(_session(), token_budget=count_tokens(full) - 20)
    assert "src/api/app.py" in tight
    assert tight.count("\n- ") < full.count("\n- ")
    assert "assistant: Running the tests first." not in tight


def test_a_huge_latest_request_is_cut_to_the_budget() -> None:
    huge = "please " + "do the thing with src/x.py " * 2_000
    summary = _summarize([{"role": "user", "content": huge}], token_budget=200)
    assert count_tokens(summary) <= 200
    assert summary.startswith("## User requests\n- please do the thing")


def test_merges_the_previous_summary_instead_of_nesting_it() -> None:
    first = _summarize(_session())
    second = _summarize(
        [{"role": "user", "content": "Now deploy to https://staging.example.com/app"}],
        previous_summary=first,
    )
    assert second.count("## User requests") == 1
    assert second.count("## Anchors") == 1
    assert "Fix the failing test in tests/test_api.py." in second
    assert "https://staging.example.com/app" in second
    for anchor in ("tests/test_api.py", "src/api/app.py", "3f2a9c1", "PR #45", "KeyError"):
        assert anchor in second


def test_repeated_compactions_keep_older_anchors() -> None:
    summary = ""
    for i in range(8):
        region: list[Message] = [
            {"role": "user", "content": f"step {i}: edit src/step_{i}.py"},
            {"role": "assistant", "content": f"edited src/step_{i}.py, see req_{i:06d}"},
        ]
        summary = _summarize(region, previous_summary=summary, token_budget=1_500)
    for i in range(8):
        assert f"src/step_{i}.py" in summary
        assert f"req_{i:06d}" in summary


def test_reference_counts_accumulate_across_compactions() -> None:
    region: list[Message] = [{"role": "user", "content": "look at src/core.py"}]
    first = _summarize(region)
    second = _summarize(region, previous_summary=first)
    assert "- src/core.py (×2)" in second


def test_a_foreign_previous_summary_is_kept_and_indexed() -> None:
    previous = "## Goal\nShip v2.\n## Critical context\nBooking ZFA04Y, error ENOENT."
    summary = _summarize([{"role": "user", "content": "next"}], previous_summary=previous)
    assert "## Earlier summary" in summary
    assert "Booking ZFA04Y, error ENOENT." in summary
    again = _summarize([{"role": "user", "content": "more"}], previous_summary=summary)
    assert again.count("## Earlier summary") == 1
    assert "Booking ZFA04Y" in again


def test_focus_topic_lines_are_kept_first() -> None:
    session = _session()
    without = _summarize(session, token_budget=90)
    focused = _summarize(session, token_budget=90, focus_topic="the read_file of app.py")
    assert "read_file(path='src/api/app.py')" not in without
    assert "read_file(path='src/api/app.py')" in focused


def test_repeated_identical_requests_are_kept_once() -> None:
    region: list[Message] = [{"role": "user", "content": "continue"} for _ in range(5)]
    assert _summarize(region).count("continue") == 1


def test_command_output_sent_as_user_message_is_an_observation() -> None:
    region: list[Message] = [
        {"role": "user", "content": "Solve the issue in django/http/response.py"},
        {"role": "user", "content": "<returncode>1</returncode>\n<output>boom</output>"},
    ]
    summary = _summarize(region)
    assert "observation -> exit 1" in summary
    assert "- <returncode>" not in summary


def test_same_input_gives_the_same_output() -> None:
    previous = _summarize(_session()[:3])
    outputs = {
        _summarize(_session(), previous_summary=previous, focus_topic="api", token_budget=150)
        for _ in range(3)
    }
    assert len(outputs) == 1


def test_empty_region_gives_a_short_note() -> None:
    assert _summarize([]) == "No earlier content."


def test_request_anchors_join_the_index_under_their_kind() -> None:
    request = SummaryRequest(
        messages=_session(),
        anchors=(
            "files:src/pkg/deep_module.py",
            "errors:KeyError: 'order_7781'",
            "ids:9fceb02d0ae598e95dc970b74767f19372d61af8",
            "no-kind-prefix-value_1234",
        ),
    )
    summary = DeterministicSummarizer().summarize(request)
    index = summary.split("## Anchors", 1)[1]
    files = index.split("### files", 1)[1].split("###", 1)[0]
    ids = index.split("### ids", 1)[1].split("###", 1)[0]
    assert "- src/pkg/deep_module.py" in files
    assert "- 9fceb02d0ae598e95dc970b74767f19372d61af8" in ids
    assert "- no-kind-prefix-value_1234" in ids
    assert "- KeyError: 'order_7781'" in index.split("### errors", 1)[1]


def test_request_anchors_rank_below_the_sent_region_and_respect_the_budget() -> None:
    extra = tuple(f"files:src/generated/module_{i}.py" for i in range(500))
    budget = 300
    summary = DeterministicSummarizer().summarize(
        SummaryRequest(messages=_session(), anchors=extra, token_budget=budget)
    )
    assert count_tokens(summary) <= budget
    assert "tests/test_api.py" in summary  # from the sent messages: kept first
    listed = listed_identifiers(summary)  # the index writes src/generated/{module_0.py,...}
    kept = [i for i in range(500) if f"src/generated/module_{i}.py" in listed]
    assert kept and kept == list(range(len(kept)))  # the engine's order decides who stays
