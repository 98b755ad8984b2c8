"""Secret redaction for text that is about to be archived, summarised or shown.

Conversations with coding agents are full of credentials: a ``cat .env``, a
failing ``curl -H "Authorization: Bearer ..."``, a stack trace that prints a
database URL. Before such text leaves the process (to a summariser, a store or
a report) :func:`redact` replaces each secret *value* with :data:`REDACTED` and
keeps the surrounding words, so a reader still sees *that* a key was there and
what it was called::

    >>> redact("OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl012")
    'OPENAI_API_KEY=[REDACTED]'
    >>> redact("postgres://app:hunter2@db:5432/prod")
    'postgres://app:[REDACTED]@db:5432/prod'

What is recognised, in the order the rules run:

1. PEM private key blocks (armour lines kept, body masked; a block cut off
   before its footer is masked to the end of its base64 lines).
2. Passwords in URLs, ``scheme://user:password@host`` (only the password).
3. Values assigned with ``=``, ``:``, ``=>``, ``:=`` or their URL-encoded forms
   to secret names, in any case: names ending in ``password``, ``passwd``,
   ``passphrase``, ``secret`` or ``authorization``; compound names ending in
   ``token`` (``access_token``, ``GITHUB_TOKEN``, ``csrftoken``); ``key`` after
   a telling prefix (``api_key``, ``x-api-key``, ``apikey``, ``private_key``,
   ``aws_secret_access_key``, ``api%5Fkey``). Quoted values (JSON, Python, also
   escaped inside a JSON string) and bare ones (env files, query strings,
   YAML, headers with an auth scheme such as ``Basic``) are both handled.
4. Self-identifying tokens wherever they appear: OpenAI / Anthropic ``sk-...``,
   AWS access key ids (``AKIA`` / ``ASIA``), GitHub (``ghp_`` ... ``github_pat_``),
   Slack (``xoxb-`` ... ``xapp-``), Stripe, Google API keys, Hugging Face and
   JSON Web Tokens.
5. ``Bearer <token>``.

What is deliberately *not* touched: words without an assignment ("the password
reset flow"), a bare ``token:`` or ``key:`` (too common in tokenizer output and
data), hex digests and commit hashes, UUIDs, paths, and values that are
obviously references rather than secrets (``$DB_PASSWORD``, ``os.environ[...]``,
``None``, a type annotation such as ``password: str``). Redaction is
idempotent: ``redact(redact(x)) == redact(x)``.

Speed matters because whole tool outputs go through here. Every pattern is
compiled once at import; every repetition is bounded or runs over a single
character class (no nested quantifiers, so no catastrophic backtracking); and
every pattern starts with a literal, because that is the only case in which
Python's regex engine skips ahead quickly instead of trying each position
(about half a second per 10 MB per pattern). To get literal prefixes and still
ignore case, the patterns run over a lower-cased copy of the text and only the
spans they find are replaced in the original.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["REDACTED", "redact", "redact_messages"]

#: The marker that replaces every secret value.
REDACTED = "[REDACTED]"

# Every pattern below is applied to lower-cased text: write them in lower case.

# The assignment after a secret name: an optional closing quote (``"password":``,
# or ``\"password\":`` inside an escaped JSON string), blanks but never a
# newline (so a heading "Password:" does not swallow the next line), and the
# operator, maybe URL-encoded.
_ASSIGN = r"""\\?["']?[ \t]{0,8}(?:={1,3}|:=|=>|:|%3d|%3a)[ \t]{0,8}"""

# Values that are references, placeholders or already redacted. Masking them
# would only hide useful code from the reader (and break idempotence).
_NOT_A_SECRET = r"""
(?!
    \[redacted\]
    # An auth scheme belongs to the kept part; backtracking must not make it the value.
  | (?:basic|bearer|token|digest)[ \t]
  | \$ | %\( | \{\{ | <
  | (?:none|null|nil|undefined|true|false|str|bytes|string|int|secretstr|optional)\b
  | os\.environ | os\.getenv | getenv\( | process\.env | env\(
)
"""

# The value, in group ``secret``; the quote before it stays, so JSON stays valid.
_VALUE = rf"""
(?:(?:basic|bearer|token|digest)[ \t]{{1,8}})?
{_NOT_A_SECRET}
(?:
    # Inside an escaped JSON string the value ends at the next backslash.
    \\["'](?P<secret>[^"'\\\n]{{1,1000}})
  | "(?P<secret2>(?:[^"\\\n]|\\.){{1,1000}})
  | '(?P<secret3>[^'\n]{{1,1000}})
    # Bare: up to a blank, a quote, a query-string or code punctuation.
  | (?P<secret4>[^\s"'&,;()<>\[\]{{}}\\]{{1,1000}})
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

# Each name pattern starts with the literal word a secret name ends in.
_NAME_PATTERNS = (
    # A password needs nothing before it: PGPASSWORD=, dbPassword=, "password":.
    r"passw(?:or)?d",
    r"passphrase",
    r"secret",
    r"authorization",
    # token only as the end of a compound name: access_token, GITHUB_TOKEN,
    # csrftoken. A bare "token:" is everywhere in tokenizer output.
    r"token(?:(?<=[a-z0-9_-]token)|(?<=%5ftoken)|(?<=%2dtoken))",
    # The cheap look-ahead for an assignment runs first, so the prefix
    # look-behinds are only tried where "key" is being assigned.
    rf"key(?=\\?[\"']?[ \t]{{0,8}}[=:%])(?:{_AFTER_KEY_PREFIX})",
)


@dataclass(frozen=True)
class _Rule:
    """A pattern whose ``secret`` groups are replaced by :data:`REDACTED`.

    ``block`` marks PEM blocks, whose body becomes its own line.
    """

    pattern: re.Pattern[str]
    block: bool = False


def _rule(pattern: str, *, block: bool = False) -> _Rule:
    return _Rule(re.compile(pattern, re.VERBOSE), block)


_RULES: tuple[_Rule, ...] = (
    # PEM private keys go first, whole, so no later rule sees their body. The
    # body never holds five dashes in a row, so the scan for the footer stops
    # at the next armour line instead of running over the whole text. Every
    # "[^-]" run can only end at a dash, so the split is unambiguous.
    _rule(
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
    _rule(r"""://[^\s:/@?\#"'<>]{0,256}:(?P<secret>[^\s/"'<>]{1,256})(?=@)"""),
    # name = value, before the token rules so "api_key=sk-..." keeps its name.
    *(_rule(name + _ASSIGN + _VALUE) for name in _NAME_PATTERNS),
    # Self-identifying tokens. The look-behind right after the literal keeps
    # "task-..." or "dask_..." out; ones that could be words ("sk-learn",
    # "xoxo") must contain a digit, as every real key does.
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-api03-):
    _rule(r"(?P<secret>sk-(?<![a-z0-9_-]sk-)(?=[a-z_-]{0,200}[0-9])[a-z0-9_-]{20,})"),
    # Stripe secret and restricted keys:
    _rule(r"(?P<secret>sk_(?<![a-z0-9_]sk_)(?:live|test)_[a-z0-9]{16,})"),
    _rule(r"(?P<secret>rk_(?<![a-z0-9_]rk_)(?:live|test)_[a-z0-9]{16,})"),
    # AWS access key ids, always 20 characters:
    _rule(r"(?P<secret>akia(?<![a-z0-9]akia)[a-z0-9]{16})(?![a-z0-9])"),
    _rule(r"(?P<secret>asia(?<![a-z0-9]asia)[a-z0-9]{16})(?![a-z0-9])"),
    # GitHub personal, OAuth, user-to-server, server-to-server, refresh, fine-grained:
    _rule(r"(?P<secret>gh(?<![a-z0-9_]gh)[pousr]_[a-z0-9]{20,})"),
    _rule(r"(?P<secret>github_pat_(?<![a-z0-9_]github_pat_)[a-z0-9_]{20,})"),
    # Slack bot, user, app-level, refresh and legacy tokens:
    _rule(r"(?P<secret>xox(?<![a-z0-9]xox)[abpeosr]-(?=[a-z-]{0,200}[0-9])[a-z0-9-]{10,})"),
    _rule(r"(?P<secret>xapp-(?<![a-z0-9]xapp-)(?=[a-z-]{0,200}[0-9])[a-z0-9-]{10,})"),
    # Google API keys:
    _rule(r"(?P<secret>aiza[0-9a-z_-]{35})"),
    # Hugging Face:
    _rule(r"(?P<secret>hf_(?<![a-z0-9_]hf_)[a-z]{30,})(?![a-z0-9_])"),
    # JSON Web Tokens, base64url('{"') header, payload and signature:
    _rule(r"(?P<secret>eyj[a-z0-9_-]{8,}\.eyj[a-z0-9_-]{8,}\.[a-z0-9_-]{8,})"),
    # "Bearer <token>"; the digit keeps "bearer authentication" prose out.
    _rule(
        r"bearer(?<![a-z0-9]bearer)[ \t]{1,8}"
        r"(?P<secret>(?=[a-z._~+/-]{0,400}[0-9])[a-z0-9._~+/-]{8,}=*)"
    ),
)

_SECRET_GROUPS = ("secret", "secret2", "secret3", "secret4")

# Upper- to lower-case for ASCII only, which never changes the length.
_ASCII_LOWER = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "abcdefghijklmnopqrstuvwxyz",
)


def _secret_span(match: re.Match[str]) -> tuple[str, int, int]:
    """The name and span of the group holding the secret (one per alternative)."""
    for group in _SECRET_GROUPS:
        if group in match.re.groupindex and match.start(group) >= 0:
            return group, match.start(group), match.end(group)
    raise AssertionError(f"pattern without a secret group matched: {match.re.pattern!r}")


def _apply(rule: _Rule, text: str, low: str) -> tuple[str, str]:
    """Replace the secrets ``rule`` finds in ``low`` in both ``text`` and ``low``.

    Building the lower-cased result alongside saves lower-casing the whole
    text again for the next rule.
    """
    pieces: list[str] = []
    low_pieces: list[str] = []
    cursor = 0
    for match in rule.pattern.finditer(low):
        group, start, end = _secret_span(match)
        marker = REDACTED
        if rule.block:
            # A key body becomes a line of its own, before the footer if any.
            marker = f"\n{REDACTED}\n" if group == "secret" else f"\n{REDACTED}"
        pieces += (text[cursor:start], marker)
        low_pieces += (low[cursor:start], marker.lower())
        cursor = end
    if not pieces:
        return text, low
    pieces.append(text[cursor:])
    low_pieces.append(low[cursor:])
    return "".join(pieces), "".join(low_pieces)


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret value replaced by ``[REDACTED]``.

    Names, URLs, hosts and header names around the secret are kept; see the
    module docstring for what is and is not recognised. Idempotent, and linear
    in the length of ``text``.
    """
    if not text:
        return text
    low = text.lower()
    if len(low) != len(text):
        # A few characters (such as "İ") grow when lower-cased, which would
        # misalign the spans; lower-case ASCII only (slower, same length).
        low = text.translate(_ASCII_LOWER)
    for rule in _RULES:
        text, low = _apply(rule, text, low)
    return text


# The text-bearing keys of a content part or thinking block: ``text`` parts,
# Anthropic ``thinking`` blocks and the string ``content`` of a nested tool result.
_PART_TEXT_KEYS = ("text", "thinking", "content")


def _redact_parts(parts: list[Any]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        if isinstance(part, dict):
            changed = {
                key: redact(part[key]) for key in _PART_TEXT_KEYS if isinstance(part.get(key), str)
            }
            if changed:
                part = {**part, **changed}
        out.append(part)
    return out


def _redact_function(function: Any) -> Any:
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        return {**function, "arguments": redact(function["arguments"])}
    return function


def _redact_call(call: Any) -> Any:
    if isinstance(call, dict) and "function" in call:
        return {**call, "function": _redact_function(call["function"])}
    return call


def redact_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return copies of OpenAI-format ``messages`` with secrets redacted.

    Redacts string content, the text of content parts, tool-call and
    legacy ``function_call`` arguments, ``reasoning_content`` and the text of
    ``thinking_blocks``. Every message
    in the result is a new dict and the input, nested parts and tool calls
    included, is never mutated. Items that are not dicts pass through
    unchanged: validation is the job of
    :func:`contextengine.messages.validate_messages`.
    """
    result: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, dict):
            result.append(message)
            continue
        new = dict(message)
        content = new.get("content")
        if isinstance(content, str):
            new["content"] = redact(content)
        elif isinstance(content, list):
            new["content"] = _redact_parts(content)
        if isinstance(new.get("reasoning_content"), str):
            new["reasoning_content"] = redact(new["reasoning_content"])
        if isinstance(new.get("thinking_blocks"), list):
            # The same reasoning as reasoning_content, kept for Anthropic round trips.
            new["thinking_blocks"] = _redact_parts(new["thinking_blocks"])
        if isinstance(new.get("tool_calls"), list):
            new["tool_calls"] = [_redact_call(call) for call in new["tool_calls"]]
        if "function_call" in new:
            new["function_call"] = _redact_function(new["function_call"])
        result.append(new)
    return result
