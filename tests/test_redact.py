"""Secret redaction: each kind of secret is masked, ordinary text is left alone.

Every value below is fabricated: none of them is, or was, a real credential.
"""

from __future__ import annotations

import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextengine.redact import (
    CUT_MARGIN_CHARS,
    REDACTED,
    SECRET_KINDS,
    redact,
    redact_head,
    redact_tail,
    redact_with_kinds,
)

R = REDACTED
# The module, not the function that shadows it in the package namespace.
redact_module = sys.modules["contextengine.redact"]

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx1y2z3\n"
    "abcDEF+/ghi==\n"
    "-----END RSA PRIVATE KEY-----"
)

# Fabricated values reused by several cases.
AWS_ID = "AKIAZ7YV3EXAMPLE7QXP"
AWS_SECRET = "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"
SIGV4 = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
AZURE_KEY = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6QUJDRA=="
PYPI = "pypi-AgEIcHlwaS5vcmcCJGE0YjVmNWI0LTJhZmUtNGY0MC1hYjQyLTU3ZmE2ZDI3NjRlMAACKlszLCJmMjk1"
DISCORD_BOT = "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.G7xKpQ.ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)

# One case (or more) per kind of SECRET_KINDS: (kind, text, expected output).
KIND_CASES = [
    pytest.param(
        "pem-private-key",
        f"key:\n{PEM}\nafter",
        f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{R}\n-----END RSA PRIVATE KEY-----\nafter",
        id="pem-private-key",
    ),
    pytest.param(
        "url-password",
        "Error connecting to postgres://app:hunter2@db.internal:5432/prod",
        f"Error connecting to postgres://app:{R}@db.internal:5432/prod",
        id="url-password-database-url",
    ),
    pytest.param(
        "url-password",
        "REDIS_URL=redis://:s3cretpw@cache:6379/0",
        f"REDIS_URL=redis://:{R}@cache:6379/0",
        id="url-password-without-user",
    ),
    pytest.param(
        "cli-password",
        "curl -u admin:s3cr3tPass https://api.example.com/v1",
        f"curl -u admin:{R} https://api.example.com/v1",
        id="cli-password-curl",
    ),
    pytest.param(
        "cli-password",
        "mysql -u root -pS3cretPw1 -h db.internal shop",
        f"mysql -u root -p{R} -h db.internal shop",
        id="cli-password-mysql",
    ),
    pytest.param(
        "cli-password",
        "sshpass -p 'Tr0ub4dor&3' ssh deploy@10.0.0.5",
        f"sshpass -p '{R}' ssh deploy@10.0.0.5",
        id="cli-password-sshpass",
    ),
    pytest.param(
        "password",
        "$ PGPASSWORD=hunter2 psql -h db",
        f"$ PGPASSWORD={R} psql -h db",
        id="password-env",
    ),
    pytest.param(
        "password",
        '{"user": "bob", "password": "p@ss w0rd"}',
        f'{{"user": "bob", "password": "{R}"}}',
        id="password-json",
    ),
    pytest.param(
        "passphrase",
        'passphrase: "correct horse battery staple"',
        f'passphrase: "{R}"',
        id="passphrase",
    ),
    pytest.param(
        "secret",
        "APP_CLIENT_SECRET=cs_abcdef123456 ./run",
        f"APP_CLIENT_SECRET={R} ./run",
        id="secret-env",
    ),
    pytest.param(
        "authorization",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        f"Authorization: Basic {R}",
        id="authorization-basic",
    ),
    pytest.param(
        "named-token",
        "export GITHUB_TOKEN=plainvalue123",
        f"export GITHUB_TOKEN={R}",
        id="named-token",
    ),
    pytest.param(
        "named-key",
        "X-Api-Key: abcdef123456\nAccept: */*",
        f"X-Api-Key: {R}\nAccept: */*",
        id="named-key",
    ),
    pytest.param(
        "url-query",
        "GET https://api.example.com/v2/export?token=9f8e7d6c5b4a3928&format=csv HTTP/1.1",
        f"GET https://api.example.com/v2/export?token={R}&format=csv HTTP/1.1",
        id="url-query-token",
    ),
    pytest.param(
        "url-query",
        "https://maps.example.com/api/js?v=3&key=K3yV4lu3xYz123&callback=init",
        f"https://maps.example.com/api/js?v=3&key={R}&callback=init",
        id="url-query-key",
    ),
    pytest.param(
        "url-query",
        "https://acme.blob.core.windows.net/c/f.pdf?sv=2022-11-02&sp=r&sig=Zm9vYmFy%2BYmF6cXV4MTIz%3D",
        f"https://acme.blob.core.windows.net/c/f.pdf?sv=2022-11-02&sp=r&sig={R}",
        id="url-query-azure-sas-sig",
    ),
    pytest.param(
        "url-query",
        f"https://b.s3.amazonaws.com/a.txt?X-Amz-Date=20240101T000000Z&X-Amz-Signature={SIGV4}",
        f"https://b.s3.amazonaws.com/a.txt?X-Amz-Date=20240101T000000Z&X-Amz-Signature={R}",
        id="url-query-x-amz-signature",
    ),
    pytest.param(
        "url-query",
        '<a href="/download?id=7&amp;auth=Qm9iOnNlY3JldA">get</a>',
        f'<a href="/download?id=7&amp;auth={R}">get</a>',
        id="url-query-html-escaped",
    ),
    pytest.param(
        "named-token",
        "GET /cb?code=abc&access_token=ya29.a0AfH6SMBxyz123&state=xyz",
        f"GET /cb?code=abc&access_token={R}&state=xyz",
        id="url-query-access-token",
    ),
    pytest.param(
        "azure-storage-key",
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};"
        "EndpointSuffix=core.windows.net",
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={R};"
        "EndpointSuffix=core.windows.net",
        id="azure-storage-key",
    ),
    pytest.param(
        "aws-secret-access-key",
        f"AWS Access Key ID [None]: {AWS_ID}\nAWS Secret Access Key [None]: {AWS_SECRET}\n"
        "Default region name [None]: eu-west-1",
        f"AWS Access Key ID [None]: {R}\nAWS Secret Access Key [None]: {R}\n"
        "Default region name [None]: eu-west-1",
        id="aws-secret-access-key-after-key-id",
    ),
    pytest.param(
        "aws-secret-access-key",
        f"Access key ID,Secret access key\n{AWS_ID},{AWS_SECRET}\n",
        f"Access key ID,Secret access key\n{R},{R}\n",
        id="aws-secret-access-key-csv",
    ),
    pytest.param(
        "aws-secret-access-key",
        f"aws configure set aws_secret_access_key {AWS_SECRET} --profile ci",
        f"aws configure set aws_secret_access_key {R} --profile ci",
        id="aws-secret-access-key-after-name",
    ),
    pytest.param(
        "named-key",
        f"[default]\naws_secret_access_key = {AWS_SECRET}\nregion=eu-west-1",
        f"[default]\naws_secret_access_key = {R}\nregion=eu-west-1",
        id="aws-secret-access-key-assigned",
    ),
    pytest.param(
        "aws-sigv4-signature",
        f"Authorization: AWS4-HMAC-SHA256 Credential={AWS_ID}/20240101/us-east-1/s3/aws4_request,"
        f" SignedHeaders=host;x-amz-date, Signature={SIGV4}",
        f"Authorization: AWS4-HMAC-SHA256 {R}, SignedHeaders=host;x-amz-date, Signature={R}",
        id="aws-sigv4-signature",
    ),
    pytest.param(
        "anthropic",
        "client = Anthropic(key='sk-ant-api03-Xq7mP2vL9kR4tW8zB1nC6yF3hJ5dG0sA-aBcDeFgHiJk')",
        f"client = Anthropic(key='{R}')",
        id="anthropic",
    ),
    pytest.param(
        "openai",
        "using sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90 now",
        f"using {R} now",
        id="openai-proj",
    ),
    pytest.param(
        "openai",
        "key sk-abc123def456ghi789jkl012mno in the log",
        f"key {R} in the log",
        id="openai-legacy",
    ),
    pytest.param(
        "stripe",
        "stripe charge --key sk_live_51HxYzAbCdEfGhIjKlMnOpQrStUv ok",
        f"stripe charge --key {R} ok",
        id="stripe-secret-key",
    ),
    pytest.param(
        "stripe",
        "restricted rk_test_51HxYzAbCdEfGhIjKlMnOp.",
        f"restricted {R}.",
        id="stripe-restricted-key",
    ),
    pytest.param(
        "stripe-webhook-secret",
        "endpoint signing whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw ok",
        f"endpoint signing {R} ok",
        id="stripe-webhook-secret",
    ),
    pytest.param(
        "aws-access-key-id",
        f"aws configure: {AWS_ID} is the id",
        f"aws configure: {R} is the id",
        id="aws-access-key-id",
    ),
    pytest.param(
        "aws-access-key-id",
        "temporary ASIAQ3EXAMPLEXYZ7ABC ok",
        f"temporary {R} ok",
        id="aws-access-key-id-temporary",
    ),
    pytest.param(
        "github-token",
        "git remote set-url origin https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r",
        f"git remote set-url origin https://{R}@github.com/o/r",
        id="github-token-in-url",
    ),
    *(
        pytest.param(
            "github-token",
            f"token {prefix}_16C7e42F292c6912E7710c838347Ae178B4a done",
            f"token {R} done",
            id=f"github-token-{prefix}",
        )
        for prefix in ("ghp", "gho", "ghs", "ghu", "ghr")
    ),
    pytest.param(
        "github-fine-grained-pat",
        "GH pat github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123 ok",
        f"GH pat {R} ok",
        id="github-fine-grained-pat",
    ),
    pytest.param(
        "gitlab-token",
        "git push with glpat-xY7zAb3CdE9fGh1IjK2L now",
        f"git push with {R} now",
        id="gitlab-token",
    ),
    pytest.param(
        "slack-token",
        "slack bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx end",
        f"slack bot {R} end",
        id="slack-token",
    ),
    pytest.param(
        "slack-webhook",
        "notify https://hooks.slack.com/services/T024BE7LD/B01ABCDEF12/aBcDeFgHiJkLmNoPqRsTuVwX"
        " done",
        f"notify https://hooks.slack.com/services/{R} done",
        id="slack-webhook",
    ),
    pytest.param(
        "discord-webhook",
        "POST https://discord.com/api/webhooks/1234567890123456789/"
        "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789_-AbCdEfGhIjKlMnOpQrStUvWxYz01 ok",
        f"POST https://discord.com/api/webhooks/1234567890123456789/{R} ok",
        id="discord-webhook",
    ),
    pytest.param(
        "discord-bot-token",
        f'client.run("{DISCORD_BOT}")',
        f'client.run("{R}")',
        id="discord-bot-token",
    ),
    pytest.param(
        "discord-bot-token",
        "bot MTIzNDU2Nzg5MDEyMzQ1Njc4.GhJkLm.aB3dEfGhIjKlMnOpQrStUvWxYz0123456789_- ok",
        f"bot {R} ok",
        id="discord-bot-token-18-digit-id",
    ),
    pytest.param(
        "google-api-key",
        "GOOGLE_MAPS: AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI end",
        f"GOOGLE_MAPS: {R} end",
        id="google-api-key",
    ),
    pytest.param(
        "google-oauth-client-secret",
        '{"installed": {"client_id": "1234.apps.googleusercontent.com", '
        '"cs": "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"}}',
        f'{{"installed": {{"client_id": "1234.apps.googleusercontent.com", "cs": "{R}"}}}}',
        id="google-oauth-client-secret",
    ),
    pytest.param(
        "huggingface-token",
        "huggingface-cli login --token hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567 done",
        f"huggingface-cli login --token {R} done",
        id="huggingface-token-with-digits",
    ),
    pytest.param(
        "huggingface-token",
        "hf_abcdefghijklmnopqrstuvwxyzabcdefgh",
        R,
        id="huggingface-token-letters-only",
    ),
    pytest.param(
        "npm-token",
        "echo npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 | npm login",
        f"echo {R} | npm login",
        id="npm-token",
    ),
    pytest.param(
        "pypi-token",
        f"twine upload -u __token__ -p {PYPI} dist/*",
        f"twine upload -u __token__ -p {R} dist/*",
        id="pypi-token",
    ),
    pytest.param(
        "sendgrid-key",
        "sendgrid SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012 sent",
        f"sendgrid {R} sent",
        id="sendgrid-key",
    ),
    pytest.param(
        "twilio-api-key",
        "twilio api:core:keys:create -> SK0123456789abcdef0123456789abcdef created",
        f"twilio api:core:keys:create -> {R} created",
        id="twilio-api-key",
    ),
    pytest.param(
        "named-token",
        "TWILIO_AUTH_TOKEN=0123456789abcdef0123456789abcdef",
        f"TWILIO_AUTH_TOKEN={R}",
        id="twilio-auth-token",
    ),
    pytest.param(
        "shopify-token",
        "shop admin shpat_0123456789abcdef0123456789abcdef done",
        f"shop admin {R} done",
        id="shopify-token",
    ),
    pytest.param(
        "digitalocean-token",
        "doctl auth init -t dop_v1_" + "0123456789abcdef" * 4,
        f"doctl auth init -t {R}",
        id="digitalocean-token",
    ),
    pytest.param("jwt", f"session cookie {JWT}; Path=/", f"session cookie {R}; Path=/", id="jwt"),
    pytest.param(
        "authorization",
        'curl -H "Authorization: Bearer abc123.def456-ghi789_jkl" https://api.example.com',
        f'curl -H "Authorization: Bearer {R}" https://api.example.com',
        id="authorization-bearer",
    ),
    pytest.param(
        "bearer",
        'headers = {"X-Upstream-Auth": "Bearer 0a1b2c3d4e5f6a7b8c9d"}',
        f'headers = {{"X-Upstream-Auth": "Bearer {R}"}}',
        id="bearer-header",
    ),
    pytest.param(
        "bearer",
        "send bearer Zm9vYmFyYmF6MTIz== to the server",
        f"send bearer {R} to the server",
        id="bearer-prose",
    ),
]


@pytest.mark.parametrize(("kind", "text", "expected"), KIND_CASES)
def test_each_kind_is_masked_and_its_surroundings_kept(kind: str, text: str, expected: str) -> None:
    out, kinds = redact_with_kinds(text)
    assert out == expected
    assert kind in kinds
    assert redact(out) == out


def test_every_kind_has_a_case() -> None:
    covered = {case.values[0] for case in KIND_CASES}
    assert covered == set(SECRET_KINDS)
    assert len(SECRET_KINDS) >= 20


def test_kinds_are_counted() -> None:
    out, kinds = redact_with_kinds(f"password=a password=b {AWS_ID} nothing")
    assert out == f"password={R} password={R} {R} nothing"
    assert kinds == {"password": 2, "aws-access-key-id": 1}
    assert redact_with_kinds("nothing here") == ("nothing here", {})


# ---------------------------------------------------------------- what must stay untouched

NEGATIVE_CASES = [
    # Hashes and ids.
    pytest.param("fix: 3f78685 reverts a1b2c3d (see 9fceb02)", id="git-hash-short"),
    pytest.param(
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8\nAuthor: Dev <dev@example.com>",
        id="git-hash-full",
    ),
    pytest.param(
        "python@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        id="sha256-image-digest",
    ),
    pytest.param(
        "requests==2.31.0 \\\n"
        "  --hash=sha256:942c5a758f98d790eaed1a29cb6eefc7ffb0d1cf7af05c3d2791656dbd6ad1e1",
        id="pip-hash",
    ),
    pytest.param(
        "request 123e4567-e89b-12d3-a456-426614174000, trace 550e8400-e29b-41d4-a716-446655440000",
        id="uuids",
    ),
    pytest.param(
        "etag: Xb9kQ2mNvR7tLw4pZs8eYh1cUj5dFa3gKo6iBn0M (no key id nearby)",
        id="base64-40-alone",
    ),
    pytest.param(
        "blob: TWFueSBoYW5kcyBtYWtlIGxpZ2h0IHdvcmsuIFRoZXJlIGlzIG5vIHNlY3JldCBoZXJlLg==",
        id="base64-blob",
    ),
    pytest.param(
        "sk-learn, task-1234567890abcdefghijkl, npm_config_cache=/tmp", id="prefix-lookalikes"
    ),
    pytest.param("hf_hub_download(repo_id='org/model') and huggingface_hub", id="hf-lookalike"),
    pytest.param(
        "os.path.join(module_name_with_many_parts.abcdef.something_long_enough_here)", id="dotted"
    ),
    # Paths with secret words in them.
    pytest.param("/var/run/secrets/kubernetes.io/serviceaccount/token", id="path-k8s-token"),
    pytest.param(
        "~/.config/secret_store/keys/api_key.json and src/tokenizer/key_value.py", id="paths"
    ),
    pytest.param(r"C:\Users\me\keys\id_rsa.pub; ~/.ssh/id_ed25519", id="windows-path"),
    pytest.param("https://github.com/org/repo/blob/main/src/secret.py#L10", id="url-to-secret-py"),
    # Tokenizer output and data.
    pytest.param("token: 'hello' id: 15339\ntoken: ' world' id: 1917", id="tokenizer-output"),
    pytest.param('{"token": "the", "logprob": -0.1, "key": "value"}', id="token-json"),
    pytest.param("max_tokens: 4096, tokens: 1234, key: None", id="token-counts"),
    # Code.
    pytest.param("def connect(host: str, password: str | None = None) -> Conn:", id="annotation"),
    pytest.param("password: Optional[str] = None", id="annotation-optional"),
    pytest.param("secret = get_secret()\napi_key: anthropic_api_key()", id="call"),
    pytest.param("self.password = password\napi_key = config.api_key", id="attribute"),
    pytest.param('password = request.form["password"]', id="index"),
    pytest.param(
        "const csrfToken = document.querySelector(\"meta[name='csrf-token']\")\n"
        "params: { _csrf_token: csrfToken },",
        id="camel-case-reference",
    ),
    pytest.param('TOKEN="${REVIEW_TOKEN:-}"\nif [ -z "$TOKEN" ]; then', id="shell-default"),
    pytest.param('url = f"https://api.example.com/v1?token={token}&key={api_key}"', id="f-string"),
    pytest.param("api_key=os.environ['OPENAI_API_KEY']; password=%s", id="references"),
    pytest.param("Signature: pd.read_csv(filepath_or_buffer, sep=',')", id="ipython-signature"),
    pytest.param("KeyError: 'api_key'", id="key-error"),
    pytest.param("mysql -h db -P3306 -u root -p shop", id="mysql-port"),
    pytest.param("git push -u origin main && docker run -u 1000:1000 img", id="dash-u"),
    # URLs without secrets.
    pytest.param(
        "https://example.com/search?page=2&sort=key&q=token+limits&keyword=x", id="url-query"
    ),
    pytest.param("https://example.com:8080/docs and git@github.com:o/r.git", id="urls"),
    # Logs and prose.
    pytest.param(
        "2024-05-01T12:00:00Z INFO auth ok user=bob request_id=abc123 latency=12ms", id="log-line"
    ),
    pytest.param("[WARN] token bucket refill: 20 tokens; key rotation due", id="log-words"),
    pytest.param("We need to fix the password reset flow; the secret is patience.", id="prose"),
    pytest.param("Bearer authentication is configured", id="bearer-prose"),
]


@pytest.mark.parametrize("text", NEGATIVE_CASES)
def test_ordinary_text_stays_untouched(text: str) -> None:
    assert redact_with_kinds(text) == (text, {})


def test_a_commit_hash_next_to_an_aws_key_id_is_kept() -> None:
    text = f"{AWS_ID} pushed 9fceb02d0ae598e95dc970b74767f19372d61af8"
    assert redact(text) == f"{R} pushed 9fceb02d0ae598e95dc970b74767f19372d61af8"


def test_a_quoted_secret_key_setting_is_masked() -> None:
    # Django test settings often use a dummy, but a quoted SECRET_KEY is a secret by role.
    assert redact("SECRET_KEY='secret',") == f"SECRET_KEY='{R}',"


# ---------------------------------------------------------------- idempotence and offsets

# Ordinary words, ids and paths to mix secrets into; none of them, alone or
# next to another, is a secret name or value. "İ" grows when lower-cased,
# which must not shift any span.
FILLER = st.sampled_from(
    [
        "the",
        "build failed",
        "3f78685",
        "9fceb02d0ae598e95dc970b74767f19372d61af8",
        "123e4567-e89b-12d3-a456-426614174000",
        "/var/run/secrets/token",
        "src/key_store.py:12",
        "token",
        "key: value",
        "tokens: 512",
        "İstanbul",
        "naïve café 🙂",
        "x = 1",
        "https://example.com/a?page=2",
        "",
    ]
)
SEPARATOR = st.sampled_from([" ", "\n", " | ", "\n\n"])
CASES = st.sampled_from([(case.values[1], case.values[2]) for case in KIND_CASES])


@settings(max_examples=300)
@given(st.lists(st.tuples(FILLER, SEPARATOR, CASES, SEPARATOR), min_size=1, max_size=6), FILLER)
def test_secrets_mixed_into_text_are_masked_in_place(
    pieces: list[tuple[str, str, tuple[str, str]]], last: str
) -> None:
    text = "".join(f"{filler}{sep}{secret}{sep2}" for filler, sep, (secret, _), sep2 in pieces)
    expected = "".join(f"{filler}{sep}{out}{sep2}" for filler, sep, (_, out), sep2 in pieces)
    once = redact(text + last)
    # Offsets: every character outside the secrets is where it was, in order.
    assert once == expected + last
    # Idempotence.
    assert redact(once) == once


@given(st.text(max_size=300))
def test_any_text_is_redacted_idempotently(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.:=/ ?&\n\"'", max_size=200))
def test_text_of_secret_characters_is_redacted_idempotently(text: str) -> None:
    # An alphabet dense in names, operators and separators, where one rule's
    # output could become another rule's input.
    for prefix in ("", "password=", "api_key: ", "Bearer ", "?token=", "curl -u a:", "AKIA"):
        once = redact(prefix + text)
        assert redact(once) == once


# ---------------------------------------------------------------- excerpts


def test_a_cut_through_a_secret_name_does_not_leave_the_value_in_the_tail() -> None:
    tail = "WORD=hunter2 psql -h db\n" + "y" * 976
    text = "x" * 9_000 + "\nPGPASS" + tail
    assert redact(text[-len(tail) :]).startswith("WORD=hunter2")  # what cutting first sends
    out = redact_tail(text, len(tail))
    assert "hunter2" not in out
    assert len(out) <= len(tail)
    assert out.endswith("y" * 976)


def test_a_cut_through_a_token_does_not_leave_its_first_characters_in_the_head() -> None:
    text = "cloning with ghp_16C7e42F2" + "92c6912E7710c838347Ae178B4a\n" + "z" * 9_000
    head = len("cloning with ghp_16C7e42F2")
    assert redact(text[:head]).endswith("ghp_16C7e42F2")  # what cutting first sends
    out = redact_head(text, head)
    assert "16C7e42F2" not in out
    assert out.startswith("cloning with [")


@given(
    st.lists(st.tuples(FILLER, SEPARATOR, CASES, SEPARATOR), min_size=1, max_size=4),
    st.lists(st.tuples(FILLER, SEPARATOR, CASES, SEPARATOR), min_size=1, max_size=4),
    st.floats(min_value=0, max_value=1),
)
def test_excerpts_are_the_ends_of_the_whole_text_redacted(
    before: list[tuple[str, str, tuple[str, str], str]],
    after: list[tuple[str, str, tuple[str, str], str]],
    where: float,
) -> None:
    # Two runs of secrets apart by more than the margin: an excerpt of either
    # is exactly the corresponding end of the whole text redacted, wherever
    # the cut falls, including through a secret.
    first = "".join(f"{filler}{sep}{secret}{sep2}" for filler, sep, (secret, _), sep2 in before)
    last = "".join(f"{filler}{sep}{secret}{sep2}" for filler, sep, (secret, _), sep2 in after)
    text = first + "." * (2 * CUT_MARGIN_CHARS) + last
    whole = redact(text)
    head = max(1, round(where * len(first)))
    tail = max(1, round(where * len(last)))
    assert redact_head(text, head) == whole[:head]
    assert redact_tail(text, tail) == whole[-tail:]


def test_excerpts_of_a_short_text() -> None:
    assert redact_head("password=hunter2", 12) == f"password={R}"[:12]
    assert redact_tail("password=hunter2", 4) == R[-4:]
    assert redact_head("abc", 0) == redact_tail("abc", 0) == ""
    assert redact_head("abc", 10) == redact_tail("abc", 10) == "abc"


def test_excerpts_widen_when_redaction_shrinks_the_window() -> None:
    # A window full of long secrets shrinks to less than the excerpt: the
    # excerpt must still come from text redacted whole, not from a cut window.
    key = "github_pat_11ABCDEFG0123456789_" + "a" * 60
    text = (key + " ") * 200 + "PGPASSWORD=hunter2\n"
    out = redact_head(text, 2_500)
    assert "hunter2" not in out and "aaaaaaaaaa" not in out
    assert out == redact(text)[:2_500]


# ---------------------------------------------------------------- the needle prefilter

_ALL_TEXTS = [case.values[1] for case in KIND_CASES] + [case.values[0] for case in NEGATIVE_CASES]


def _every_match_starts_with_its_needle(text: str) -> None:
    # A rule is skipped when its needle is not in the text, which is only
    # right if every match of the rule starts with that needle. (Internal:
    # the rules are private, but this invariant is what keeps them correct.)
    low = text.lower()
    for rule in redact_module._RULES:
        for match in rule.pattern.finditer(low):
            assert low.startswith(rule.needle, match.start()), (rule.kind, rule.needle)


@pytest.mark.parametrize("text", _ALL_TEXTS)
def test_every_match_starts_with_its_rules_needle(text: str) -> None:
    _every_match_starts_with_its_needle(text)


@given(st.lists(st.sampled_from(_ALL_TEXTS) | st.text(max_size=40), max_size=6))
def test_every_match_of_mixed_text_starts_with_its_rules_needle(pieces: list[str]) -> None:
    _every_match_starts_with_its_needle(" ".join(pieces))


def test_every_rule_has_a_needle() -> None:
    assert all(rule.needle for rule in redact_module._RULES)


# ---------------------------------------------------------------- speed


def _cpu_seconds(text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        redact(text)
        best = min(best, time.process_time() - start)
    return best


def test_redaction_time_is_linear_in_the_length_of_the_text() -> None:
    # A ratio within one run, never a wall-clock bound: 4x the text must not
    # take much more than 4x the time (quadratic would be 16x). Absolute
    # figures are in docs/reliability.md (benchmarks/reliability/redaction.py).
    unit = "".join(f"{case.values[1]}\n" for case in KIND_CASES) + "".join(
        f"{case.values[0]}\n" for case in NEGATIVE_CASES
    )
    small = unit * (250_000 // len(unit))
    big = small * 4
    ratio = _cpu_seconds(big, 2) / _cpu_seconds(small, 3)
    assert ratio < 8, ratio


# ---------------------------------------------------------------- earlier cases


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


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param("curl -u a:", id="curl-flag"),
        pytest.param("mysql -p", id="mysql-flag"),
        pytest.param("sshpass -p ", id="sshpass-flag"),
        pytest.param("redis-cli -a ", id="redis-flag"),
        pytest.param("AKIAIOSFODNN7EXAMPL1 ", id="aws-key-ids"),
        pytest.param("aws secret ", id="aws-secret-names"),
        pytest.param("MTIzNDU2Nzg5MDEyMzQ1Njc4.", id="discord-id-parts"),
        pytest.param("AWS4-HMAC-SHA256 Credential=x Signature=", id="sigv4-headers"),
        pytest.param("x_token: ", id="token-names"),
    ],
)
def test_repeated_rule_prefixes_stay_linear(unit: str) -> None:
    # Rules that look back along the line or ahead for a value must not turn
    # a text made of their own prefix into quadratic work.
    small = unit * (50_000 // len(unit))
    ratio = _cpu_seconds(small * 4, 3) / max(_cpu_seconds(small, 3), 1e-4)
    assert ratio < 8, ratio
