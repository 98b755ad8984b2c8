"""The words the PostgreSQL store writes and queries: valid literals, whatever the text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextengine.store.postgres_text import tsquery_phrase, tsquery_term, tsvector
from pg_support import require_pg

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def conn() -> Iterator[Any]:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(require_pg(), autocommit=True) as connection:
        yield connection


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=200), ctx=st.text(max_size=50))
def test_any_text_is_a_valid_tsvector_and_tsquery(conn: Any, text: str, ctx: str) -> None:
    conn.execute("SELECT %s::tsvector", (tsvector(text, ctx),))
    for word in text.split()[:5]:
        query = tsquery_term(word) or "'x'"
        conn.execute(
            "SELECT %s::tsquery, %s::tsquery", (query, tsquery_term(word, prefix=True) or "'x'")
        )


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param("it's \\' ' '' \\\\", id="quotes-and-backslashes"),
        pytest.param("a & b | !c <-> d:* (e)", id="tsquery-operators"),
        pytest.param("'x':1A 'y':2", id="tsvector-syntax"),
        pytest.param("ŉ ＇ ½ ﬁ", id="decompositions"),
    ],
)
def test_hostile_text_stays_words(conn: Any, hostile: str) -> None:
    vector = conn.execute("SELECT %s::tsvector", (tsvector(hostile),)).fetchone()[0]
    assert "\\" not in vector
    phrase = tsquery_phrase(hostile.split())
    if phrase:
        conn.execute("SELECT %s::tsquery", (phrase,))


def test_positions_and_weights_follow_the_text_then_ctx(conn: Any) -> None:
    (vector,) = conn.execute(
        "SELECT %s::tsvector::text", (tsvector("Running runs", "the runner"),)
    ).fetchone()
    assert vector == "'run':1A,2A 'runner':4 'the':3"
