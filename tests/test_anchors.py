"""Anchors: the exact identifiers that summaries must keep."""

from __future__ import annotations

import pytest

from contextengine.anchors import (
    anchor_cache_clear,
    anchor_cache_info,
    anchor_set,
    anchors_from_tool_call,
    extract_anchors,
    find_anchors,
    message_anchors,
)


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        pytest.param("edit src/foo.py now", "src/foo.py", "files", id="relative-path"),
        pytest.param(
            "see /usr/lib/python3.11/json/x.py",
            "/usr/lib/python3.11/json/x.py",
            "files",
            id="absolute-path",
        ),
        pytest.param("notes in ~/notes.txt.", "~/notes.txt", "files", id="home-path"),
        pytest.param("run from tests/ please", "tests/", "files", id="directory"),
        pytest.param("open README.md first", "README.md", "files", id="bare-file"),
        pytest.param(
            "docs at https://example.com/a?b=1.", "https://example.com/a?b=1", "urls", id="url"
        ),
        pytest.param("reverted 3f2a9c1 today", "3f2a9c1", "ids", id="short-hash"),
        pytest.param(
            "id 123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-12d3-a456-426614174000",
            "ids",
            id="uuid",
        ),
        pytest.param("the call call_abc123 failed", "call_abc123", "ids", id="call-id"),
        pytest.param("summary sum_00af12 kept", "sum_00af12", "ids", id="summary-id"),
        pytest.param("request req_ABC123", "req_ABC123", "ids", id="request-id"),
        pytest.param("booking ZFA04Y is confirmed", "ZFA04Y", "ids", id="booking-code"),
        pytest.param("fixes #123", "#123", "ids", id="issue-hash"),
        pytest.param("see PR 45 for it", "PR 45", "ids", id="pr-number"),
        pytest.param("tracked as GH-12", "GH-12", "ids", id="gh-number"),
        pytest.param("raised KeyError there", "KeyError", "errors", id="error-name"),
        pytest.param("got ENOENT back", "ENOENT", "errors", id="errno"),
        pytest.param("server said HTTP 404", "HTTP 404", "errors", id="http-status"),
        pytest.param("with status 500 again", "status 500", "errors", id="status"),
        pytest.param("process exit code 2", "exit code 2", "errors", id="exit-code"),
        pytest.param(
            "ok\nValueError: bad value 'x'\nmore",
            "ValueError: bad value 'x'",
            "errors",
            id="error-line",
        ),
        pytest.param(
            "FAILED tests/t.py::test_a - boom",
            "FAILED tests/t.py::test_a - boom",
            "errors",
            id="failed-line",
        ),
        pytest.param("$ pytest -q\n", "pytest -q", "commands", id="command-line"),
        pytest.param("took 12 ms", "12 ms", "numbers", id="milliseconds"),
        pytest.param("uses 3.5 GB", "3.5 GB", "numbers", id="gigabytes"),
        pytest.param("about 200 tokens", "200 tokens", "numbers", id="tokens"),
        pytest.param("coverage 45%", "45%", "numbers", id="percent"),
        pytest.param("costs $120 a month", "$120", "numbers", id="dollars"),
        pytest.param("saw 10k rows", "10k", "numbers", id="thousands"),
    ],
)
def test_finds_each_kind_of_identifier(text: str, expected: str, kind: str) -> None:
    found = {(a.kind, a.value) for a in find_anchors(text)}
    assert (kind, expected) in found


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("read and/or write", id="and-or"),
        pytest.param("speed in km/s", id="unit-fraction"),
        pytest.param("on 10/20/2024", id="date"),
        pytest.param("using gpt-4o-mini", id="model-name"),
        pytest.param("a plain sentence with words only", id="prose"),
        pytest.param("Traceback (most recent call last):", id="bare-traceback-header"),
    ],
)
def test_prose_is_not_an_anchor(text: str) -> None:
    assert extract_anchors(text) == []


def test_url_is_one_anchor_not_a_path_and_hash() -> None:
    url = "https://github.com/o/r/commit/3f2a9c1d"
    assert extract_anchors(f"see {url}") == [url]


def test_results_are_ordered_by_first_occurrence_and_deduplicated() -> None:
    text = "src/b.py then src/a.py then src/b.py and KeyError, KeyError"
    assert extract_anchors(text) == ["src/b.py", "src/a.py", "KeyError"]


def test_anchor_set_matches_extract() -> None:
    text = "fix src/a.py for #12 (3.5 GB)"
    assert anchor_set(text) == set(extract_anchors(text))


def test_long_error_lines_are_bounded() -> None:
    line = "RuntimeError: " + "x" * 5_000
    (value,) = [a.value for a in find_anchors(line) if a.value.startswith("RuntimeError:")]
    assert len(value) <= 200


def test_shell_tool_call_contributes_its_command() -> None:
    found = anchors_from_tool_call("bash", '{"command": "pytest -q tests/test_api.py"}')
    assert ("commands", "pytest -q tests/test_api.py") in {(a.kind, a.value) for a in found}
    assert ("files", "tests/test_api.py") in {(a.kind, a.value) for a in found}


def test_tool_call_with_invalid_json_arguments_still_yields_anchors() -> None:
    found = anchors_from_tool_call("shell", "ls src/app/ && cat x.py")
    values = [a.value for a in found]
    assert values[0] == "ls src/app/ && cat x.py"
    assert "x.py" in values


def test_work_is_linear_in_the_text() -> None:
    # Count the anchors instead of timing: ten times the text, ten times the anchors,
    # and no pattern that backtracks across a very long line.
    unit = "edit src/mod_{i}.py after call_{i:06d}x failed with KeyError (12 ms)\n"
    small = "".join(unit.format(i=i) for i in range(100))
    large = "".join(unit.format(i=i) for i in range(1_000))
    assert len(find_anchors(large)) == 10 * len(find_anchors(small)) - 9 * 2
    assert find_anchors("a" * 200_000 + " failed") != []


def test_message_anchors_are_cached_by_text() -> None:
    anchor_cache_clear()
    message = {"role": "tool", "tool_call_id": "c1", "content": "see src/cached/only_once.py"}
    first = message_anchors(message)
    again = message_anchors({**message})  # a copy: same text, no new scan
    assert first == again
    assert [a.value for a in first] == ["src/cached/only_once.py"]
    assert (anchor_cache_info().scans, anchor_cache_info().hits) == (1, 1)


def test_message_anchors_include_shell_commands() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "pytest -q tests/x.py"}'},
            }
        ],
    }
    kinds = {(a.kind, a.value) for a in message_anchors(message)}
    assert ("commands", "pytest -q tests/x.py") in kinds
    assert ("files", "tests/x.py") in kinds


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("DB_PASSWORD=Abc_1234567", id="assignment"),
        pytest.param("Authorization: Bearer 0123456789abcdef0123", id="bearer"),
        pytest.param('{"api_key": "deadbeef12345678"}', id="json-key"),
    ],
)
def test_message_anchors_never_hold_secrets(text: str) -> None:
    values = [a.value for a in message_anchors({"role": "user", "content": f"x {text} y"})]
    secret = text.rsplit(" ", 1)[-1].split("=")[-1].strip('"}')
    assert not any(secret in value for value in values)
