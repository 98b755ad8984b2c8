"""Isolation between conversations: the attack set of benchmarks/reliability/isolation.py.

The script is imported by path (``benchmarks/`` is not a package) and run in
its quick mode, about a hundred cases of every family, on an SQLite file and
on PostgreSQL (skipped without a server, required in CI): no case may leak a
victim secret, every error must be clear, and every control must reach the
attacker's own rows. The full count and its figures are in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from contextengine.store import SQLiteStore, Store
from pg_support import pg_store

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reliability" / "isolation.py"


@pytest.fixture(scope="module")
def isolation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_reliability_isolation", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def sqlite_file(tmp_path: Path) -> Iterator[Store]:
    store = SQLiteStore(tmp_path / "archive.db")
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def postgres(tmp_path: Path) -> Iterator[Store]:
    # A short regex timeout, as the script uses: a bomb PostgreSQL cannot finish is refused.
    with pg_store(regex_timeout_ms=1_000) as store:
        yield store


@pytest.mark.parametrize(
    "opener",
    [
        pytest.param(sqlite_file, id="sqlite-file"),
        pytest.param(postgres, id="postgres", marks=pytest.mark.postgres),
    ],
)
def test_the_quick_attack_set_leaks_nothing(
    isolation: ModuleType, opener: Any, tmp_path: Path
) -> None:
    with opener(tmp_path) as store:
        report = isolation.attack_store(store, "store", quick=True)
    assert report.failures() == []
    outcomes = report.outcomes
    assert len(outcomes) >= 90
    assert {o.case.family for o in outcomes} == set(isolation.FAMILIES)
    assert {o.case.surface for o in outcomes} == {"tool", "host", "store"}
    # Not vacuous: each family reached the attacker's own rows...
    for family in isolation.FAMILIES:
        controls = [o for o in outcomes if o.case.family == family and o.case.control]
        assert controls and all(o.found_own for o in controls), family
    # ...and refused or answered the rest with no victim secret in sight.
    assert not any(o.leaked for o in outcomes)
    assert any(o.error for o in outcomes)


def test_the_judge_sees_a_leak(isolation: ModuleType, tmp_path: Path) -> None:
    # Without this the zeros above could come from a judge that sees nothing: hand
    # the attacker's calls to the victim's engine and its canaries must count as leaks.
    with sqlite_file(tmp_path) as store:
        world = isolation.build_world(store, "sqlite", turns=2)
        try:
            crossed = dataclasses.replace(
                world, attacker=dataclasses.replace(world.attacker, engine=world.victim.engine)
            )
            case = isolation.Case(
                "ids", "victim id", "tool", "lcm_expand", {"id": world.victim.large_ids[0]}
            )
            outcome = isolation.attempt(crossed, case)
            assert outcome.leaked
            assert any(secret.startswith("zvic") for secret in outcome.leaked)
            assert isolation.attempt(world, case).leaked == ()
        finally:
            world.victim.engine.close()
            world.attacker.engine.close()
