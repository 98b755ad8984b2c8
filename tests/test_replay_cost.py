"""The prompt-cache price model, on examples computed by hand.

Prices are per million tokens, so the examples use 1,000,000-token prompts
or prices of 1,000,000 to keep the arithmetic visible.
"""

from __future__ import annotations

import pytest

from contextengine.replay.cost import (
    PRESETS,
    CostTotals,
    PrefixCache,
    Price,
    cached_prefix_tokens,
    message_fingerprint,
    parse_price,
    request_cost,
)

OPENAI_LIKE = Price(input=2.0, cached=0.5, output=8.0)
ANTHROPIC_LIKE = Price(input=3.0, cached=0.3, cache_write=3.75, output=15.0)


@pytest.mark.parametrize(
    ("price", "prompt", "cached", "completion", "expected"),
    [
        # 600k uncached at 2.0 = 1.2; 400k cached at 0.5 = 0.2; 100k out at 8.0 = 0.8
        pytest.param(OPENAI_LIKE, 1_000_000, 400_000, 100_000, 2.2, id="openai-partial-hit"),
        pytest.param(OPENAI_LIKE, 1_000_000, 0, 0, 2.0, id="openai-cold"),
        pytest.param(OPENAI_LIKE, 1_000_000, 1_000_000, 0, 0.5, id="openai-all-cached"),
        # 600k written at 3.75 = 2.25; 400k read at 0.3 = 0.12; 100k out at 15 = 1.5
        pytest.param(ANTHROPIC_LIKE, 1_000_000, 400_000, 100_000, 3.87, id="anthropic-write"),
        # a cached count above the prompt (a truncated request) reads only what is sent
        pytest.param(OPENAI_LIKE, 500_000, 900_000, 0, 0.25, id="cached-capped-at-prompt"),
    ],
)
def test_request_cost(
    price: Price, prompt: int, cached: int, completion: int, expected: float
) -> None:
    assert request_cost(prompt, cached, completion, price) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("previous", "current", "tokens", "expected"),
    [
        pytest.param(["a", "b"], ["a", "b", "c"], [10, 20, 30], 30, id="appended"),
        pytest.param(["a", "b", "c"], ["a", "x", "c"], [10, 20, 30], 10, id="changed-middle"),
        pytest.param(["a", "b"], ["s", "b"], [10, 20], 0, id="changed-first"),
        pytest.param([], ["a"], [10], 0, id="first-request"),
        pytest.param(["a", "b", "c"], ["a", "b"], [10, 20], 30, id="shorter-request"),
    ],
)
def test_cached_prefix_tokens(
    previous: list[str], current: list[str], tokens: list[int], expected: int
) -> None:
    assert cached_prefix_tokens(previous, current, tokens) == expected


def test_compaction_that_rewrites_the_start_pays_the_whole_prompt_once() -> None:
    """Three requests: append, append, then a compaction replaces the head with a summary."""
    price = Price(input=1_000_000, cached=100_000, output=0)  # $1 per token, $0.1 cached
    cache = PrefixCache()
    totals = CostTotals(price)
    system, u1, a1, u2, summary = "S", "U1", "A1", "U2", "SUM"
    sizes = {system: 10, u1: 5, a1: 5, u2: 5, summary: 4}
    requests = [
        [system, u1],  # 15 tokens, nothing cached: $15
        [system, u1, a1, u2],  # 25 tokens, 15 cached: 10 * 1 + 15 * 0.1 = $11.5
        [system, summary, u2],  # 19 tokens, only the system prompt cached: 9 + 1 = $10
    ]
    costs = []
    for request in requests:
        tokens = [sizes[m] for m in request]
        cached = cache.observe(request, tokens, sum(tokens))
        costs.append(totals.add(sum(tokens), cached, 0))
    assert costs == pytest.approx([15.0, 11.5, 10.0])
    assert totals.cost == pytest.approx(36.5)
    assert totals.cached_tokens == 25
    assert totals.cumulative == pytest.approx([15.0, 26.5, 36.5])


def test_cache_write_premium_charges_every_uncached_token() -> None:
    """Anthropic-style: the same three requests cost more for what is written, less for reads."""
    price = Price(input=1_000_000, cached=100_000, cache_write=1_250_000, output=0)
    # 15 written: 18.75; then 10 written + 15 read: 12.5 + 1.5 = 14.0
    assert request_cost(15, 0, 0, price) == pytest.approx(18.75)
    assert request_cost(25, 15, 0, price) == pytest.approx(14.0)


def test_fingerprint_is_byte_sensitive() -> None:
    message = {"role": "user", "content": "hi"}
    assert message_fingerprint(message) == message_fingerprint({"role": "user", "content": "hi"})
    assert message_fingerprint(message) != message_fingerprint({"role": "user", "content": "hi "})
    # key order is part of the bytes on the wire
    assert message_fingerprint(message) != message_fingerprint({"content": "hi", "role": "user"})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            "input=3,cached=0.3,cache_write=3.75,output=15",
            Price(3.0, 0.3, 3.75, 15.0),
            id="all-four",
        ),
        pytest.param("input=2", Price(2.0, 2.0, None, 0.0), id="input-only"),
        pytest.param(" output=8, input=2 ,cached=0.5", Price(2.0, 0.5, None, 8.0), id="any-order"),
        pytest.param("openai-gpt-4o", PRESETS["openai-gpt-4o"], id="preset"),
    ],
)
def test_parse_price(spec: str, expected: Price) -> None:
    assert parse_price(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("cached=1", "'input' is required", id="no-input"),
        pytest.param("input=x", "not a number", id="not-a-number"),
        pytest.param("input=1,bogus=2", "expected one of", id="unknown-key"),
        pytest.param("openai-gpt-99", "presets:", id="unknown-preset"),
        pytest.param("input=-1", "negative", id="negative"),
    ],
)
def test_parse_price_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_price(spec)


def test_presets_are_consistent() -> None:
    for name, price in PRESETS.items():
        assert price.cached < price.input, name
        if name.startswith("anthropic"):
            assert price.cache_write == pytest.approx(price.input * 1.25), name
        else:
            assert price.cache_write is None, name
