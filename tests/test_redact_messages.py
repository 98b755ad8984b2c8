"""Redacting whole messages: every string, at any depth, in new containers, idempotently.

:func:`redact_message` is what an archive calls to redact at rest, and
:func:`redact_messages` what the lossless engine calls before a summariser:
both must reach every text field, keep the message's structure (ids, names,
signatures, images) intact, never mutate their input and give the same result
when applied twice, since an archive derives message identities from content.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from contextengine.redact import REDACTED, redact, redact_message, redact_messages


def test_redact_messages_covers_content_parts_and_tool_arguments() -> None:
    messages = [
        {"role": "user", "content": "my password=hunter2"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "login", "arguments": json.dumps({"password": "s3cret"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    original = copy.deepcopy(messages)

    result = redact_messages(messages)

    assert messages == original  # input not mutated
    assert result[0]["content"] == "my password=[REDACTED]"
    assert result[1]["content"][0]["text"] == "token [REDACTED]"
    assert result[1]["content"][1] == original[1]["content"][1]
    arguments = result[2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"password": REDACTED}  # still valid JSON
    assert result[3] == original[3]
    assert all(new is not old for new, old in zip(result, messages, strict=True))


def _conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "my key is sk-abc123def456ghi789jkl012mno"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "password=hunter2"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "the token is ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "thinking_blocks": [
                {"type": "thinking", "thinking": "api_key=abcdef123456", "signature": "sig"}
            ],
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "login", "arguments": '{"password": "hunter2"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "AKIAIOSFODNN7EXAMPLE ok"},
        "not a message",
    ]


def test_redact_messages_masks_every_text_field() -> None:
    out = redact_messages(_conversation())  # type: ignore[arg-type]
    flat = repr(out)
    for secret in ("sk-abc123", "hunter2", "ghp_16C7", "abcdef123456", "AKIAIOSFODNN7"):
        assert secret not in flat
    assert out[1]["content"][0] == {"type": "text", "text": f"password={REDACTED}"}
    assert out[1]["content"][1]["image_url"]["url"] == "https://example.com/cat.png"
    assert out[2]["tool_calls"][0]["function"] == {
        "name": "login",
        "arguments": f'{{"password": "{REDACTED}"}}',
    }
    assert out[2]["thinking_blocks"][0]["signature"] == "sig"
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": f"{REDACTED} ok"}
    assert out[4] == "not a message"


def test_redact_messages_does_not_mutate_its_input() -> None:
    messages = _conversation()
    before = copy.deepcopy(messages)
    out = redact_messages(messages)  # type: ignore[arg-type]
    assert messages == before
    assert out != before


def test_redact_messages_legacy_function_call() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {
            "name": "f",
            "arguments": "token ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        },
    }
    out = redact_messages([message])
    assert out[0]["function_call"]["arguments"] == f"token {REDACTED}"


# ---------------------------------------------------------------- redact_message, at any depth

GITHUB = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def _anthropic_style() -> dict[str, Any]:
    """A user message carrying a nested tool_result and an assistant-style tool_use input."""
    return {
        "role": "user",
        "id": "msg_01",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": [
                    {"type": "text", "text": f"cloned with {GITHUB}"},
                    {"type": "image", "source": {"type": "base64", "data": "iVBORw0KGgo="}},
                ],
            },
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "http_request",
                "input": {
                    "url": "https://api.example.com/v1/items?token=9f8e7d6c5b4a3928&page=2",
                    "headers": {"Authorization": "Bearer abc123def456", "Accept": "*/*"},
                    "password": "correct horse",
                    "db_password": "$DB_PASSWORD",
                    "retries": 3,
                    "tags": ["token: 5", "api_key=abcdef123456"],
                },
            },
            {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
            {
                "type": "thinking",
                "thinking": "the key is sk-ant-api03-Xq7mP2vL9kR4tW8zB1nC",
                "signature": "EqQBCkYIBxgCKkB",
            },
        ],
        "metadata": {"note": "PGPASSWORD=hunter2 psql"},
    }


def test_redact_message_reaches_nested_parts_and_tool_inputs() -> None:
    out = redact_message(_anthropic_style())
    result, use, _, thinking = out["content"]
    assert result["content"][0]["text"] == f"cloned with {REDACTED}"
    assert use["input"] == {
        "url": f"https://api.example.com/v1/items?token={REDACTED}&page=2",
        "headers": {"Authorization": f"Bearer {REDACTED}", "Accept": "*/*"},
        "password": REDACTED,  # a secret-named key: its whole value, whatever it looks like
        "db_password": "$DB_PASSWORD",  # a reference, kept as in text
        "retries": 3,
        "tags": ["token: 5", f"api_key={REDACTED}"],
    }
    assert thinking["thinking"] == f"the key is {REDACTED}"
    assert out["metadata"] == {"note": f"PGPASSWORD={REDACTED} psql"}


def test_redact_message_keeps_structure_ids_signatures_and_images() -> None:
    message = _anthropic_style()
    out = redact_message(message)
    assert out["id"] == "msg_01" and out["role"] == "user"
    result, use, image, thinking = out["content"]
    assert result["tool_use_id"] == "toolu_01"
    assert result["content"][1] == message["content"][0]["content"][1]  # base64 image data
    assert (use["id"], use["name"]) == ("toolu_02", "http_request")
    assert image == message["content"][2]  # a data: URL is never scanned
    assert thinking["signature"] == "EqQBCkYIBxgCKkB"
    assert list(out) == list(message)  # key order kept


def test_redact_message_returns_new_containers_and_never_mutates() -> None:
    message = _anthropic_style()
    before = copy.deepcopy(message)
    out = redact_message(message)
    assert message == before

    def containers(value: Any) -> list[int]:
        found: list[int] = []
        if isinstance(value, dict):
            found.append(id(value))
            for item in value.values():
                found += containers(item)
        elif isinstance(value, list):
            found.append(id(value))
            for item in value:
                found += containers(item)
        return found

    assert not set(containers(out)) & set(containers(message))


def test_redact_message_is_idempotent_and_deterministic() -> None:
    once = redact_message(_anthropic_style())
    assert redact_message(once) == once
    assert redact_message(_anthropic_style()) == once

    # What an archive relies on: the canonical hash of a redacted message is stable.
    def digest(message: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(message, sort_keys=True).encode()).hexdigest()

    assert digest(redact_message(once)) == digest(once)


def test_a_message_without_secrets_comes_back_equal() -> None:
    message = {
        "role": "assistant",
        "content": "see src/token_store/key.py at 3f786850e387550fdab836ed7e6dc881de23001b",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "/etc/secrets/token"}'},
            }
        ],
    }
    out = redact_message(message)
    assert out == message
    assert out is not message


def test_redact_message_passes_non_dicts_through() -> None:
    assert redact_message("not a message") == "not a message"  # type: ignore[arg-type]


# Strings without anything a rule could take for a secret, so a message built
# of them must come back equal.
_PLAIN = st.text(alphabet="abcdefghij klmnop/._-0123456789\n", max_size=30)
_SECRETS = st.sampled_from(
    [
        "password=hunter2",
        GITHUB,
        "Authorization: Bearer abc123def456",
        "AKIAIOSFODNN7EXAMPLE",
        "https://u:pw1234@db.example.com/x",
    ]
)
_LEAVES = st.one_of(_PLAIN, _SECRETS, st.integers(), st.none(), st.booleans())
_KEYS = st.sampled_from(["content", "text", "arguments", "input", "id", "name", "password", "x"])
_TREES = st.recursive(
    _LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(_KEYS, _TREES, max_size=5))
def test_redact_message_properties(message: dict[str, Any]) -> None:
    before = copy.deepcopy(message)
    once = redact_message(message)
    assert message == before  # never mutated
    assert redact_message(once) == once  # idempotent
    assert redact_message(copy.deepcopy(before)) == once  # deterministic
    flat = json.dumps(once)
    for secret in ("hunter2", GITHUB, "abc123def456", "AKIAIOSFODNN7EXAMPLE", "pw1234"):
        if secret in flat:
            # Only where a structural key holds it (ids and names are never scanned).
            assert any(
                secret in json.dumps(value) for key, value in _items(once) if key in ("id", "name")
            )


def _items(value: Any) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((key, item))
            found += _items(item)
    elif isinstance(value, list):
        for item in value:
            found += _items(item)
    return found


def test_redact_messages_is_redact_message_of_each() -> None:
    messages = [_anthropic_style(), {"role": "user", "content": "password=hunter2"}, "x"]
    assert redact_messages(messages) == [redact_message(m) for m in messages]  # type: ignore[arg-type]
    assert redact("password=hunter2") == f"password={REDACTED}"
