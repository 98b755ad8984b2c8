"""Secret redaction: each kind of secret is masked, ordinary text is left alone."""

from __future__ import annotations

import copy
import json

import pytest

from contextengine.redact import REDACTED, redact, redact_messages

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx1y2z3\n"
    "abcDEF+/ghi==\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl012mno",
            "OPENAI_API_KEY=[REDACTED]",
            id="env-openai-key",
        ),
        pytest.param(
            "use sk-abc123def456ghi789jkl012mno345 now",
            "use [REDACTED] now",
            id="openai-key-in-prose",
        ),
        pytest.param(
            "key is sk-ant-api03-abcdefghijklmnop1234567890_xyz-AA here",
            "key is [REDACTED] here",
            id="anthropic-key",
        ),
        pytest.param("id AKIAIOSFODNN7EXAMPLE ok", "id [REDACTED] ok", id="aws-akia"),
        pytest.param("id ASIAIOSFODNN7EXAMPLE ok", "id [REDACTED] ok", id="aws-asia"),
        pytest.param(
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_access_key = [REDACTED]",
            id="aws-secret-access-key",
        ),
        pytest.param(
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 ok",
            "token [REDACTED] ok",
            id="github-ghp",
        ),
        pytest.param("gho_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED]", id="github-gho"),
        pytest.param(
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "[REDACTED]",
            id="github-fine-grained",
        ),
        pytest.param("slack xoxb-1234567890-abcdefghij ok", "slack [REDACTED] ok", id="slack-bot"),
        pytest.param("xapp-1-A0123456789-abcdef", "[REDACTED]", id="slack-app"),
        pytest.param(
            "curl -H 'Authorization: Bearer eyJhbGciOi.abc123.def' x",
            "curl -H 'Authorization: Bearer [REDACTED]' x",
            id="authorization-bearer-header",
        ),
        pytest.param(
            "sent bearer 0a1b2c3d4e5f6a7b8c9d", "sent bearer [REDACTED]", id="bearer-in-prose"
        ),
        pytest.param(
            "Authorization: Basic dXNlcjpwYXNz",
            "Authorization: Basic [REDACTED]",
            id="authorization-basic",
        ),
        pytest.param(
            '{"password": "correct horse", "user": "bob"}',
            '{"password": "[REDACTED]", "user": "bob"}',
            id="json-password-with-space",
        ),
        pytest.param(
            '{\\"password\\": \\"hunter2\\", \\"user\\": \\"bob\\"}',
            '{\\"password\\": \\"[REDACTED]\\", \\"user\\": \\"bob\\"}',
            id="escaped-json-password",
        ),
        pytest.param("api%5Fkey=abc123&x=1", "api%5Fkey=[REDACTED]&x=1", id="url-encoded-name"),
        pytest.param(
            "GET /cb?access_token=abc.def-123&state=xyz",
            "GET /cb?access_token=[REDACTED]&state=xyz",
            id="query-string",
        ),
        pytest.param("x-api-key: abcdef123", "x-api-key: [REDACTED]", id="hyphenated-header"),
        pytest.param("API-KEY: abcdef", "API-KEY: [REDACTED]", id="upper-case"),
        pytest.param("apikey=abc", "apikey=[REDACTED]", id="apikey"),
        pytest.param("refresh_token=abc", "refresh_token=[REDACTED]", id="refresh-token"),
        pytest.param("auth_token: abc", "auth_token: [REDACTED]", id="auth-token"),
        pytest.param("GITHUB_TOKEN=abc", "GITHUB_TOKEN=[REDACTED]", id="env-token"),
        pytest.param("passwd=abc", "passwd=[REDACTED]", id="passwd"),
        pytest.param("PGPASSWORD=foo bar", "PGPASSWORD=[REDACTED] bar", id="env-password"),
        pytest.param("dbPassword=xyz", "dbPassword=[REDACTED]", id="camel-case-password"),
        pytest.param("client_secret=abc", "client_secret=[REDACTED]", id="client-secret"),
        pytest.param("clientSecret: abc", "clientSecret: [REDACTED]", id="camel-client-secret"),
        pytest.param("{'secret': 'x'}", "{'secret': '[REDACTED]'}", id="python-dict-secret"),
        pytest.param("private_key: 'xyz'", "private_key: '[REDACTED]'", id="private-key-name"),
        pytest.param(
            "postgres://app:hunter2@db:5432/prod",
            "postgres://app:[REDACTED]@db:5432/prod",
            id="url-credentials",
        ),
        pytest.param(
            f"key:\n{PEM}\nafter",
            "key:\n-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n"
            "-----END RSA PRIVATE KEY-----\nafter",
            id="pem-block",
        ),
        pytest.param(
            "-----BEGIN PRIVATE KEY-----\nMIIEabc\ndef==\nThe rest of text",
            "-----BEGIN PRIVATE KEY-----\n[REDACTED]\nThe rest of text",
            id="pem-block-truncated",
        ),
    ],
)
def test_secret_is_masked_and_its_name_kept(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("the password reset flow is broken", id="password-as-word"),
        pytest.param("the secret to success is patience", id="secret-as-word"),
        pytest.param("Password:\nnext line", id="heading-without-value"),
        pytest.param("password-reset: done", id="longer-name"),
        pytest.param("commit 3f786850e387550fdab836ed7e6dc881de23001b", id="git-hash"),
        pytest.param("id 550e8400-e29b-41d4-a716-446655440000", id="uuid"),
        pytest.param(
            "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", id="sha256"
        ),
        pytest.param("/home/user/.ssh/id_rsa and C:\\Users\\me\\key.txt", id="paths"),
        pytest.param("sk-learn is a library", id="sk-word"),
        pytest.param("max_tokens: 100, token: 'the'", id="token-counts"),
        pytest.param("monkey=banana tokenizer: cl100k", id="key-inside-words"),
        pytest.param("Bearer tokens expire quickly", id="bearer-prose"),
        pytest.param("def login(user: str, password: str) -> None:", id="type-annotation"),
        pytest.param("api_key=os.environ['OPENAI_API_KEY']", id="env-reference"),
        pytest.param("password=${DB_PASSWORD}", id="shell-reference"),
        pytest.param("https://example.com:8080/path@foo", id="url-with-port"),
        pytest.param("git@github.com:org/repo.git", id="ssh-remote"),
        pytest.param("Plain text, nothing to hide: key points and a token of thanks.", id="prose"),
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Authorization: Bearer abc123def456", id="bearer"),
        pytest.param(f"{PEM}\n-----BEGIN PRIVATE KEY-----\nAAAA\n", id="pem"),
        pytest.param('{"password": "x", "api_key": "sk-abc123def456ghi789jkl0"}', id="json"),
        pytest.param("postgres://u:p@h/db?password=q", id="url"),
    ],
)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert REDACTED in once
    assert redact(once) == once


def test_non_ascii_text_that_grows_when_lower_cased_is_still_redacted() -> None:
    # "İ".lower() is two characters long; the spans must still line up.
    assert redact("İstanbul password=hunter2 İ") == "İstanbul password=[REDACTED] İ"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            ("Some log line with a token. api_key=abc123 key: value https://x.io/a?b=c " * 3)
            + "lorem ipsum dolor sit amet " * 20
            + "\n",
            id="log-like",
        ),
        pytest.param("a", id="one-letter"),
        pytest.param("key: None, ", id="many-non-secret-keys"),
        pytest.param("-----BEGIN PRIVATE KEY-----\n" + "A" * 50 + "\n", id="many-truncated-keys"),
        pytest.param("sk-", id="many-prefixes"),
    ],
)
def test_ten_megabytes_complete(text: str) -> None:
    # Hostile repetitions that would make a backtracking pattern quadratic. No
    # wall-clock bound here (shared machines are noisy); a catastrophic pattern
    # shows up as this test never finishing. Speed is in benchmarks/.
    big = text * (10_000_000 // len(text))
    redacted = redact(big)
    assert "abc123" not in redacted  # the one real secret (api_key=abc123) is masked everywhere


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
