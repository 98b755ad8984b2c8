"""Offline token counting: exact BPE counts, message overhead, rough estimates, caches.

Exactness
    :func:`count_tokens` returns exactly ``len(encoding.encode_ordinary(text))`` for
    OpenAI's ``o200k_base`` and ``cl100k_base`` vocabularies: special tokens such as
    ``<|endoftext|>`` are counted as the plain text they are (``disallowed_special=()``
    semantics), so a transcript that quotes them neither raises nor shrinks.

    tiktoken's BPE merge is quadratic in the length of one pre-token, so 10 MB without a
    space would take minutes. Texts longer than ``2 * _CHUNK_CHARS`` are therefore cut
    into chunks at positions that are *provably* pre-tokenizer boundaries of both
    patterns, and the chunk counts are summed. A cut at ``i`` is safe when no match of
    the pattern can contain both ``text[i-1]`` and ``text[i]`` and no lookahead or ``$``
    before ``i`` can see the cut:

    * ``"\\n"`` then any character that is not whitespace and not ``/``: a pre-token
      holding a newline continues only with ``\\r``, ``\\n``, ``/`` (o200k's punctuation
      suffix) or whitespace, and letter runs never start with a newline prefix;
    * an ASCII letter then an ASCII character that is neither a letter nor ``'``:
      letter pre-tokens hold letters and marks, plus a contraction that starts with
      ``'``;
    * an ASCII digit then an ASCII non-digit: digit runs hold digits only.

    Whitespace runs ending in the newline are matched identically with or without the
    cut (``\\s*[\\r\\n]+`` and cl100k's ``\\s++$`` / ``\\s*[\\r\\n]`` all end at the
    newline). The claim is checked by tests that compare chunked and unchunked counts on
    real transcripts and on random strings made of the awkward characters.

    Inputs with no such boundary for ``2 * _CHUNK_CHARS`` characters (10 MB of one
    letter, a run of ``=`` or of CJK text without ASCII) are cut at a fixed size: that
    count is approximate (each forced cut can move the total by a token or two) but the
    time stays linear. Everything else is exact.

Offline guarantee
    The vocabularies ship in ``contextengine/_vocab`` (gzipped tiktoken files, see the
    README there). :func:`get_encoding` builds ``tiktoken.Encoding`` from them and checks
    their SHA-256 against tiktoken's own published hashes; it never calls
    ``tiktoken.get_encoding``, which downloads and writes a cache directory.

Model routing
    :func:`encoding_for_model` maps OpenAI model names to their vocabulary. Other
    families (Claude, Llama, Gemini, Mistral...) have private or different tokenizers;
    they get ``o200k_base``, which is an approximation (usually within 10-20%), not
    their real count.

Caching, and why
    Agent loops recount the whole conversation on every turn, so counting must cost
    time proportional to what is new. Two bounded LRU caches (entries and total
    characters held) make that so:

    * a text cache keyed by ``(encoding, text)`` for texts over 64 characters. CPython
      caches a ``str``'s hash on the object, so looking up the same string again is
      O(1) whatever its length; texts over 1M characters are keyed by a BLAKE2 digest
      instead, so the cache never keeps a huge string alive;
    * a message cache keyed by ``(encoding, fingerprint)`` where the fingerprint is the
      tuple of strings that are counted plus the flat extras (images, per-call
      overhead). Building it touches a handful of dict keys and reuses the message's
      own string objects: no ``json.dumps`` of the history.

    Both caches are keyed by content, never by ``id()``, so mutating a message in place
    can never return a stale count. :func:`cache_info` reports hits, misses and how many
    texts went to the encoder; :func:`cache_clear` empties both caches.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import tiktoken

from contextengine.errors import InvalidMessagesError, VocabularyError

__all__ = [
    "IMAGE_TOKENS_HIGH",
    "IMAGE_TOKENS_LOW",
    "REASONING_FIELDS",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TOOL_CALL_OVERHEAD",
    "CacheInfo",
    "cache_clear",
    "cache_info",
    "count_message_tokens",
    "count_tokens",
    "encoding_for_model",
    "estimate_tokens_rough",
    "get_encoding",
    "message_tokens",
]

# OpenAI's counting recipe (openai-cookbook, "How to count tokens with tiktoken"):
# every message costs 3 tokens of framing, a "name" one more, and the reply is primed
# with 3 more (<|start|>assistant<|message|>).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3
# OpenAI does not publish the framing of a tool call; 3 tokens per call (like a message)
# plus the counted name and arguments is within a few tokens of the API's usage numbers.
TOOL_CALL_OVERHEAD = 3
#: Message fields that carry a model's reasoning, which hosts send back to the
#: providers that ask for it (DeepSeek, OpenRouter, Anthropic via a converter):
#: they take room in the window like any text. Strings, or (``reasoning_details``,
#: ``thinking_blocks``) lists of parts whose ``text``, ``summary`` or ``thinking`` count.
REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks")
_REASONING_PART_FIELDS = ("text", "summary", "thinking")
# Flat image cost: 765 is a 1024x1024 image at detail "high"/"auto" (85 base + 4 tiles
# x 170), 85 is detail "low". Never derived from the URL: a base64 data URL is 1 MB of
# characters that the model never sees as text.
IMAGE_TOKENS_HIGH = 765
IMAGE_TOKENS_LOW = 85

_O200K = "o200k_base"
_CL100K = "cl100k_base"
_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class _VocabSpec:
    filename: str
    sha256: str
    pat_str: str
    special_tokens: Mapping[str, int]


# pat_str and special tokens copied from tiktoken_ext/openai_public.py (tiktoken 0.14);
# the hashes are the ``expected_hash`` tiktoken checks on the same files.
_VOCABS: dict[str, _VocabSpec] = {
    _O200K: _VocabSpec(
        filename="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    _CL100K: _VocabSpec(
        filename="cl100k_base.tiktoken.gz",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        # Verbatim from tiktoken so it can be diffed against it, hence the long line.
        pat_str=(
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501
        ),
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}


# ---------------------------------------------------------------------------
# Loading the vocabularies


def _parse_vocab(name: str, compressed: bytes) -> dict[bytes, int]:
    """Decompress, verify and parse one shipped ``.tiktoken.gz`` file."""
    spec = _VOCABS[name]
    try:
        raw = gzip.decompress(compressed)
    except (OSError, EOFError) as exc:
        raise VocabularyError(f"vocabulary {spec.filename} is not valid gzip: {exc}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != spec.sha256:
        raise VocabularyError(
            f"vocabulary {spec.filename} has sha256 {digest}, expected {spec.sha256}; "
            "the installed package is corrupt, reinstall contextengine"
        )
    # Same parsing as tiktoken.load.load_tiktoken_bpe: "base64token rank" per line.
    return {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }


_load_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


def get_encoding(name: str = _O200K) -> tiktoken.Encoding:
    """Return the ``tiktoken.Encoding`` *name* built from the shipped files.

    Loaded once per process (about half a second) and cached; thread-safe. Only
    ``"o200k_base"`` and ``"cl100k_base"`` ship. Raises ``ValueError`` for other names
    and :class:`VocabularyError` when the shipped file fails its hash check.
    """
    enc = _encodings.get(name)
    if enc is not None:
        return enc
    if name not in _VOCABS:
        raise ValueError(f"unknown encoding {name!r}; shipped: {', '.join(sorted(_VOCABS))}")
    with _load_lock:
        enc = _encodings.get(name)
        if enc is None:
            spec = _VOCABS[name]
            resource = resources.files("contextengine") / "_vocab" / spec.filename
            try:
                compressed = resource.read_bytes()
            except OSError as exc:
                raise VocabularyError(f"vocabulary {spec.filename} is missing: {exc}") from exc
            enc = tiktoken.Encoding(
                name=name,
                pat_str=spec.pat_str,
                mergeable_ranks=_parse_vocab(name, compressed),
                special_tokens=dict(spec.special_tokens),
            )
            _encodings[name] = enc
    return enc


_O200K_PREFIXES = ("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")
_CL100K_PREFIXES = (
    "gpt-4",
    "gpt-3.5",
    "gpt-35",
    "text-embedding-3",
    "text-embedding-ada-002",
    "davinci-002",
    "babbage-002",
)


@lru_cache(maxsize=512)
def encoding_for_model(model: str | None) -> str:
    """Name of the vocabulary to count *model*'s tokens with.

    ``o200k_base`` for ``None`` and the gpt-4o / gpt-4.1 / gpt-4.5 / gpt-5 / o1 / o3 /
    o4 families; ``cl100k_base`` for gpt-4 (not 4o/4.1), gpt-3.5 and the
    text-embedding-3 / ada-002 embeddings. Provider prefixes (``openai/gpt-4o``) and
    fine-tune names (``ft:gpt-4o-mini:org::id``) are understood. Any other model
    (Claude, Llama, Gemini...) gets ``o200k_base``: an approximation with OpenAI's
    vocabulary, since their own tokenizers are not public or not shipped.
    """
    if not model:
        return _O200K
    name = model.strip().lower().rsplit("/", 1)[-1]
    name = name.removeprefix("ft:")
    # o200k is checked first because "gpt-4o" and "gpt-4.1" also start with "gpt-4".
    if name.startswith(_O200K_PREFIXES):
        return _O200K
    if name.startswith(_CL100K_PREFIXES):
        return _CL100K
    return _O200K


# ---------------------------------------------------------------------------
# Caches


class _LRU:
    """A thread-safe LRU map bounded by entry count and by total weight (characters)."""

    def __init__(self, max_entries: int, max_weight: int) -> None:
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._data: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> int | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, key: Hashable, value: int, weight: int) -> None:
        if weight > self.max_weight // 4:
            return  # one entry must not flush the cache
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            self._data[key] = (value, weight)
            self._weight += weight
            while len(self._data) > self.max_entries or self._weight > self.max_weight:
                _, (_, dropped) = self._data.popitem(last=False)
                self._weight -= dropped

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._weight = 0
            self.hits = 0
            self.misses = 0

    def __len__(self) -> int:
        return len(self._data)


_TEXT_CACHE_MIN_CHARS = 64
_DIGEST_KEY_MIN_CHARS = 1_000_000
_text_cache = _LRU(max_entries=50_000, max_weight=64_000_000)
_message_cache = _LRU(max_entries=50_000, max_weight=64_000_000)
_counter_lock = threading.Lock()
_encoder_calls = 0


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """Counters of the token caches since the last :func:`cache_clear`.

    ``encoder_calls`` is how many strings (chunks of long texts counted separately)
    were handed to the BPE encoder: the real work. A recount that is fully cached
    leaves it unchanged.
    """

    text_hits: int
    text_misses: int
    text_entries: int
    message_hits: int
    message_misses: int
    message_entries: int
    encoder_calls: int


def cache_info() -> CacheInfo:
    """Snapshot of the cache counters (see :class:`CacheInfo`)."""
    return CacheInfo(
        text_hits=_text_cache.hits,
        text_misses=_text_cache.misses,
        text_entries=len(_text_cache),
        message_hits=_message_cache.hits,
        message_misses=_message_cache.misses,
        message_entries=len(_message_cache),
        encoder_calls=_encoder_calls,
    )


def cache_clear() -> None:
    """Empty the text and message caches and reset the counters."""
    global _encoder_calls
    _text_cache.clear()
    _message_cache.clear()
    with _counter_lock:
        _encoder_calls = 0


# ---------------------------------------------------------------------------
# Counting text

# Target chunk size for long texts. A single pre-token of this size costs ~2 ms; the
# window searched for a boundary is [_CHUNK_CHARS, 2 * _CHUNK_CHARS) past the start.
_CHUNK_CHARS = 8192
# Positions m.start() + 1 of these matches are pre-tokenizer boundaries of both
# o200k_base and cl100k_base (the argument is in the module docstring). Python's \s is
# a superset of Unicode White_Space (it adds \x1c-\x1f), so [^\s/] only errs safe.
_BOUNDARY = re.compile(
    r"\n[^\s/]"
    r"|[A-Za-z][\x00-\x26\x28-\x40\x5b-\x60\x7b-\x7f]"
    r"|[0-9][\x00-\x2f\x3a-\x7f]"
)


def _split(text: str, target: int = _CHUNK_CHARS) -> tuple[list[str], bool]:
    """Cut *text* into chunks of about *target* characters; return them and exactness.

    The second item is False when some cut had to be made at a fixed size because no
    provable boundary existed in the window (the count may then be off by a token or
    two per forced cut).
    """
    n = len(text)
    if n <= 2 * target:
        return [text], True
    chunks: list[str] = []
    exact = True
    start = 0
    while n - start > 2 * target:
        m = _BOUNDARY.search(text, start + target, start + 2 * target)
        if m is None:
            m = _BOUNDARY.search(text, start + target // 4, start + target)
        if m is not None:
            cut = m.start() + 1
        else:
            cut = start + target
            exact = False
        chunks.append(text[start:cut])
        start = cut
    chunks.append(text[start:])
    return chunks, exact


def _encode_count(enc: tiktoken.Encoding, text: str) -> int:
    global _encoder_calls
    chunks, _ = _split(text)
    with _counter_lock:
        _encoder_calls += len(chunks)
    if len(chunks) == 1:
        return len(enc.encode_ordinary(text))
    return sum(len(enc.encode_ordinary(chunk)) for chunk in chunks)


def _count(enc: tiktoken.Encoding, text: str) -> int:
    if not text:
        return 0
    if len(text) <= _TEXT_CACHE_MIN_CHARS:
        return _encode_count(enc, text)
    key: Hashable
    if len(text) >= _DIGEST_KEY_MIN_CHARS:
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
        key = (enc.name, len(text), digest.digest())
        weight = _TEXT_CACHE_MIN_CHARS
    else:
        key = (enc.name, text)
        weight = len(text)
    cached = _text_cache.get(key)
    if cached is not None:
        return cached
    value = _encode_count(enc, text)
    _text_cache.put(key, value, weight)
    return value


def count_tokens(text: str, model: str | None = None) -> int:
    """Exact number of tokens of *text* for *model* (see :func:`encoding_for_model`).

    Special-token strings are counted as ordinary text. Offline, cached for texts over
    64 characters, linear-time on any input; exact except on inputs with no
    pre-tokenizer boundary for 16k characters (see the module docstring).
    """
    return _count(get_encoding(encoding_for_model(model)), text)


# ---------------------------------------------------------------------------
# Counting messages


def _image_cost(part: Mapping[str, Any]) -> int:
    image = part.get("image_url")
    detail = image.get("detail") if isinstance(image, Mapping) else part.get("detail")
    return IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS_HIGH


def _arguments_text(arguments: Any) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    # Some producers hand arguments as a dict; the model saw them as JSON.
    return json.dumps(arguments, ensure_ascii=False)


def _part_pieces(part: Any, texts: list[str]) -> int:
    """Append the counted strings of one content part to *texts*; return flat extras."""
    if isinstance(part, str):
        texts.append(part)
        return 0
    if not isinstance(part, Mapping):
        raise InvalidMessagesError(f"content part of type {type(part).__name__} is not an object")
    kind = part.get("type")
    if kind in ("image_url", "input_image", "image"):
        return _image_cost(part)
    if kind == "tool_use":  # Anthropic block, in case a converter left one behind
        texts.append(str(part.get("name", "")))
        texts.append(_arguments_text(part.get("input")))
        return TOOL_CALL_OVERHEAD
    if kind == "tool_result":
        return _content_pieces(part.get("content"), texts)
    for field in ("text", "refusal", "thinking"):
        value = part.get(field)
        if isinstance(value, str):
            texts.append(value)
    # Other parts (audio, files) have no text to count and no published flat cost.
    return 0


def _content_pieces(content: Any, texts: list[str]) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        texts.append(content)
        return 0
    if isinstance(content, list | tuple):
        return sum(_part_pieces(part, texts) for part in content)
    raise InvalidMessagesError(
        f"content must be a string, a list of parts or null, not {type(content).__name__}"
    )


def _call_pieces(call: Any, texts: list[str]) -> None:
    if not isinstance(call, Mapping):
        raise InvalidMessagesError("a tool call must be an object")
    function = call.get("function") or call.get("custom")
    if isinstance(function, Mapping):
        texts.append(str(function.get("name") or ""))
        texts.append(_arguments_text(function.get("arguments", function.get("input"))))


def _reasoning_texts(value: Any) -> list[str]:
    """The strings of one reasoning field: itself, or the text fields of its parts."""
    if isinstance(value, str):
        return [value] if value else []
    texts: list[str] = []
    if isinstance(value, list | tuple):
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                for field in _REASONING_PART_FIELDS:
                    text = part.get(field)
                    if isinstance(text, str) and text:
                        texts.append(text)
    return texts


def _fingerprint(msg: Mapping[str, Any]) -> tuple[tuple[str, ...], int]:
    """The strings that are counted in *msg*, and its flat (non-text) tokens.

    Together they determine the count, so they are the cache key. ``tool_call_id`` and
    other bookkeeping keys are deliberately absent: they are not counted.
    """
    # Fast path for the common plain message; it must build the same key as the general
    # path below. isinstance() against the Mapping ABC alone costs a microsecond, which
    # matters when a 10,000-message history is recounted every turn.
    if (
        type(msg) is dict
        and "refusal" not in msg
        and "function_call" not in msg
        and "reasoning_content" not in msg
        and "reasoning" not in msg
        and "reasoning_details" not in msg
        and "thinking_blocks" not in msg
    ):
        role = msg.get("role")
        content = msg.get("content")
        name = msg.get("name")
        if (
            type(role) is str
            and role
            and (content is None or type(content) is str)
            and (name is None or type(name) is str)
            and not msg.get("tool_calls")
        ):
            fast = (role,) if content is None else (role, content)
            if name:
                return (*fast, name), TOKENS_PER_MESSAGE + TOKENS_PER_NAME
            return fast, TOKENS_PER_MESSAGE
    if not isinstance(msg, Mapping):
        raise InvalidMessagesError(f"a message must be an object, not {type(msg).__name__}")
    texts: list[str] = [str(msg.get("role") or "")]
    extra = TOKENS_PER_MESSAGE + _content_pieces(msg.get("content"), texts)
    refusal = msg.get("refusal")
    if isinstance(refusal, str):
        texts.append(refusal)
    name = msg.get("name")
    if name:
        texts.append(str(name))
        extra += TOKENS_PER_NAME
    calls = msg.get("tool_calls")
    if calls:
        for call in calls:
            _call_pieces(call, texts)
        extra += TOOL_CALL_OVERHEAD * len(calls)
    legacy = msg.get("function_call")
    if isinstance(legacy, Mapping):
        _call_pieces({"function": legacy}, texts)
        extra += TOOL_CALL_OVERHEAD
    for field in REASONING_FIELDS:
        texts.extend(_reasoning_texts(msg.get(field)))
    return tuple(texts), extra


def _message_tokens(enc: tiktoken.Encoding, msg: Mapping[str, Any]) -> int:
    texts, extra = _fingerprint(msg)
    key = (enc.name, texts, extra)
    cached = _message_cache.get(key)
    if cached is not None:
        return cached
    value = extra + sum(_count(enc, text) for text in texts)
    weight = sum(len(text) for text in texts)
    # A text too large for the text cache's key would be kept alive here; skip it.
    if all(len(text) < _DIGEST_KEY_MIN_CHARS for text in texts):
        _message_cache.put(key, value, weight)
    return value


def message_tokens(msg: Mapping[str, Any], model: str | None = None) -> int:
    """Tokens one OpenAI chat message costs in a prompt, without the reply priming.

    ``3`` framing tokens, plus the role, the content (a string, or the text of its
    parts; images at a flat :data:`IMAGE_TOKENS_HIGH` or, for detail ``"low"``,
    :data:`IMAGE_TOKENS_LOW`), ``name`` and one more token when present, and for each
    tool call its function name and arguments plus :data:`TOOL_CALL_OVERHEAD`, and the
    text of the reasoning fields (:data:`REASONING_FIELDS`) a host sends back.
    ``tool_call_id`` is not counted. Cached by content.
    """
    return _message_tokens(get_encoding(encoding_for_model(model)), msg)


def count_message_tokens(messages: Sequence[Mapping[str, Any]], model: str | None = None) -> int:
    """Prompt tokens of *messages* as OpenAI counts them.

    The sum of :func:`message_tokens` plus :data:`REPLY_PRIMING_TOKENS` (3) for the
    primed assistant reply. Recounting a list whose messages were counted before costs
    one cache lookup per message and no encoding. Raises
    :class:`~contextengine.errors.InvalidMessagesError` naming the bad message.
    """
    enc = get_encoding(encoding_for_model(model))
    total = REPLY_PRIMING_TOKENS
    for index, msg in enumerate(messages):
        try:
            total += _message_tokens(enc, msg)
        except InvalidMessagesError as exc:
            if exc.index is not None:
                raise
            raise InvalidMessagesError(exc.problem, index=index) from None
    return total


# ---------------------------------------------------------------------------
# Rough estimates

_ROUGH_CHARS_PER_TOKEN = 4
_ROUGH_PER_MESSAGE = TOKENS_PER_MESSAGE + 1  # framing plus a one-token role


def _rough_content(content: Any) -> tuple[int, int]:
    """Characters of text and flat tokens in a content value."""
    if isinstance(content, str):
        return len(content), 0
    chars = flat = 0
    if isinstance(content, list | tuple):
        for part in content:
            if isinstance(part, str):
                chars += len(part)
            elif isinstance(part, Mapping):
                kind = part.get("type")
                if kind in ("image_url", "input_image", "image"):
                    flat += _image_cost(part)
                elif kind == "tool_result":
                    c, f = _rough_content(part.get("content"))
                    chars, flat = chars + c, flat + f
                else:
                    for field in ("text", "refusal", "thinking"):
                        value = part.get(field)
                        if isinstance(value, str):
                            chars += len(value)
                    if kind == "tool_use":
                        chars += len(_arguments_text(part.get("input")))
                        flat += TOOL_CALL_OVERHEAD
    return chars, flat


def estimate_tokens_rough(messages_or_text: str | Sequence[Mapping[str, Any]]) -> int:
    """Fast estimate: characters / 4, rounded up.

    For a message list: per message the characters of its content (text parts), name,
    and tool-call names and arguments, divided by 4, plus 4 tokens of framing and role
    and :data:`TOOL_CALL_OVERHEAD` per call; images at their flat cost; plus the 3
    priming tokens. Only ``len()`` of strings is taken, so it is cheap to repeat on a
    long history. Use :func:`count_message_tokens` when the number matters.
    """
    if isinstance(messages_or_text, str):
        return math.ceil(len(messages_or_text) / _ROUGH_CHARS_PER_TOKEN)
    total = REPLY_PRIMING_TOKENS
    for msg in messages_or_text:
        content = msg.get("content")
        if type(content) is str:  # the common case, without the generic walk
            chars, flat = len(content), 0
        else:
            chars, flat = _rough_content(content)
        name = msg.get("name")
        if name:
            chars += len(str(name))
        calls = msg.get("tool_calls") or ()
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                chars += len(str(function.get("name") or ""))
                chars += len(_arguments_text(function.get("arguments")))
        flat += TOOL_CALL_OVERHEAD * len(calls)
        for field in REASONING_FIELDS:
            value = msg.get(field)
            if value:
                chars += sum(len(text) for text in _reasoning_texts(value))
        total += _ROUGH_PER_MESSAGE + flat + math.ceil(chars / _ROUGH_CHARS_PER_TOKEN)
    return total
