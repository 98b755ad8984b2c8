"""The prompt-cache price model: what a replayed session would have cost.

Providers bill a request's prompt in two parts: the prefix they find in their
prompt cache (billed at the cheap ``cached`` rate) and the rest (billed at
``input``, or, with Anthropic-style explicit caching, at ``cache_write`` since
the rest is written to the cache for the next request). The model here is the
simplest one that rewards what matters:

* the cached prefix of a request is the longest run of leading messages that
  are byte-identical to the previous request's (messages serialised as a JSON
  client would send them), counted in tokens;
* everything after it is uncached input, billed at ``cache_write`` when the
  price sets one and at ``input`` otherwise;
* the reply is billed at ``output``.

So an engine that only ever appends keeps its whole history cached, and a
compaction that rewrites the start of the context pays for the whole prompt
again once. Providers' minimum cacheable sizes (1,024 tokens) and cache
expiry are ignored: a replay has no wall clock, and both apply equally to
every engine compared.

Prices are US dollars per million tokens. The :data:`PRESETS` are the
providers' public list prices as of November 2025 (standard tier, prompts
under 200k tokens, 5-minute Anthropic cache writes); they change, so check
them before quoting a figure, or pass your own with
``--price input=...,cached=...,cache_write=...,output=...``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "PRESETS",
    "CostTotals",
    "PrefixCache",
    "Price",
    "cached_prefix_tokens",
    "message_fingerprint",
    "parse_price",
    "request_cost",
]

_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """Prices in US dollars per million tokens.

    ``cached`` is the rate of prompt tokens read from the cache. ``cache_write``
    is the rate of the uncached part when the provider writes it to the cache
    (Anthropic: 1.25x input); None means the provider caches for free and the
    uncached part is billed at ``input`` (OpenAI, DeepSeek).
    """

    input: float
    cached: float
    cache_write: float | None = None
    output: float = 0.0

    def as_dict(self) -> dict[str, float | None]:
        """The four rates, for JSON output."""
        return asdict(self)

    def describe(self) -> str:
        """The rates in the ``--price`` syntax."""
        parts = [f"input={self.input:g}", f"cached={self.cached:g}"]
        if self.cache_write is not None:
            parts.append(f"cache_write={self.cache_write:g}")
        parts.append(f"output={self.output:g}")
        return ",".join(parts)


#: List prices (USD per million tokens) as of November 2025; they may change.
PRESETS: dict[str, Price] = {
    "openai-gpt-4o": Price(input=2.50, cached=1.25, output=10.00),
    "openai-gpt-4o-mini": Price(input=0.15, cached=0.075, output=0.60),
    "openai-gpt-4.1": Price(input=2.00, cached=0.50, output=8.00),
    "openai-gpt-4.1-mini": Price(input=0.40, cached=0.10, output=1.60),
    "openai-gpt-5": Price(input=1.25, cached=0.125, output=10.00),
    "anthropic-claude-sonnet": Price(input=3.00, cached=0.30, cache_write=3.75, output=15.00),
    "anthropic-claude-opus": Price(input=5.00, cached=0.50, cache_write=6.25, output=25.00),
    "anthropic-claude-haiku": Price(input=1.00, cached=0.10, cache_write=1.25, output=5.00),
    "deepseek-chat": Price(input=0.28, cached=0.028, output=0.42),
}

_KEYS = ("input", "cached", "cache_write", "output")


def parse_price(spec: str) -> Price:
    """A preset name, or ``input=...,cached=...,cache_write=...,output=...`` per million tokens.

    ``input`` is required; ``cached`` defaults to ``input`` (no cache discount),
    ``cache_write`` to none (no write premium) and ``output`` to 0. Raises
    ValueError naming the bad part; the CLI turns it into a usage error.
    """
    text = spec.strip()
    if text in PRESETS:
        return PRESETS[text]
    if "=" not in text:
        raise ValueError(
            f"unknown price preset {text!r}; presets: {', '.join(sorted(PRESETS))}, "
            "or give input=...,cached=...,cache_write=...,output=... per million tokens"
        )
    values: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, raw = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _KEYS:
            raise ValueError(f"price part {part.strip()!r}: expected one of {', '.join(_KEYS)}=N")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(
                f"price part {part.strip()!r}: {raw.strip()!r} is not a number"
            ) from None
        if value < 0:
            raise ValueError(f"price part {part.strip()!r}: prices cannot be negative")
        values[key] = value
    if "input" not in values:
        raise ValueError(f"price {text!r}: 'input' is required")
    return Price(
        input=values["input"],
        cached=values.get("cached", values["input"]),
        cache_write=values.get("cache_write"),
        output=values.get("output", 0.0),
    )


def message_fingerprint(message: Mapping[str, Any]) -> str:
    """A digest of the message as a JSON client would put it on the wire.

    Key order is kept, not sorted: the cache matches bytes, and a message
    rebuilt with its keys in another order is a different prefix.
    """
    wire = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.blake2b(wire.encode(), digest_size=16).hexdigest()


def cached_prefix_tokens(
    previous: Sequence[str], current: Sequence[str], tokens: Sequence[int]
) -> int:
    """Tokens of the leading messages of ``current`` identical to those of ``previous``.

    ``previous`` and ``current`` are message fingerprints; ``tokens[i]`` is
    the token count of ``current[i]``.
    """
    n = min(len(previous), len(current))
    # The common case, an appended-to history, is one C-level comparison.
    if tuple(current[:n]) == tuple(previous[:n]):
        return sum(tokens[:n])
    same = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        same += 1
    return sum(tokens[:same])


class PrefixCache:
    """The provider's prompt cache as the model sees it: the previous request.

    Called by the replay loop once per request, in order. ``observe`` returns
    the cached tokens of the request, at most ``prompt_tokens`` (a prompt the
    provider truncated cannot read more than it sends).
    """

    def __init__(self) -> None:
        self._previous: tuple[str, ...] = ()

    def observe(
        self, fingerprints: Sequence[str], tokens: Sequence[int], prompt_tokens: int
    ) -> int:
        """Record this request and return how many of its prompt tokens were cached."""
        current = tuple(fingerprints)
        cached = cached_prefix_tokens(self._previous, current, tokens)
        self._previous = current
        return min(cached, prompt_tokens)


def request_cost(
    prompt_tokens: int, cached_tokens: int, completion_tokens: int, price: Price
) -> float:
    """US dollars for one request: cached prefix, uncached rest, reply."""
    cached = max(0, min(cached_tokens, prompt_tokens))
    uncached = prompt_tokens - cached
    write_rate = price.input if price.cache_write is None else price.cache_write
    return (
        cached * price.cached + uncached * write_rate + completion_tokens * price.output
    ) / _MILLION


@dataclass
class CostTotals:
    """Running totals of a sequence of requests under one price."""

    price: Price
    cost: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    #: Cost after each request, for the cumulative chart.
    cumulative: list[float] | None = None

    def add(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """Account for one request; returns its cost."""
        cost = request_cost(prompt_tokens, cached_tokens, completion_tokens, self.price)
        self.cost += cost
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += min(cached_tokens, prompt_tokens)
        self.completion_tokens += completion_tokens
        if self.cumulative is None:
            self.cumulative = []
        self.cumulative.append(self.cost)
        return cost

    @property
    def cache_hit_rate(self) -> float:
        """Share of prompt tokens read from the cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
