"""Where automatic compaction starts: the percentage, an absolute cap, the reply's room, a floor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from contextengine import (
    ContextCompressor,
    ContextEngine,
    ContextHost,
    LosslessEngine,
    compaction_threshold,
)

EngineFactory = Callable[..., ContextEngine]


def _compressor(**options: Any) -> ContextEngine:
    # The threshold rule at the plain compressor's 75% (an archive's default is 60%).
    options.setdefault("archive", False)
    return ContextCompressor(model="gpt-4o", **options)


def _lcm(**options: Any) -> ContextEngine:
    return LosslessEngine(model="gpt-4o", store=":memory:", **options)


ENGINES = [pytest.param(_compressor, id="compressor"), pytest.param(_lcm, id="lcm")]


@pytest.mark.parametrize(
    ("context_length", "percent", "cap", "reserved", "expected"),
    [
        pytest.param(128_000, 0.75, None, 0, 96_000, id="percentage-alone"),
        pytest.param(128_000, 0.75, 50_000, 0, 50_000, id="cap-below-percentage"),
        pytest.param(128_000, 0.75, 200_000, 0, 96_000, id="cap-above-percentage"),
        pytest.param(128_000, 0.75, None, 64_000, 64_000, id="reply-room"),
        pytest.param(128_000, 0.75, None, 8_000, 96_000, id="reply-room-already-there"),
        pytest.param(16_000, 0.75, None, 16_000, 4_096, id="floor-on-a-full-reservation"),
        pytest.param(128_000, 0.75, 500, 0, 4_096, id="floor-on-a-tiny-cap"),
        pytest.param(4_000, 0.75, None, 3_900, 2_000, id="floor-is-half-a-tiny-window"),
        pytest.param(4_000, 0.1, None, 0, 400, id="a-low-percentage-is-trusted"),
        pytest.param(4_000, 0.1, None, 3_900, 400, id="floor-never-above-the-percentage"),
    ],
)
def test_the_threshold_rule(
    context_length: int, percent: float, cap: int | None, reserved: int, expected: int
) -> None:
    threshold = compaction_threshold(context_length, percent, cap=cap, reserved_output=reserved)
    assert threshold == expected


@pytest.mark.parametrize("make", ENGINES)
def test_engines_apply_the_cap_and_the_reserved_output(make: EngineFactory) -> None:
    capped = make(context_length=200_000, max_threshold_tokens=60_000)
    assert capped.threshold_tokens == 60_000
    assert not capped.should_compress(59_000)
    reserved = make(context_length=32_000, reserved_output_tokens=16_000)
    assert reserved.threshold_tokens == 16_000


@pytest.mark.parametrize("make", ENGINES)
def test_the_request_max_tokens_is_reserved_by_the_host(make: EngineFactory) -> None:
    engine = make(context_length=32_000)
    host = ContextHost(engine, model="gpt-4o", context_length=32_000)
    assert engine.threshold_tokens == 24_000
    history = [{"role": "user", "content": "hello"}]
    host.prepare_request(history, max_tokens=12_000)
    assert engine.threshold_tokens == 20_000
    host.switch_model("gpt-4o-mini", 32_000)  # a model switch keeps the reservation
    assert engine.threshold_tokens == 20_000
    host.prepare_request(history, max_tokens=1_000)
    assert engine.threshold_tokens == 24_000


@pytest.mark.parametrize("make", ENGINES)
def test_a_tiny_window_keeps_a_workable_threshold(make: EngineFactory) -> None:
    engine = make(context_length=8_192, reserved_output_tokens=8_000)
    assert engine.threshold_tokens == 4_096
    assert not engine.should_compress(1_000)  # the system prompt alone would be over 192
