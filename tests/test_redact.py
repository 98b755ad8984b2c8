"""Secret redaction: each kind of secret is masked, ordinary text is left alone."""

from __future__ import annotations

import copy
import json
from typing import Any

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


# ---------------------------------------------------------------- secrets in context

PEM_BODY = "MIIEpAIBAAKCAQEA7bq98Xb1Yz\nq3Jk+/9Zx0Qw1E2r3T4y5U6i7O8p9A==\n"


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        pytest.param(
            "using key sk-abc123def456ghi789jkl012mno now",
            "sk-abc123def456ghi789jkl012mno",
            ["using key ", " now"],
            id="openai-sk",
        ),
        pytest.param(
            "key: sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
            "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
            ["key: "],
            id="openai-sk-proj",
        ),
        pytest.param(
            "client = Anthropic(api_key_value='sk-ant-api03-AbCdEf0123456789_ghIJkl-mnOP')",
            "sk-ant-api03-AbCdEf0123456789_ghIJkl-mnOP",
            ["client = Anthropic(api_key_value='", "')"],
            id="anthropic-sk-ant",
        ),
        pytest.param(
            "aws configure: AKIAIOSFODNN7EXAMPLE is the id",
            "AKIAIOSFODNN7EXAMPLE",
            ["aws configure: ", " is the id"],
            id="aws-access-key-id",
        ),
        pytest.param(
            "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\nregion=x",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ["[default]\naws_secret_access_key = ", "\nregion=x"],
            id="aws-secret-access-key",
        ),
        pytest.param(
            "git push https with ghp_16C7e42F292c6912E7710c838347Ae178B4a done",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            ["git push https with ", " done"],
            id="github-ghp",
        ),
        pytest.param(
            "oauth gho_16C7e42F292c6912E7710c838347Ae178B4a.",
            "gho_16C7e42F292c6912E7710c838347Ae178B4a",
            ["oauth ", "."],
            id="github-gho",
        ),
        pytest.param(
            "token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123 ok",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
            ["token ", " ok"],
            id="github-fine-grained-pat",
        ),
        pytest.param(
            "slack bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx end",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            ["slack bot ", " end"],
            id="slack-xoxb",
        ),
        pytest.param(
            "user token xoxp-123456789012-1234567890123-abcdef end",
            "xoxp-123456789012-1234567890123-abcdef",
            ["user token ", " end"],
            id="slack-xoxp",
        ),
        pytest.param(
            'curl -H "Authorization: Bearer abc123.def456-ghi789_jkl" https://api.example.com',
            "abc123.def456-ghi789_jkl",
            ['curl -H "Authorization: Bearer ', '" https://api.example.com'],
            id="bearer-header",
        ),
        pytest.param(
            "send bearer Zm9vYmFyYmF6MTIz== to the server",
            "Zm9vYmFyYmF6MTIz==",
            ["send bearer ", " to the server"],
            id="bearer-prose",
        ),
        pytest.param(
            "api_key=abcd1234efgh&page=2",
            "abcd1234efgh",
            ["api_key=", "&page=2"],
            id="api-key-equals",
        ),
        pytest.param("api_key: abcd1234efgh", "abcd1234efgh", ["api_key: "], id="api-key-colon"),
        pytest.param(
            '{"api_key": "abcd1234efgh", "model": "gpt-4o"}',
            "abcd1234efgh",
            ['{"api_key": "', '", "model": "gpt-4o"}'],
            id="api-key-json",
        ),
        pytest.param(
            '{"access_token":"ya29.a0AfH6SMBx-y_z","expires_in":3599}',
            "ya29.a0AfH6SMBx-y_z",
            ['{"access_token":"', '","expires_in":3599}'],
            id="access-token-json",
        ),
        pytest.param(
            "access_token: zzzz9999yyyy\nnext: line",
            "zzzz9999yyyy",
            ["access_token: ", "\nnext: line"],
            id="access-token-yaml",
        ),
        pytest.param(
            "password=hunter2 user=bob", "hunter2", ["password=", " user=bob"], id="password-equals"
        ),
        pytest.param(
            "DB password: 'correct horse'",
            "correct horse",
            ["DB password: '", "'"],
            id="password-colon-quoted",
        ),
        pytest.param(
            '{"user": "bob", "password": "p@ss\\"w0rd"}',
            'p@ss\\"w0rd',
            ['{"user": "bob", "password": "', '"}'],
            id="password-json-escaped-quote",
        ),
        pytest.param(
            '"{\\"password\\": \\"hunter2\\"}"',
            "hunter2",
            ['"{\\"password\\": \\"', '\\"}"'],
            id="password-inside-json-string",
        ),
        pytest.param("secret: s3cr3tvalue", "s3cr3tvalue", ["secret: "], id="secret-colon"),
        pytest.param(
            "client_secret=cs_abcdef123456 grant_type=x",
            "cs_abcdef123456",
            ["client_secret=", " grant_type=x"],
            id="client-secret",
        ),
        pytest.param(
            "GET /v1/items?api%5Fkey=abcdef123456&limit=5",
            "abcdef123456",
            ["GET /v1/items?api%5Fkey=", "&limit=5"],
            id="url-encoded-name",
        ),
        pytest.param(
            "q=1&api%5Fkey%3Dabcdef123456",
            "abcdef123456",
            ["q=1&api%5Fkey%3D"],
            id="url-encoded-name-and-operator",
        ),
        pytest.param(
            "api-key: abcdef123456", "abcdef123456", ["api-key: "], id="hyphenated-api-key"
        ),
        pytest.param(
            "X-Api-Key: abcdef123456\nAccept: */*",
            "abcdef123456",
            ["X-Api-Key: ", "\nAccept: */*"],
            id="x-api-key-header",
        ),
        pytest.param(
            "$ cat .env\nOPENAI_API_KEY=foo123bar456\nDEBUG=1",
            "foo123bar456",
            ["$ cat .env\nOPENAI_API_KEY=", "\nDEBUG=1"],
            id="env-openai-api-key",
        ),
        pytest.param(
            "export GITHUB_TOKEN=plainvalue123",
            "plainvalue123",
            ["export GITHUB_TOKEN="],
            id="env-token",
        ),
        pytest.param(
            "Error connecting to postgres://app:hunter2@db.internal:5432/prod",
            "hunter2",
            ["postgres://app:", "@db.internal:5432/prod"],
            id="url-password",
        ),
        pytest.param(
            "mysql -h x mysql://root:p@ssw0rd@localhost/db",
            "p@ssw0rd",
            ["mysql://root:", "@localhost/db"],
            id="url-password-with-at-sign",
        ),
        pytest.param(
            "redis://:s3cretpw@cache:6379/0",
            "s3cretpw",
            ["redis://:", "@cache:6379/0"],
            id="url-password-without-user",
        ),
        pytest.param(
            f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}"
            "-----END RSA PRIVATE KEY-----\nafter",
            PEM_BODY.strip(),
            ["-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----\nafter"],
            id="pem-rsa",
        ),
        pytest.param(
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}-----END OPENSSH PRIVATE KEY-----",
            PEM_BODY.strip(),
            ["-----BEGIN OPENSSH PRIVATE KEY-----", "-----END OPENSSH PRIVATE KEY-----"],
            id="pem-openssh",
        ),
        pytest.param(
            f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}",
            PEM_BODY.strip(),
            ["-----BEGIN PRIVATE KEY-----"],
            id="pem-truncated",
        ),
    ],
)
def test_secret_is_masked_and_context_kept(text: str, secret: str, kept: list[str]) -> None:
    out = redact(text)
    assert REDACTED in out
    for line in secret.splitlines():
        assert line not in out
    for piece in kept:
        assert piece in out
    assert redact(out) == out


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("/usr/local/lib/python3.11/site-packages/secret_store/api.py", id="path"),
        pytest.param(r"C:\Users\bob\secret_notes.txt", id="windows-path"),
        pytest.param("commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD)", id="git-hash"),
        pytest.param("request 123e4567-e89b-12d3-a456-426614174000 done", id="uuid"),
        pytest.param(
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", id="sha256"
        ),
        pytest.param("We need to fix the password reset flow.", id="password-prose"),
        pytest.param("Consistency is the secret to success.", id="secret-prose"),
        pytest.param("def get_api_key():\n    return os.environ['API_KEY']", id="function-def"),
        pytest.param("api_key = os.environ['OPENAI_API_KEY']", id="env-lookup"),
        pytest.param("password: str = Field(...)", id="type-annotation"),
        pytest.param("password=$DB_PASSWORD", id="shell-variable"),
        pytest.param("password = None", id="none-value"),
        pytest.param("Password:\nEnter it below", id="heading"),
        pytest.param("token: 42, key: value", id="bare-token-and-key"),
        pytest.param("12345 67890 3.14159 -42 1e10", id="numbers"),
        pytest.param("pip install scikit-learn; import sklearn", id="sk-learn"),
        pytest.param("task-1234567890abcdefghijkl failed", id="task-id"),
        pytest.param("see https://example.com:8080/docs and git@github.com:o/r.git", id="urls"),
        pytest.param("Bearer authentication is configured", id="bearer-prose"),
        pytest.param("The API key rotation happens monthly.", id="api-key-prose"),
        pytest.param("", id="empty"),
    ],
)
def test_more_ordinary_text_is_untouched(text: str) -> None:
    assert redact(text) == text


def test_unicode_that_grows_when_lowercased_keeps_alignment() -> None:
    assert redact("İstanbul password=abc İ") == f"İstanbul password={REDACTED} İ"


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
