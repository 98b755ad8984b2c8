"""Token counting: exact counts, routing, message overhead, caches, offline loading."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextengine import tokens
from contextengine.errors import InvalidMessagesError, VocabularyError
from contextengine.tokens import (
    IMAGE_TOKENS_HIGH,
    IMAGE_TOKENS_LOW,
    cache_clear,
    cache_info,
    count_message_tokens,
    count_tokens,
    encoding_for_model,
    estimate_tokens_rough,
    get_encoding,
    message_tokens,
)

SHARED_DATA = Path(__file__).parents[2] / "shared" / "data"
ENCODINGS = ["o200k_base", "cl100k_base"]


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is absent: real-transcript tests need the shared data folder")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _fresh_caches() -> None:
    cache_clear()


# --- exact counts --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "ids"),
    [
        pytest.param("o200k_base", "hello world", [24912, 2375], id="o200k-hello"),
        pytest.param("cl100k_base", "hello world", [15339, 1917], id="cl100k-hello"),
    ],
)
def test_shipped_vocab_gives_tiktoken_ids(name: str, text: str, ids: list[int]) -> None:
    assert get_encoding(name).encode_ordinary(text) == ids


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param(None, 2, id="default"),
        pytest.param("gpt-4o", 2, id="gpt-4o"),
        pytest.param("gpt-4", 2, id="gpt-4"),
    ],
)
def test_count_tokens_hello_world(model: str | None, expected: int) -> None:
    assert count_tokens("hello world", model) == expected


def test_vocabularies_differ_where_they_should() -> None:
    text = "naïve café — 東京タワー, résumé 12345678"
    o200k = count_tokens(text, "gpt-4o")
    cl100k = count_tokens(text, "gpt-4")
    assert o200k == len(get_encoding("o200k_base").encode_ordinary(text))
    assert cl100k == len(get_encoding("cl100k_base").encode_ordinary(text))
    assert o200k != cl100k


def test_special_tokens_are_counted_as_text() -> None:
    text = "before <|endoftext|> after <|endofprompt|>"
    assert count_tokens(text) == len(get_encoding().encode(text, disallowed_special=()))
    assert count_tokens(text) > 4


def test_empty_text_is_zero() -> None:
    assert count_tokens("") == 0


# --- model routing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param(None, "o200k_base", id="none"),
        pytest.param("gpt-4o", "o200k_base", id="gpt-4o"),
        pytest.param("gpt-4o-mini-2024-07-18", "o200k_base", id="gpt-4o-mini"),
        pytest.param("gpt-4.1-nano", "o200k_base", id="gpt-4.1"),
        pytest.param("gpt-5", "o200k_base", id="gpt-5"),
        pytest.param("o1-preview", "o200k_base", id="o1"),
        pytest.param("o3-mini", "o200k_base", id="o3"),
        pytest.param("o4-mini", "o200k_base", id="o4"),
        pytest.param("openai/gpt-4o", "o200k_base", id="provider-prefix"),
        pytest.param("ft:gpt-4o-mini:acme::abc", "o200k_base", id="fine-tune-4o"),
        pytest.param("gpt-4", "cl100k_base", id="gpt-4"),
        pytest.param("gpt-4-turbo-2024-04-09", "cl100k_base", id="gpt-4-turbo"),
        pytest.param("GPT-3.5-Turbo", "cl100k_base", id="gpt-3.5-case"),
        pytest.param("text-embedding-3-small", "cl100k_base", id="embedding-3"),
        pytest.param("text-embedding-ada-002", "cl100k_base", id="ada-002"),
        pytest.param("claude-opus-4-6", "o200k_base", id="claude-approx"),
        pytest.param("meta-llama/Llama-3.1-70B", "o200k_base", id="llama-approx"),
        pytest.param("gemini-3-pro-preview", "o200k_base", id="gemini-approx"),
    ],
)
def test_encoding_for_model(model: str | None, expected: str) -> None:
    assert encoding_for_model(model) == expected


def test_unknown_encoding_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown encoding 'gpt2'"):
        get_encoding("gpt2")


def test_corrupt_vocabulary_fails_its_hash_check() -> None:
    forged = gzip.compress(b"aGVsbG8= 0\n")
    with pytest.raises(VocabularyError, match=r"sha256 \w+, expected 446a9538"):
        tokens._parse_vocab("o200k_base", forged)
    with pytest.raises(VocabularyError, match="not valid gzip"):
        tokens._parse_vocab("cl100k_base", b"plain bytes")


# --- long inputs ----------------------------------------------------------------------


def _stdlib_text(size: int) -> str:
    """Real text that is always present: the standard library's own sources."""
    parts: list[str] = []
    total = 0
    for path in sorted(Path(json.__file__).parents[1].rglob("*.py")):
        part = path.read_text(encoding="utf-8", errors="replace")
        parts.append(part)
        total += len(part)
        if total >= size:
            break
    return "".join(parts)[:size]


def test_ten_megabytes_of_real_text_is_exact() -> None:
    text = _stdlib_text(10_000_000)
    assert len(text) == 10_000_000
    chunks, exact = tokens._split(text)
    assert exact and len(chunks) > 100
    assert count_tokens(text) == len(get_encoding().encode_ordinary(text))


def test_ten_megabytes_without_boundaries_finishes_close() -> None:
    # 10 MB of one letter is a single pre-token: unchunked, BPE would take minutes.
    n = 10_000_000
    chunks, exact = tokens._split("a" * n)
    assert not exact
    assert max(len(c) for c in chunks) <= 2 * tokens._CHUNK_CHARS
    # 8 a's per token; each forced cut may cost at most a token.
    assert abs(count_tokens("a" * n) - n // 8) <= len(chunks)


# Characters that sit on or next to every rule of both pre-tokenizer patterns.
_AWKWARD = [
    *"aAzZsStTdD09'\"/\\\n\r \t.,:;{}[]()-_=+*<>!?#@$%|~`",
    *["é", "中", "\u0301", "\u00a0", "\x1c", "\u3000", "\u2028", "\u0085", "\u200b", "٣"],
    *["'s", "'ll", "ve", "\r\n", "\n\n", "  ", "x\n", "ABCdef"],
]


@pytest.mark.parametrize("name", ENCODINGS)
@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(st.sampled_from(_AWKWARD), min_size=2, max_size=60))
def test_every_boundary_cut_is_a_pretokenizer_boundary(name: str, pieces: list[str]) -> None:
    enc = get_encoding(name)
    text = "".join(pieces)
    whole = enc.encode_ordinary(text)
    pos = 0
    while (m := tokens._BOUNDARY.search(text, pos)) is not None:
        cut = m.start() + 1
        assert enc.encode_ordinary(text[:cut]) + enc.encode_ordinary(text[cut:]) == whole
        pos = cut


def test_python_whitespace_covers_unicode_white_space() -> None:
    # The "\n[^\s/]" rule is safe only if Python's \s includes every White_Space char.
    white_space = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
    white_space += "\u2028\u2029\u202f\u205f\u3000"
    assert all(ch.isspace() for ch in white_space)


# --- messages ---------------------------------------------------------------------------

COOKBOOK = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates "
        "corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on "
        "opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the "
        "client deliverable.",
    },
]


@pytest.mark.parametrize(
    ("model", "expected"),
    [pytest.param("gpt-4o", 124, id="gpt-4o"), pytest.param("gpt-4", 129, id="gpt-4")],
)
def test_openai_cookbook_example_matches_the_api(model: str, expected: int) -> None:
    # The API's prompt_tokens for this list, as published in the openai-cookbook.
    assert count_message_tokens(COOKBOOK, model) == expected


def test_message_overhead_by_hand() -> None:
    # "user"=1, "hello world"=2, "bob"=1: 3 framing + 1 + 2, then + 1 + 1 for the name.
    assert message_tokens({"role": "user", "content": "hello world"}) == 6
    assert message_tokens({"role": "user", "content": "hello world", "name": "bob"}) == 8
    messages = [{"role": "user", "content": "hello world"}] * 2
    assert count_message_tokens(messages) == 6 + 6 + 3
    assert count_message_tokens([]) == 3


def test_content_parts_count_their_text() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "hello world"}]}
    assert message_tokens(parts) == message_tokens({"role": "user", "content": "hello world"})


def test_images_cost_a_flat_amount_whatever_the_url_length() -> None:
    def image(url: str, detail: str | None = None) -> dict[str, Any]:
        image_url: dict[str, Any] = {"url": url}
        if detail:
            image_url["detail"] = detail
        return {"role": "user", "content": [{"type": "image_url", "image_url": image_url}]}

    huge = "data:image/png;base64," + "iVBORw0KGgo" * 100_000  # about 1 MB
    tiny = "https://example.com/cat.png"
    assert message_tokens(image(huge)) == message_tokens(image(tiny)) == 4 + IMAGE_TOKENS_HIGH
    assert message_tokens(image(huge, "high")) == 4 + IMAGE_TOKENS_HIGH
    assert message_tokens(image(huge, "low")) == 4 + IMAGE_TOKENS_LOW


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_call_names_and_arguments_are_counted() -> None:
    args = '{"city": "Paris", "unit": "celsius"}'
    msg = {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", args)]}
    expected = (
        3
        + count_tokens("assistant")
        + count_tokens("get_weather")
        + count_tokens(args)
        + tokens.TOOL_CALL_OVERHEAD
    )
    assert message_tokens(msg) == expected
    longer = {**msg, "tool_calls": [_call("get_weather", args + " " * 40 + "x")]}
    assert message_tokens(longer) > message_tokens(msg)


def test_tool_call_id_is_not_counted() -> None:
    short = {"role": "tool", "tool_call_id": "a", "content": "22 degrees"}
    long = {**short, "tool_call_id": "call_" + "x" * 200}
    assert message_tokens(short) == message_tokens(long) == 3 + 1 + count_tokens("22 degrees")


def test_dict_arguments_count_as_their_json() -> None:
    as_dict = {"role": "assistant", "tool_calls": [_call("f", "")]}
    as_dict["tool_calls"][0]["function"]["arguments"] = {"a": 1}
    as_str = {"role": "assistant", "tool_calls": [_call("f", '{"a": 1}')]}
    assert message_tokens(as_dict) == message_tokens(as_str)


@pytest.mark.parametrize(
    "msg",
    [
        pytest.param({"role": "user", "content": "hi"}, id="plain"),
        pytest.param({"role": "assistant", "content": None}, id="null-content"),
        pytest.param({"role": "user", "content": ""}, id="empty-content"),
        pytest.param({"role": "user", "content": "hi", "name": "bob"}, id="named"),
        pytest.param({"role": "tool", "content": "ok", "tool_call_id": "c1"}, id="tool"),
    ],
)
def test_fast_path_builds_the_general_key(msg: dict[str, Any]) -> None:
    # A read-only mapping is not a dict, so it takes the general path.
    assert tokens._fingerprint(msg) == tokens._fingerprint(MappingProxyType(msg))


def test_invalid_message_names_its_index() -> None:
    with pytest.raises(InvalidMessagesError, match=r"messages\[1\]: content must be"):
        count_message_tokens([{"role": "user", "content": "ok"}, {"role": "user", "content": 5}])
    with pytest.raises(InvalidMessagesError, match=r"messages\[0\]: a message must be"):
        count_message_tokens(["not a message"])  # type: ignore[list-item]  # wrong on purpose


# --- caches -----------------------------------------------------------------------------


def _conversation(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 else "assistant", "content": f"turn {i}: " + "word " * (i % 50)}
        for i in range(n)
    ]


def test_recount_is_served_from_cache() -> None:
    messages = _conversation(200)
    first = count_message_tokens(messages)
    calls = cache_info().encoder_calls
    assert calls > 0
    assert count_message_tokens(messages) == first
    info = cache_info()
    assert info.encoder_calls == calls
    assert info.message_hits == 200


def test_appending_a_message_encodes_only_the_new_one() -> None:
    messages = _conversation(500)
    count_message_tokens(messages)
    messages.append({"role": "user", "content": "a brand new question about the weather"})
    before = cache_info().encoder_calls
    count_message_tokens(messages)
    assert cache_info().encoder_calls - before == 2  # its role and its content


def test_in_place_mutation_is_never_served_stale() -> None:
    msg = {"role": "user", "content": "hello world"}
    assert message_tokens(msg) == 6
    msg["content"] = "hello brave new world"
    assert message_tokens(msg) == 3 + 1 + count_tokens("hello brave new world")


def test_long_texts_are_cached() -> None:
    text = "lorem ipsum dolor sit amet " * 10
    count_tokens(text)
    before = cache_info()
    count_tokens(text)
    after = cache_info()
    assert after.encoder_calls == before.encoder_calls
    assert after.text_hits == before.text_hits + 1


def test_text_cache_is_bounded() -> None:
    cache = tokens._LRU(max_entries=3, max_weight=100)
    for i in range(5):
        cache.put(i, i, 10)
    assert len(cache) == 3 and cache.get(0) is None and cache.get(4) == 4
    cache.put("heavy", 1, 26)  # over a quarter of the weight budget: not kept
    assert cache.get("heavy") is None


# --- rough estimates ----------------------------------------------------------------------


def test_estimate_tokens_rough_on_text() -> None:
    assert estimate_tokens_rough("") == 0
    assert estimate_tokens_rough("abcd" * 10) == 10
    assert estimate_tokens_rough("abcde") == 2


def test_estimate_tokens_rough_on_messages() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:," + "A" * 1_000_000}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "x" * 8}, image]},
        {"role": "assistant", "content": None, "tool_calls": [_call("get", '{"q": 1}')]},
    ]
    # 3 priming; user: 4 + 2 + 765; assistant: 4 + ceil(11 / 4) + 3.
    assert estimate_tokens_rough(messages) == 3 + (4 + 2 + IMAGE_TOKENS_HIGH) + (4 + 3 + 3)


# --- offline --------------------------------------------------------------------------------

_OFFLINE_SCRIPT = textwrap.dedent(
    """
    import json, socket

    class NoNetwork(socket.socket):
        def __init__(self, *args, **kwargs):
            raise OSError("network is disabled in this test")

    def refuse(*args, **kwargs):
        raise OSError("network is disabled in this test")

    socket.socket = NoNetwork
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    from contextengine import tokens
    print(json.dumps({
        "o200k": tokens.get_encoding("o200k_base").encode_ordinary("hello world"),
        "cl100k": tokens.get_encoding("cl100k_base").encode_ordinary("hello world"),
        "count": tokens.count_tokens("hello world", "gpt-4"),
        "messages": tokens.count_message_tokens([{"role": "user", "content": "hello world"}]),
    }))
    """
)


def test_counting_works_without_network_or_tiktoken_cache(tmp_path: Path) -> None:
    cache_dir = tmp_path / "tiktoken-cache"
    cache_dir.mkdir()
    src = Path(tokens.__file__).parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), *sys.path]),
        "TIKTOKEN_CACHE_DIR": str(cache_dir),
        "DATA_GYM_CACHE_DIR": str(cache_dir),
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"o200k": [24912, 2375], "cl100k": [15339, 1917], "count": 2, "messages": 9}
    assert list(cache_dir.iterdir()) == []


# --- real transcripts (../shared/data) --------------------------------------------------------


@pytest.mark.shared_data
def test_tau_bench_runs_count_as_the_sum_of_their_messages(shared_data: Path) -> None:
    path = shared_data / "tau-bench" / "historical_trajectories" / "gpt-4o-airline.json"
    runs = json.loads(path.read_text(encoding="utf-8"))
    assert len(runs) == 200
    for run in runs:
        traj = run["traj"]
        total = count_message_tokens(traj, "gpt-4o")
        assert total == 3 + sum(message_tokens(m, "gpt-4o") for m in traj)
        # Every tool call's arguments are in the count.
        args = sum(
            count_tokens(c["function"]["arguments"])
            for m in traj
            for c in m.get("tool_calls") or ()
        )
        assert total > args
        rough = estimate_tokens_rough(traj)
        assert 0.5 < total / rough < 2.0


@pytest.mark.shared_data
@pytest.mark.parametrize(("name", "limit"), [("o200k_base", None), ("cl100k_base", 1)])
def test_spotter_transcripts_count_exactly(shared_data: Path, name: str, limit: int | None) -> None:
    # Claude Code JSONL; cl100k on the smallest file only, to keep the suite quick.
    files = sorted(
        (shared_data / "spotter" / "transcripts").glob("*.jsonl"), key=lambda p: p.stat().st_size
    )[:limit]
    assert files
    enc = get_encoding(name)
    model = "gpt-4o" if name == "o200k_base" else "gpt-4"
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert tokens._split(text)[1]  # real text always has provable boundaries
        n = count_tokens(text, model)
        assert n == len(enc.encode_ordinary(text))
        assert 1.5 < len(text) / n < 6  # JSON-heavy text: chars per token near 3


# ---------------------------------------------------------------------- reasoning fields

_REASONING = "The user wants the sum, so first I check the inputs carefully. " * 300


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"reasoning_content": _REASONING}, id="reasoning_content"),
        pytest.param({"reasoning": _REASONING}, id="reasoning"),
        pytest.param(
            {"reasoning_details": [{"type": "reasoning.text", "text": _REASONING}]},
            id="reasoning_details",
        ),
        pytest.param(
            {"thinking_blocks": [{"type": "thinking", "thinking": _REASONING}]},
            id="thinking_blocks",
        ),
    ],
)
def test_reasoning_a_host_sends_back_counts_in_exact_and_rough_estimates(
    fields: dict[str, Any],
) -> None:
    bare = {"role": "assistant", "content": "42"}
    reasoned = {**bare, **fields}
    reasoning_tokens = count_tokens(_REASONING)
    assert reasoning_tokens > 2_000
    assert message_tokens(reasoned) - message_tokens(bare) == reasoning_tokens
    rough = estimate_tokens_rough([reasoned]) - estimate_tokens_rough([bare])
    assert rough >= len(_REASONING) // 4
