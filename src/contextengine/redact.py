"""Secret redaction: credentials never leave the process for a summariser.

Conversations with coding agents are full of credentials: a ``cat .env``, a
failing ``curl -H "Authorization: Bearer ..."``, a stack trace that prints a
database URL. :func:`redact` replaces each secret *value* with
:data:`REDACTED` and keeps the surrounding words, so a reader still sees
*that* a key was there and what it was called::

    >>> redact("OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl012")
    'OPENAI_API_KEY=[REDACTED]'
    >>> redact("postgres://app:hunter2@db:5432/prod")
    'postgres://app:[REDACTED]@db:5432/prod'

Where redaction is applied, and where not
-----------------------------------------

Applied, always, to everything an engine hands a summariser (a summariser may
be a remote model, the one place text leaves the process because of us):

* ``SummaryRequest.messages`` (the compressor's
  :func:`~contextengine.engines.compressor.request.outbound_region`, lcm's
  ``_for_summariser``), and so the rendered ``prompt`` built from them;
* ``SummaryRequest.anchors`` (found in redacted text,
  :func:`contextengine.anchors.message_anchors`);
* ``SummaryRequest.memory_context``
  (:func:`contextengine.engine.sanitize_memory_context`);
* ``SummaryRequest.previous_summary`` only by construction: it is an earlier
  summary, written from redacted input;
* and :class:`~contextengine.OpenAICompatibleSummarizer` redacts its prompt
  once more before it is sent.

Not applied:

* **The archive.** The lossless engine's store keeps every message
  *verbatim*, secrets included: that is what makes it lossless, and
  ``lcm_grep`` / ``lcm_expand`` give the model its own history back as it was.
  A store shared by many hosts (PostgreSQL) can opt in to redaction at rest
  with :func:`redact_message`; what is redacted at rest can never be
  recovered (see ``docs/reliability.md``).
* The conversation the host sends its own model, and the compressor's
  one-line descriptors of old tool outputs: the model already saw those
  secrets and may need them to do its work.

What is recognised (``SECRET_KINDS``, in the order the rules run)
-----------------------------------------------------------------

Structure around a value:

* ``pem-private-key``: PEM private key blocks (armour lines kept, body masked;
  a block cut off before its footer is masked to the end of its base64 lines).
* ``url-password``: ``scheme://user:password@host`` (only the password: the user
  and host say which system the agent talked to).
* ``cli-password``: ``curl -u user:password`` (or ``--user``),
  ``mysql -pPASSWORD``, ``sshpass -p PASSWORD``, ``docker login -p PASSWORD``,
  ``redis-cli -a PASSWORD``, ``--password PASSWORD``. The flag counts only
  after its command on the same line: ``docker run -u 1000:1000`` and
  ``mysql -P3306`` are kept.
* ``aws-sigv4-signature``: ``Signature=`` of an ``AWS4-HMAC-SHA256``
  Authorization header.
* ``password``, ``passphrase``, ``secret``, ``authorization``, ``named-token``,
  ``named-key``: values assigned with ``=``, ``:``, ``=>``, ``:=`` or their
  URL-encoded forms to secret names, in any case: names ending in
  ``password``, ``passwd``, ``passphrase``, ``secret`` or ``authorization``;
  compound names ending in ``token`` (``access_token``, ``GITHUB_TOKEN``,
  ``csrftoken``); ``key`` after a telling prefix (``api_key``, ``x-api-key``,
  ``apikey``, ``private_key``, ``aws_secret_access_key``, ``api%5Fkey``).
  Quoted values (JSON, Python, also escaped inside a JSON string) and bare ones
  (env files, YAML, headers with an auth scheme such as ``Basic``) are both
  handled.
* ``url-query``: secrets in URL query parameters whose name alone is too
  common to be a secret name elsewhere: ``?token=``, ``&key=``, ``&sig=``
  (Azure SAS), ``signature=``, ``X-Amz-Signature=``, ``X-Goog-Signature=``,
  ``auth=``, ``pwd=``, ``pass=``, ``jwt=`` (``access_token=`` and ``api_key=``
  are already secret names).
* ``azure-storage-key``: ``AccountKey=`` in Azure connection strings.
* ``aws-secret-access-key``: a bare 40-character AWS secret access key within
  160 characters after an ``AKIA`` / ``ASIA`` key id (``aws configure``
  prompts, credential CSVs) or within 40 after an ``aws_secret...`` name with
  no assignment (``aws configure set aws_secret_access_key ...``). It must mix
  upper and lower case and hold a digit, ``/`` or ``+``, so a commit hash near
  a key id is kept.

Self-identifying tokens, wherever they appear:

* ``anthropic`` (``sk-ant-``), ``openai`` (``sk-``, ``sk-proj-``,
  ``sk-svcacct-``), ``stripe`` (``sk_live_``, ``sk_test_``, ``rk_live_``,
  ``rk_test_``), ``stripe-webhook-secret`` (``whsec_``),
  ``aws-access-key-id`` (``AKIA``, ``ASIA``), ``github-token`` (``ghp_``,
  ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``), ``github-fine-grained-pat``
  (``github_pat_``), ``gitlab-token`` (``glpat-`` and GitLab's other
  prefixed tokens), ``slack-token`` (``xoxb-`` ... ``xapp-``),
  ``slack-webhook`` (``hooks.slack.com/services/...``), ``discord-webhook``,
  ``discord-bot-token``, ``google-api-key`` (``AIza``),
  ``google-oauth-client-secret`` (``GOCSPX-``), ``huggingface-token``
  (``hf_``), ``npm-token`` (``npm_``), ``pypi-token`` (``pypi-AgE...``),
  ``sendgrid-key`` (``SG.``), ``twilio-api-key`` (``SK`` + 32 hex),
  ``shopify-token`` (``shpat_`` ...), ``digitalocean-token`` (``dop_v1_`` ...),
  ``jwt`` (JSON Web Tokens) and ``bearer`` (``Bearer <token>``).

What is deliberately *not* touched: words without an assignment ("the password
reset flow"), a bare ``token:`` or ``key:`` (too common in tokenizer output and
data), hex digests and commit hashes, UUIDs, paths, base64 that is not next to
a secret name, and values that are obviously references rather than secrets:
``$DB_PASSWORD``, ``{token}``, ``os.environ[...]``, ``None``, a type
annotation such as ``password: str``, a call (``secret = get_secret()``), an
index (``request.form["password"]``), an attribute of a code object
(``self.password``, ``config.api_key``) and a bare identifier named like the
secret (``csrfToken``, ``api_key``, ``DB_PASSWORD``).

Messages and excerpts
---------------------

:func:`redact_message` redacts every string of one message at any depth and
returns a new message (the at-rest helper); :func:`redact_messages` maps it
over a list (what lcm sends a summariser). :func:`redact_head` and
:func:`redact_tail` give the ends of a long text redacted as part of the
whole, for a caller that keeps only its head and tail: redacting an excerpt
cut first misses a secret the cut goes through. :func:`redact_with_kinds`
also counts what it masked, by kind.

Guarantees
----------

* **Idempotent**: ``redact(redact(x)) == redact(x)``; the same holds for
  :func:`redact_message` and :func:`redact_messages`.
* **Deterministic**: the result depends on the text only (no clock, no
  randomness, no configuration), so content-derived ids of redacted messages
  are stable.
* **Local**: only secret spans change; every other character stays where it
  was, in order.
* **Linear** in the length of the text (see below).

Speed matters because whole tool outputs go through here. Every pattern is
compiled once at import; every repetition is bounded or runs over a single
character class (no nested quantifiers, so no catastrophic backtracking); and
every pattern starts with a literal, because that is the only case in which
Python's regex engine skips ahead quickly instead of trying each position
(about half a second per 10 MB per pattern; a literal prefix scans 10 MB in
about 5 ms). To get literal prefixes and still ignore case, the patterns run
over a lower-cased copy of the text and only the spans they find are replaced
in the original. A rule whose literal is not in the text at all is skipped
after a substring test, which makes the many short strings of a message cheap.
A few rules check the original case or the line of what they found
(:attr:`_Rule.accept`), which costs a Python call per candidate, never per
character; those that look along the line are bounded on both sides, so even
a text made of their own prefix stays linear (tested as a ratio).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CUT_MARGIN_CHARS",
    "REDACTED",
    "SECRET_KINDS",
    "redact",
    "redact_bounded",
    "redact_head",
    "redact_message",
    "redact_messages",
    "redact_tail",
    "redact_with_kinds",
]

#: The marker that replaces every secret value.
REDACTED = "[REDACTED]"

# Every pattern below is applied to lower-cased text: write them in lower case.

# The assignment after a secret name: an optional closing quote (``"password":``,
# or ``\"password\":`` inside an escaped JSON string), blanks but never a
# newline (so a heading "Password:" does not swallow the next line), and the
# operator, maybe URL-encoded.
_ASSIGN = r"""\\?["']?[ \t]{0,8}(?:={1,3}|:=|=>|:|%3d|%3a)[ \t]{0,8}"""

# Authorization schemes: kept in front of the masked credential.
_SCHEMES = r"(?:basic|bearer|token|digest|bot|sharedkey|negotiate|aws4-hmac-sha256)"

# Values that are references, placeholders or already redacted. Masking them
# would only hide useful code from the reader (and break idempotence). Checked
# right before the value, inside its quotes if any.
_NOT_A_SECRET = rf"""
(?!
    \[redacted\]
    # An auth scheme belongs to the kept part; backtracking must not make it the value.
  | {_SCHEMES}[ \t]
  | \$ | %\( | %s\b | \{{ | < | \.\.\. | … | \*\*\*
  | (?:none|null|nil|undefined|true|false|str|bytes|string|int|secretstr|optional)\b
  | os\.environ | os\.getenv | getenv\( | process\.env | env\(
)
"""

# A scheme (kept) and the check above, in front of every value.
_LEAD = rf"(?:{_SCHEMES}[ \t]{{1,8}})?{_NOT_A_SECRET}"

# The value, in group ``secret``..``secret4``; the quote before it stays, so
# JSON stays valid.
_VALUE = rf"""
(?:
    # Inside an escaped JSON string the value ends at the next backslash.
    \\["']{_LEAD}(?P<secret>[^"'\\\n]{{1,1000}})
  | "{_LEAD}(?P<secret2>(?:[^"\\\n]|\\.){{1,1000}})
  | '{_LEAD}(?P<secret3>[^'\n]{{1,1000}})
    # Bare: up to a blank, a quote, a query-string or code punctuation. The
    # possessive repeat stops backtracking from turning the callee of
    # "secret = get_secret()" into a shorter value that is not followed by "(".
  | {_LEAD}(?P<secret4>[^\s"'&,;()<>\[\]{{}}\\]{{1,1000}}+)(?![(\[])
)
"""

# "key" alone is an ordinary word (and a JSON field); these prefixes make it a
# secret, joined to it by nothing, ``_``, ``-``, ``.`` or URL-encoded ``%5F`` /
# ``%2D``. Look-behinds must have a fixed width, hence one per prefix and
# separator width.
_KEY_PREFIXES = (
    "api",
    "access",
    "auth",
    "refresh",
    "session",
    "client",
    "private",
    "secret",
    "app",
    "consumer",
    "signing",
    "encryption",
    "master",
    "bot",
    "webhook",
    "license",
)
_AFTER_KEY_PREFIX = "|".join(
    (
        # One cheap test of the character before "key" picks the branch, so
        # the common "key: value" fails after three checks, not forty-eight.
        r"(?<=[_.-]key)(?:" + "|".join(f"(?<={p}.key)" for p in _KEY_PREFIXES) + ")",
        r"(?<=%5fkey|%2dkey)(?:" + "|".join(f"(?<={p}...key)" for p in _KEY_PREFIXES) + ")",
        r"(?<=[a-z]key)(?:" + "|".join(f"(?<={p}key)" for p in _KEY_PREFIXES) + ")",
    )
)

# (kind, name pattern). Each name pattern starts with the literal word a secret
# name ends in.
_NAME_PATTERNS = (
    # A password needs nothing before it: PGPASSWORD=, dbPassword=, "password":.
    ("password", r"passw(?:or)?d"),
    ("passphrase", r"passphrase"),
    ("secret", r"secret"),
    ("authorization", r"authorization"),
    # token only as the end of a compound name: access_token, GITHUB_TOKEN,
    # csrftoken. A bare "token:" is everywhere in tokenizer output.
    ("named-token", r"token(?:(?<=[a-z0-9_-]token)|(?<=%5ftoken)|(?<=%2dtoken))"),
    # The cheap look-ahead for an assignment runs first, so the prefix
    # look-behinds are only tried where "key" is being assigned.
    ("named-key", rf"key(?=\\?[\"']?[ \t]{{0,8}}[=:%])(?:{_AFTER_KEY_PREFIX})"),
)

# Query parameters that are secrets in a URL although the name alone is not a
# secret name elsewhere ("key" and "token" are everywhere in code and data).
_QUERY_NAMES = (
    r"(?:token|key|sig|signature|x-amz-signature|x-goog-signature|auth|pwd|pass|jwt)"
    r"(?:=|%3d)"
)
_QUERY_VALUE = rf"{_NOT_A_SECRET}(?P<secret>[^&\s#\"'<>\\]{{1,1000}})"

# A bare AWS secret access key: 40 characters of base64, alone (not a piece of
# a longer token such as "sk-proj-<40 characters>").
_AWS_SECRET = r"(?<![a-z0-9/+_-])(?P<secret>[a-z0-9/+]{40})(?![a-z0-9/+=_-])"

# Identifiers a bare value may be, case-sensitively, to count as a reference to
# a secret rather than the secret: ``self.password``, ``config.api_key``,
# ``password``, ``DB_PASSWORD``, ``csrfToken``.
_CODE_REFERENCE = re.compile(
    r"""
    (?i:self|this|cls|config|conf|cfg|settings|args|options|opts|ctx|context|request|req
       |response|resp|res|params|kwargs|env|os|process|window|document|app|creds
       |credentials)\.[A-Za-z_][\w.]*
  | (?:[A-Za-z_][\w.-]*[_.-])?(?i:password|passwd|pwd|passphrase|secret|token|key|apikey)s?
  | [a-z][a-zA-Z0-9]*(?:Password|Passwd|Passphrase|Secret|Token|Key)s?
    """,
    re.VERBOSE,
)


#: ``accept(original_text, group, start, end)``: False keeps what a pattern found.
_Accept = Callable[[str, str, int, int], bool]


def _not_a_reference(text: str, group: str, start: int, end: int) -> bool:
    """Bare values of secret names that are identifiers of code, or punctuation, are kept.

    Punctuation only: the ``-`` of a shell default, ``${TOKEN:-}``.
    """
    if group != "secret4":
        return True
    return _CODE_REFERENCE.fullmatch(text, start, end) is None and any(
        c.isalnum() for c in text[start:end]
    )


def _mixed_base64(text: str, group: str, start: int, end: int) -> bool:
    """An AWS secret key mixes cases and has a digit, "/" or "+"; a commit hash does not."""
    value = text[start:end]
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() or c in "/+" for c in value)
    )


def _upper_sk(text: str, group: str, start: int, end: int) -> bool:
    """Twilio key sids start with an upper-case ``SK``."""
    return text.startswith("SK", start)


# -p with the password attached (mysql -pSECRET), or apart (sshpass -p SECRET).
_P_ATTACHED = ("mysql", "mariadb")
_P_APART = ("sshpass", "docker login", "podman login", "nerdctl login", "buildah login")


def _on_the_line(*commands: str, reach: int = 500, fold: bool = False) -> _Accept:
    """Accept a candidate when one of ``commands`` occurs before it on its line, within ``reach``.

    A plain substring test (``fold``: of the lower-cased text): with no
    regex and no loop it costs one C-level scan of ``reach`` characters, even
    on a text crafted to repeat the flag.
    """

    def accept(text: str, group: str, start: int, end: int) -> bool:
        # Bounded on both sides: an unbounded rfind would make a text without
        # newlines quadratic.
        begin = max(0, start - reach)
        begin = text.rfind("\n", begin, start) + 1 or begin
        if fold:
            line = text[begin:start].lower()
            return any(command in line for command in commands)
        return any(text.find(command, begin, start) >= 0 for command in commands)

    return accept


def _dash_p_password(text: str, group: str, start: int, end: int) -> bool:
    """``-p`` gives a password to mysql (attached) and to sshpass or ``docker login``."""
    flag = start - 1
    if text[flag] in "\"'":
        flag -= 1
    # Attached only in lower case: -P3306 is mysql's port.
    after = _after_mysql if text[flag] == "p" else _after_sshpass_or_login
    return after(text, group, start, end)


_after_mysql = _on_the_line(*_P_ATTACHED)
_after_sshpass_or_login = _on_the_line(*_P_APART)


@dataclass(frozen=True)
class _Rule:
    """A pattern whose ``secret`` group is replaced by :data:`REDACTED`.

    ``kind`` names the secret in :data:`SECRET_KINDS` and in counts. ``block``
    marks PEM blocks, whose body becomes its own line. ``accept``, when set,
    checks each candidate in the original (not lower-cased) text. ``needle``
    is the literal every match starts with: a text without it skips the rule.
    """

    kind: str
    pattern: re.Pattern[str]
    block: bool = False
    accept: _Accept | None = None
    needle: str = ""


# Characters that end a pattern's leading literal; one of "?*{" after a
# character makes that character optional too.
_NOT_LITERAL = frozenset("()[]{}?*+|^$\\ \t\n#")
_LITERAL_ESCAPES = frozenset(".?/-&= ")


def _leading_literal(pattern: str) -> str:
    """The literal text every match of ``pattern`` (verbose syntax) starts with, maybe ""."""
    pattern = pattern.strip().removeprefix("(?P<secret>")
    literal: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern) and pattern[i + 1] in _LITERAL_ESCAPES:
            char, step = pattern[i + 1], 2
        elif char in _NOT_LITERAL:
            break
        else:
            step = 1
        if pattern[i + step : i + step + 1] in ("?", "*", "{"):
            break
        literal.append(char)
        i += step
    return "".join(literal)


def _rule(kind: str, pattern: str, *, block: bool = False, accept: _Accept | None = None) -> _Rule:
    return _Rule(kind, re.compile(pattern, re.VERBOSE), block, accept, _leading_literal(pattern))


_RULES: tuple[_Rule, ...] = (
    # PEM private keys go first, whole, so no later rule sees their body. The
    # body never holds five dashes in a row, so the scan for the footer stops
    # at the next armour line instead of running over the whole text. Every
    # "[^-]" run can only end at a dash, so the split is unambiguous.
    _rule(
        "pem-private-key",
        r"""
        -----begin[a-z0-9\ ]{0,40}private\ key(?:\ block)?-----
        (?:
            # Single dashes occur in legacy headers ("Proc-Type: 4,ENCRYPTED").
            (?P<secret>(?:[^-]{0,100000}-(?!----)){0,16}[^-]{0,100000})
            -----end[a-z0-9\ ]{0,40}private\ key(?:\ block)?-----
            # No footer (the text was truncated): mask the whole lines of
            # base64 that follow, and stop at the first line that is not.
          | (?P<secret2>(?:[\ \t]*\r?\n[a-z0-9+/=]{1,200}[\ \t]*(?=\r?\n|\Z)){1,5000})
        )
        """,
        block=True,
    ),
    # scheme://user:password@host. Only the password goes: the user and host
    # say which system the agent talked to, which a summary should keep. An
    # unencoded "@" in the password ("root:p@ss@db") is common in pasted
    # commands, so the password runs to the last "@" before the path.
    _rule("url-password", r"""://[^\s:/@?\#"'<>]{0,256}:(?P<secret>[^\s/"'<>]{1,256})(?=@)"""),
    # Passwords on command lines. Each rule starts at its flag, a literal, and
    # accepts a candidate only when the command that gives the flag that
    # meaning stands before it on its line (-u, -p and -a mean other things
    # to other commands: `git push -u`, `docker run -u 1000:1000`, `mkdir -p`).
    _rule(
        "cli-password",
        r"""-u(?<=[\ \t]-u)(?:[\ \t]{1,8}|=)?["']?[^\s:"']{0,200}:"""
        + _NOT_A_SECRET
        + r"""(?P<secret>[^\s"']{1,200})""",
        accept=_on_the_line("curl"),
    ),
    _rule(
        "cli-password",
        r"""--user(?<=[\ \t]--user)(?:[\ \t]{1,8}|=)["']?[^\s:"']{0,200}:"""
        + _NOT_A_SECRET
        + r"""(?P<secret>[^\s"']{1,200})""",
        accept=_on_the_line("curl"),
    ),
    _rule(
        "cli-password",
        r"""-p(?<=[\ \t]-p)[\ \t]{0,8}["']?"""
        + _NOT_A_SECRET
        + r"""(?P<secret>[^\s"'-][^\s"']{0,200})""",
        accept=_dash_p_password,
    ),
    _rule(
        "cli-password",
        r"""-a(?<=[\ \t]-a)[\ \t]{1,8}["']?"""
        + _NOT_A_SECRET
        + r"""(?P<secret>[^\s"'-][^\s"']{0,200})""",
        accept=_on_the_line("redis-cli"),
    ),
    # --password VALUE (with "=" it is a named value); also redis-cli's --pass.
    _rule(
        "cli-password",
        r"""--pass(?<=[\ \t]--pass)(?:word)?[\ \t]{1,8}["']?"""
        + _NOT_A_SECRET
        + r"""(?P<secret>[^\s"'-][^\s"']{0,200})""",
    ),
    # The signature of an AWS SigV4 Authorization header, before the
    # authorization rule masks the credential in front of it.
    _rule(
        "aws-sigv4-signature",
        r"signature=(?P<secret>[0-9a-f]{64})(?![0-9a-z])",
        accept=_on_the_line("aws4-hmac-sha256", reach=1000, fold=True),
    ),
    # name = value, before the token rules so "api_key=sk-..." keeps its name.
    *(
        _rule(kind, name + _ASSIGN + _VALUE, accept=_not_a_reference)
        for kind, name in _NAME_PATTERNS
    ),
    _rule("url-query", r"\?" + _QUERY_NAMES + _QUERY_VALUE),
    _rule("url-query", r"&(?:amp;)?" + _QUERY_NAMES + _QUERY_VALUE),
    _rule("azure-storage-key", r"accountkey[ \t]{0,8}=[ \t]{0,8}(?P<secret>[a-z0-9+/]{20,}={0,2})"),
    # A bare AWS secret key after its key id (an `aws configure` session, a
    # credentials CSV) or after an aws_secret... name without an assignment
    # (`aws configure set aws_secret_access_key ...`). These run before the
    # key-id rule, which would otherwise hide the id they look for.
    *(
        _rule(
            "aws-secret-access-key",
            rf"{prefix}(?<![a-z0-9]{prefix})[a-z0-9]{{16}}(?![a-z0-9])[\s\S]{{0,160}}?"
            + _AWS_SECRET,
            accept=_mixed_base64,
        )
        for prefix in ("akia", "asia")
    ),
    _rule(
        "aws-secret-access-key",
        r"aws(?<![a-z0-9]aws)[\ _-]?secret[^\n]{0,40}?" + _AWS_SECRET,
        accept=_mixed_base64,
    ),
    # Self-identifying tokens. The look-behind right after the literal keeps
    # "task-..." or "dask_..." out; ones that could be words ("sk-learn",
    # "xoxo") must contain a digit, as every real key does.
    _rule("anthropic", r"(?P<secret>sk-ant-(?<![a-z0-9_-]sk-ant-)[a-z0-9_-]{20,})"),
    # OpenAI (sk-, sk-proj-, sk-svcacct-):
    _rule("openai", r"(?P<secret>sk-(?<![a-z0-9_-]sk-)(?=[a-z_-]{0,200}[0-9])[a-z0-9_-]{20,})"),
    # Stripe secret and restricted keys, webhook signing secrets:
    _rule("stripe", r"(?P<secret>sk_(?<![a-z0-9_]sk_)(?:live|test)_[a-z0-9]{16,})"),
    _rule("stripe", r"(?P<secret>rk_(?<![a-z0-9_]rk_)(?:live|test)_[a-z0-9]{16,})"),
    _rule("stripe-webhook-secret", r"(?P<secret>whsec_(?<![a-z0-9_]whsec_)[a-z0-9]{24,})"),
    # AWS access key ids, always 20 characters:
    _rule("aws-access-key-id", r"(?P<secret>akia(?<![a-z0-9]akia)[a-z0-9]{16})(?![a-z0-9])"),
    _rule("aws-access-key-id", r"(?P<secret>asia(?<![a-z0-9]asia)[a-z0-9]{16})(?![a-z0-9])"),
    # GitHub personal, OAuth, user-to-server, server-to-server, refresh, fine-grained:
    _rule("github-token", r"(?P<secret>gh(?<![a-z0-9_]gh)[pousr]_[a-z0-9]{20,})"),
    _rule(
        "github-fine-grained-pat",
        r"(?P<secret>github_pat_(?<![a-z0-9_]github_pat_)[a-z0-9_]{20,})",
    ),
    # GitLab personal, deploy, runner, trigger, CI job, OAuth and feature-flag tokens:
    _rule(
        "gitlab-token",
        r"(?P<secret>gl(?<![a-z0-9_-]gl)(?:pat|dt|rt|ptt|cbt|soat|oas|ffct|imt)-[a-z0-9_-]{20,})",
    ),
    # Slack bot, user, app-level, refresh and legacy tokens; incoming webhooks:
    _rule(
        "slack-token",
        r"(?P<secret>xox(?<![a-z0-9]xox)[abpeosr]-(?=[a-z-]{0,200}[0-9])[a-z0-9-]{10,})",
    ),
    _rule(
        "slack-token", r"(?P<secret>xapp-(?<![a-z0-9]xapp-)(?=[a-z-]{0,200}[0-9])[a-z0-9-]{10,})"
    ),
    _rule(
        "slack-webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[a-z0-9/_-]{16,})",
    ),
    # Discord webhooks (the id is kept) and bot tokens. A bot token is
    # base64(user id).timestamp.hmac, and the base64 of an ASCII number is
    # made of the quads [MNO][DTjz][AEIMQUYcgk][w-z0-5] (a last digit or two
    # give [MNO][AQgw] or [MNO][DTjz][AEIMQUYcgk]); the rule starts at the
    # first dot, the only literal, and looks back for the 23 to 26 characters
    # of a 17- to 19-digit id.
    _rule(
        "discord-webhook",
        r"discord(?:app)?\.com/api/(?:v[0-9]{1,2}/)?webhooks/[0-9]{5,30}/"
        r"(?P<secret>[a-z0-9_-]{30,})",
    ),
    _rule(
        "discord-bot-token",
        r"""\.
        (?:
            (?<=(?<![a-z0-9_-])(?P<lead>(?:[mno][dtjz][aeimquycgk][w-z0-5]){6}[mno][aqgw])\.)
          | (?<=(?<![a-z0-9_-])(?P<lead2>(?:[mno][dtjz][aeimquycgk][w-z0-5]){6})\.)
          | (?<=(?<![a-z0-9_-])(?P<lead3>(?:[mno][dtjz][aeimquycgk][w-z0-5]){5}
                [mno][dtjz][aeimquycgk])\.)
        )
        (?P<secret>[a-z0-9_-]{6}\.[a-z0-9_-]{27,40})(?![a-z0-9_-])
        """,
    ),
    # Google API keys and OAuth client secrets:
    _rule("google-api-key", r"(?P<secret>aiza(?<![a-z0-9_-]aiza)[0-9a-z_-]{35})"),
    _rule(
        "google-oauth-client-secret",
        r"(?P<secret>gocspx-(?<![a-z0-9_-]gocspx-)[a-z0-9_-]{20,})",
    ),
    # Hugging Face (hf_ and 34 letters and digits):
    _rule("huggingface-token", r"(?P<secret>hf_(?<![a-z0-9_]hf_)[a-z0-9]{30,})(?![a-z0-9_])"),
    # npm, PyPI (a macaroon: "pypi-AgE" / "pypi-AgEN" for TestPyPI), SendGrid:
    _rule("npm-token", r"(?P<secret>npm_(?<![a-z0-9_]npm_)[a-z0-9]{36})(?![a-z0-9])"),
    _rule("pypi-token", r"(?P<secret>pypi-ag(?<![a-z0-9_-]pypi-ag)[a-z0-9_-]{50,})"),
    _rule(
        "sendgrid-key",
        r"(?P<secret>sg\.(?<![a-z0-9_.-]sg\.)[a-z0-9_-]{22}\.[a-z0-9_-]{43})(?![a-z0-9_-])",
    ),
    # Twilio API key sids (the secret that goes with one is a named value):
    _rule(
        "twilio-api-key",
        r"(?P<secret>sk(?<![a-z0-9_]sk)[0-9a-f]{32})(?![0-9a-z])",
        accept=_upper_sk,
    ),
    # Shopify access, shared-secret, custom-app and partner tokens; DigitalOcean:
    _rule("shopify-token", r"(?P<secret>shp(?<![a-z0-9_]shp)(?:at|ss|ca|pa)_[a-f0-9]{32})"),
    _rule("digitalocean-token", r"(?P<secret>do(?<![a-z0-9_]do)[por]_v1_[a-f0-9]{64})"),
    # JSON Web Tokens, base64url('{"') header, payload and signature:
    _rule("jwt", r"(?P<secret>eyj[a-z0-9_-]{8,}\.eyj[a-z0-9_-]{8,}\.[a-z0-9_-]{8,})"),
    # "Bearer <token>"; the digit keeps "bearer authentication" prose out.
    _rule(
        "bearer",
        r"bearer(?<![a-z0-9]bearer)[ \t]{1,8}"
        r"(?P<secret>(?=[a-z._~+/-]{0,400}[0-9])[a-z0-9._~+/-]{8,}=*)",
    ),
)

#: Every kind of secret :func:`redact` recognises, in the order its rules run.
SECRET_KINDS: tuple[str, ...] = tuple(dict.fromkeys(rule.kind for rule in _RULES))

_SECRET_GROUPS = ("secret", "secret2", "secret3", "secret4")
# Groups inside a look-behind that extend the secret to the left of the match.
_LEAD_GROUPS = ("lead", "lead2", "lead3")

# Upper- to lower-case for ASCII only, which never changes the length.
_ASCII_LOWER = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "abcdefghijklmnopqrstuvwxyz",
)


def _secret_span(match: re.Match[str]) -> tuple[str, int, int]:
    """The name and span of the group holding the secret (one per alternative)."""
    groups = match.re.groupindex
    for group in _SECRET_GROUPS:
        if group in groups and match.start(group) >= 0:
            start = match.start(group)
            for lead in _LEAD_GROUPS:
                if lead in groups and match.start(lead) >= 0:
                    start = match.start(lead)
            return group, start, match.end(group)
    raise AssertionError(f"pattern without a secret group matched: {match.re.pattern!r}")


def _apply(rule: _Rule, text: str, low: str, counts: Counter[str] | None) -> tuple[str, str]:
    """Replace the secrets ``rule`` finds in ``low`` in both ``text`` and ``low``.

    Building the lower-cased result alongside saves lower-casing the whole
    text again for the next rule.
    """
    pieces: list[str] = []
    low_pieces: list[str] = []
    cursor = 0
    for match in rule.pattern.finditer(low):
        group, start, end = _secret_span(match)
        if start < cursor:
            continue  # a look-behind reached into the previous replacement
        if rule.accept is not None and not rule.accept(text, group, start, end):
            continue
        marker = REDACTED
        if rule.block:
            # A key body becomes a line of its own, before the footer if any.
            marker = f"\n{REDACTED}\n" if group == "secret" else f"\n{REDACTED}"
        pieces += (text[cursor:start], marker)
        low_pieces += (low[cursor:start], marker.lower())
        cursor = end
        if counts is not None:
            counts[rule.kind] += 1
    if not pieces:
        return text, low
    pieces.append(text[cursor:])
    low_pieces.append(low[cursor:])
    return "".join(pieces), "".join(low_pieces)


def _redact(text: str, counts: Counter[str] | None) -> str:
    if not text:
        return text
    low = text.lower()
    if len(low) != len(text):
        # A few characters (such as "İ") grow when lower-cased, which would
        # misalign the spans; lower-case ASCII only (slower, same length).
        low = text.translate(_ASCII_LOWER)
    for rule in _RULES:
        # A C-level substring test is far cheaper than starting a regex scan:
        # for the many short strings of a message it is most of the saving.
        if rule.needle in low:
            text, low = _apply(rule, text, low, counts)
    return text


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret value replaced by ``[REDACTED]``.

    Names, URLs, hosts and header names around the secret are kept; see the
    module docstring for what is and is not recognised. Idempotent,
    deterministic, and linear in the length of ``text``.
    """
    return _redact(text, None)


def redact_with_kinds(text: str) -> tuple[str, Counter[str]]:
    """:func:`redact`, and how many secrets of each kind (:data:`SECRET_KINDS`) it masked.

    For reports and audits: ``redact_with_kinds(log)[1]`` says what a text
    held without showing it.
    """
    counts: Counter[str] = Counter()
    return _redact(text, counts), counts


# ---------------------------------------------------------------- excerpts

#: Text beyond a cut that :func:`redact_head` and :func:`redact_tail` redact
#: with the excerpt: a secret the cut goes through is seen whole if it ends
#: within this many characters of it. A PEM RSA-4096 key is about 3,300.
CUT_MARGIN_CHARS = 4_096


def redact_head(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text``, redacted as part of the whole text.

    Cutting first and redacting the excerpt misses a secret the cut goes
    through: ``PGPASSW`` | ``ORD=hunter2`` leaves ``ORD=hunter2`` to the
    other excerpt, which no rule can tell from any assignment. Redacting the
    whole text first costs a pass over all of it (40 ms for a 2 MB log). This
    redacts the excerpt with :data:`CUT_MARGIN_CHARS` of the text after it,
    then cuts, so it costs ``chars + CUT_MARGIN_CHARS`` at most (more only in
    the rare text whose redactions shrink the window by half the margin, when
    the window grows until they do not). The result is at most ``chars``
    characters; a ``[REDACTED]`` at the cut may be cut too.
    """
    if chars <= 0:
        return ""
    window = chars + CUT_MARGIN_CHARS
    while True:
        redacted = redact(text[:window])
        # Secrets masked in the window shrink it: if they shrank it into the
        # margin, the end of the window (maybe inside a secret) could come
        # within the excerpt. Widen and redo.
        if window >= len(text) or len(redacted) >= chars + CUT_MARGIN_CHARS // 2:
            return redacted[:chars]
        window *= 2


def redact_tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of ``text``, redacted as part of the whole text.

    The mirror of :func:`redact_head`: the excerpt is redacted with
    :data:`CUT_MARGIN_CHARS` of the text before it, which also holds the
    secret *name* of a value right after the cut.
    """
    if chars <= 0:
        return ""
    window = chars + CUT_MARGIN_CHARS
    while True:
        redacted = redact(text[-window:])
        if window >= len(text) or len(redacted) >= chars + CUT_MARGIN_CHARS // 2:
            return redacted[-chars:]
        window *= 2


def redact_bounded(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters (head and tail kept) and redacted.

    The excerpt a summariser may receive of a long text: like
    :func:`contextengine.summary_prompt.bound_text`, but each end is redacted
    as part of the whole text (:func:`redact_head`, :func:`redact_tail`), so a
    secret the cut goes through is not sent in part. A text within ``limit``
    is redacted whole.
    """
    if limit <= 0 or len(text) <= limit:
        return redact(text)
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return (
        f"{redact_head(text, head)}\n[… {omitted} characters omitted …]\n{redact_tail(text, tail)}"
    )


# ---------------------------------------------------------------- messages

# Keys whose string values are structure, identifiers or opaque data, never
# prose: role and type names, call ids, tool names, the signatures of thinking
# blocks (which must round-trip byte for byte) and base64 payloads (images,
# redacted_thinking), where a chance match would corrupt the data.
_STRUCTURAL_KEYS = frozenset(
    {
        "role",
        "type",
        "id",
        "tool_call_id",
        "tool_use_id",
        "call_id",
        "name",
        "signature",
        "data",
        "media_type",
        "mime_type",
        "detail",
        "cache_control",
    }
)

# A dict key naming a secret (same names as the text rules): its whole string
# value is the secret, as in ``{"password": "hunter2"}`` passed as a tool
# ``input`` object rather than a JSON string.
_SECRET_KEY_NAME = re.compile(
    r"[\w.%-]*(?:passw(?:or)?d|passphrase|secret|authorization)"
    r"|[\w.%-]*[a-z0-9_-]token"
    r"|[\w.%-]*(?:" + "|".join(_KEY_PREFIXES) + r")(?:[_.-]|%5f|%2d)?key"
)
# Matches (empty) at a value that is not a reference or placeholder.
_REAL_VALUE = re.compile(r"[ \t]*" + _NOT_A_SECRET, re.VERBOSE)
_SCHEME_PREFIX = re.compile(_SCHEMES + r"[ \t]{1,8}")


def _redact_named_value(value: str) -> str:
    """The value of a secret-named key: masked whole, keeping an auth scheme."""
    low = value.translate(_ASCII_LOWER)
    scheme = _SCHEME_PREFIX.match(low)
    kept = scheme.end() if scheme else 0
    if kept == len(value) or not _REAL_VALUE.match(low, kept):
        return redact(value)
    return value[:kept] + REDACTED


def _redact_value(value: Any, key: str | None) -> Any:
    if isinstance(value, str):
        if key in _STRUCTURAL_KEYS or value.startswith("data:"):
            return value  # structure, or a data: URL (an inline image)
        if key is not None and _SECRET_KEY_NAME.fullmatch(key.lower()) and value.strip():
            return _redact_named_value(value)
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(v, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_value(item, key) for item in value]
    return value


def redact_message(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of one message with every secret in it redacted; for redaction at rest.

    Every string of the message is redacted with :func:`redact`, at any depth:
    string content, the text of content parts (``text``, ``thinking``, nested
    ``tool_result`` content), tool-call and legacy ``function_call``
    arguments (strings, or objects such as an Anthropic ``tool_use`` input,
    whose values under secret-named keys are masked whole),
    ``reasoning_content``, ``thinking_blocks`` and any other field a host
    added. Left alone are the strings under structural keys (``role``,
    ``type``, ``id``, ``tool_call_id``, ``name``, ``signature``, ``data``, ...)
    and ``data:`` URLs, so the message keeps its shape, its pairing and its
    images.

    Guarantees, which an archive that derives message identities from content
    relies on:

    * **new containers**: the result and every dict and list in it are new;
      the input is never mutated;
    * **idempotent**: ``redact_message(redact_message(m)) == redact_message(m)``,
      so a message read back from a redacting archive and handed in again
      gets the same identity;
    * **deterministic**: equal messages give equal results, in any process;
    * a message without secrets comes back equal (``==``) to the input.

    A ``message`` that is not a dict is returned unchanged.
    """
    if not isinstance(message, dict):
        return message
    result: dict[str, Any] = _redact_value(message, None)
    return result


def redact_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return :func:`redact_message` of each of ``messages``, in a new list.

    Items that are not dicts pass through unchanged: validation is the job of
    :func:`contextengine.messages.validate_messages`.
    """
    return [redact_message(message) for message in messages]
