"""What only the PostgreSQL store promises: many processes at once, locks, crashes, hostile text.

The behaviour both stores share is the contract suite (test_store_contract.py,
test_store_search.py), which runs on PostgreSQL too. These tests need a
server: see tests/pg_support.py (``CONTEXTENGINE_TEST_PG_URL``).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from contextengine.errors import StoreError
from contextengine.store import ContextRef, NewSummary, open_store
from contextengine.store.postgres_migrations import load_pg_migrations
from pg_support import drop_schema, fresh_schema, postgres_factory, require_pg
from pg_workers import stall_mid_compaction, write_and_search

psycopg = pytest.importorskip("psycopg")
from contextengine.store.postgres import PostgresStore, translate_regex  # noqa: E402

pytestmark = pytest.mark.postgres
SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def pg_url() -> str:
    return require_pg()


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    name = fresh_schema()
    yield name
    drop_schema(name)


@pytest.fixture
def store(pg_url: str, tmp_path: Path) -> Iterator[PostgresStore]:
    """A store in an empty schema of its own (recycled between tests, see pg_support)."""
    opened = postgres_factory(tmp_path, time.time)
    yield opened
    opened.close()


def leaf(source_ids: list[str], content: str = "a summary") -> NewSummary:
    return NewSummary(
        kind="leaf",
        depth=0,
        content=content,
        token_count=3,
        source_ids=source_ids,
        seq_start=0,
        seq_end=len(source_ids),
        time_start=0.0,
        time_end=0.0,
        descendant_count=len(source_ids),
    )


def chat(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"{tag} message number {i}"} for i in range(n)]


def sql_rows(url: str, schema: str, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(schema))
        )
        return conn.execute(query, params).fetchall()


# ------------------------------------------------------------------------------ opening


def test_open_store_selects_postgres_by_url(pg_url: str, schema: str) -> None:
    store = open_store(f"{pg_url}?schema={schema}")
    try:
        assert isinstance(store, PostgresStore)
        assert store.schema == schema
    finally:
        store.close()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("Robert'); DROP", id="quote"),
        pytest.param("a-b", id="dash"),
        pytest.param("UPPER", id="upper"),
    ],
)
def test_schema_name_is_validated(pg_url: str, name: str) -> None:
    with pytest.raises(StoreError, match="invalid schema name"):
        PostgresStore(pg_url, schema=name)


def test_password_never_shows_in_repr_or_errors(pg_url: str, schema: str) -> None:
    parts = urlsplit(pg_url)  # trust auth ignores the password; the store must still hide it
    netloc = f"{parts.username or 'postgres'}:s3cret-pw@{parts.hostname}:{parts.port or 5432}"
    with_password = urlunsplit(parts._replace(netloc=netloc))
    with PostgresStore(with_password, schema=schema) as store:
        assert "s3cret-pw" not in repr(store)
        with pytest.raises(StoreError) as failure:
            store.search("no-such-conversation", "x")
        assert "s3cret-pw" not in str(failure.value)


def test_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot connect"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout_s=1)


def test_reopening_keeps_rows_and_applies_no_migration_twice(pg_url: str, schema: str) -> None:
    with PostgresStore(pg_url, schema=schema) as first:
        cid = first.open_conversation("k")
        first.append_messages(cid, chat(3), token_counts=[1, 1, 1])
    with PostgresStore(pg_url, schema=schema) as again:
        assert again.message_count(cid) == 3
        versions = sql_rows(pg_url, schema, "SELECT version FROM schema_version ORDER BY 1")
        assert [v for (v,) in versions] == [m.version for m in load_pg_migrations()]


# ------------------------------------------------------------------------------ concurrency


def test_concurrent_processes_store_every_acknowledged_message_once_without_seq_gaps(
    pg_url: str, schema: str
) -> None:
    """Four workers on their own conversations, two on a shared one, all searching as they go.

    They all open the archive at the same moment, before it exists: the
    migration lock must let exactly one of them create it.
    """
    batches = 10
    plan = [(f"solo-{w}", w, False) for w in range(4)] + [
        ("shared", 4, True),
        ("shared", 5, True),
    ]
    with SPAWN.Manager() as manager, ProcessPoolExecutor(len(plan), mp_context=SPAWN) as pool:
        barrier = manager.Barrier(len(plan))
        futures = [
            pool.submit(write_and_search, pg_url, schema, key, w, batches, shared, barrier)
            for key, w, shared in plan
        ]
        acked: dict[str, set[str]] = {}
        for (key, _w, _s), future in zip(plan, futures, strict=True):
            acked.setdefault(key, set()).update(future.result(timeout=180))

    with PostgresStore(pg_url, schema=schema) as store:
        for key, ids in acked.items():
            cid = store.open_conversation(key)
            stored = store.get_messages(cid)
            provider_ids = [m.message["id"] for m in stored]
            assert len(provider_ids) == len(set(provider_ids)), f"{key}: a message stored twice"
            assert set(provider_ids) == ids, f"{key}: acknowledged and stored messages differ"
            assert [m.seq for m in stored] == list(range(len(stored))), f"{key}: seq gap"
    assert len(acked["shared"]) == 2 * batches * 4 + batches * 3
    versions = sql_rows(pg_url, schema, "SELECT version FROM schema_version ORDER BY 1")
    assert [v for (v,) in versions] == [m.version for m in load_pg_migrations()]


# ------------------------------------------------------------------------------ compaction


def _commit_key(store: PostgresStore, conversation_id: str) -> str:
    return f"contextengine.commit:{store.schema}:{conversation_id}"


def test_commit_compaction_waits_while_another_worker_commits(
    pg_url: str, store: PostgresStore
) -> None:
    cid = store.open_conversation("k")
    stored = store.append_messages(cid, chat(2), token_counts=[1, 1])
    done = threading.Event()

    def commit() -> None:
        store.commit_compaction(cid, [leaf([stored[0].id])], None)
        done.set()

    with psycopg.connect(pg_url) as other:  # another worker, mid-commit on this conversation
        other.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_commit_key(store, cid),)
        )
        thread = threading.Thread(target=commit)
        thread.start()
        for _ in range(200):  # until the server shows our commit queued behind the lock
            waiting = other.execute(
                "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            ).fetchone()
            if waiting and waiting[0]:
                break
            time.sleep(0.05)
        assert waiting and waiting[0], "the commit did not wait for the conversation's lock"
        assert not done.is_set()
        assert store.stats()["summaries"] == 0
        other.rollback()  # the other worker finishes: its lock goes
    thread.join(timeout=30)
    assert done.is_set()
    assert store.stats()["summaries"] == 1


def test_compaction_lock_admits_one_worker_per_conversation(pg_url: str, schema: str) -> None:
    with (
        PostgresStore(pg_url, schema=schema) as worker_a,
        PostgresStore(pg_url, schema=schema) as worker_b,
    ):
        cid = worker_a.open_conversation("shared")
        other = worker_a.open_conversation("other")
        with worker_a.compaction_lock(cid) as held:
            assert held
            with worker_b.compaction_lock(cid, wait=False) as second:
                assert not second
            with worker_b.compaction_lock(other, wait=False) as unrelated:
                assert unrelated
        with worker_b.compaction_lock(cid, wait=False) as after_release:
            assert after_release


def test_error_mid_compaction_leaves_no_summary_and_the_context_as_it_was(
    store: PostgresStore,
) -> None:
    cid = store.open_conversation("k")
    foreign = store.open_conversation("someone else")
    stored = store.append_messages(cid, chat(3), token_counts=[1, 1, 1])
    theirs = store.append_messages(foreign, chat(1, "theirs"), token_counts=[1])
    before = [ContextRef(kind="message", id=m.id) for m in stored]
    store.replace_context(cid, before)
    with pytest.raises(StoreError, match="unknown message"):
        store.commit_compaction(
            cid,
            [leaf([stored[0].id]), leaf([theirs[0].id])],  # the second fails after the first
            [ContextRef(kind="summary", id="new:0")],
        )
    assert store.stats()["summaries"] == 0
    assert store.stats()["summary_edges"] == 0
    assert store.get_context(cid) == before
    assert store.search(cid, "summary").results == []


def test_worker_killed_mid_compaction_leaves_nothing_visible(
    pg_url: str, store: PostgresStore, tmp_path: Path
) -> None:
    cid = store.open_conversation("k")
    stored = store.append_messages(cid, chat(2), token_counts=[1, 1])
    before = [ContextRef(kind="message", id=m.id) for m in stored]
    store.replace_context(cid, before)
    signal = tmp_path / "inside"
    child = SPAWN.Process(
        target=stall_mid_compaction,
        args=(pg_url, store.schema, cid, [m.id for m in stored], str(signal)),
    )
    child.start()
    try:
        for _ in range(600):
            if signal.exists() or not child.is_alive():
                break
            time.sleep(0.05)
        assert signal.exists(), "the worker never reached the middle of its compaction"
        # The first summary row is written inside the worker's open transaction...
        assert store.stats()["summaries"] == 0
        child.kill()
        child.join(timeout=30)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    # ...and never becomes visible: the server rolled it back when the worker died.
    assert store.stats()["summaries"] == 0
    assert store.get_context(cid) == before
    assert store.parent_summary(cid, stored[0].id) is None
    # Its lock died with it: the next compaction commits.
    (record,) = store.commit_compaction(cid, [leaf([stored[0].id])], None)
    assert store.parent_summary(cid, stored[0].id) == record.id


# ------------------------------------------------------------------------------ hostile text


HOSTILE = [
    pytest.param("'; DROP TABLE messages; --", id="sql-injection"),
    pytest.param("!!! & | <-> :* ( ) ~ ''", id="tsquery-operators"),
    pytest.param("fat:* & !rat | cat <2> dog", id="tsquery-syntax"),
    pytest.param('"unclosed phrase', id="unclosed-quote"),
    pytest.param("nul\x00byte", id="nul"),
    pytest.param("\\'\\\\ %s %(x)s {}", id="escapes-and-placeholders"),
    pytest.param("émoji 🎉 日本語", id="unicode"),
    pytest.param("   ", id="blank"),
    pytest.param("the of and", id="stop-words-only"),
]


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_text_queries_run_and_leave_the_archive_intact(
    store: PostgresStore, query: str
) -> None:
    cid = store.open_conversation("k")
    store.append_messages(
        cid, [*chat(2), {"role": "user", "content": query}], token_counts=[1, 1, 1]
    )
    page = store.search(cid, query)
    assert all(h.kind == "message" for h in page.results)
    assert store.message_count(cid) == 3
    assert [m.message["content"] for m in store.get_messages(cid)][2] == query


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("(", id="unbalanced"),
        pytest.param("[z-a]", id="bad-range"),
        pytest.param("a{3,1}", id="bad-repeat"),
        pytest.param("x" * 1001, id="too-long"),
    ],
)
def test_invalid_regex_is_a_clear_store_error(store: PostgresStore, pattern: str) -> None:
    cid = store.open_conversation("k")
    store.append_messages(cid, chat(1), token_counts=[1])
    with pytest.raises(StoreError, match="regular expression"):
        store.search(cid, pattern, mode="regex")
    assert store.search(cid, "message", mode="regex").results  # the store is still usable


def test_slow_regex_is_cut_off_by_the_statement_timeout(pg_url: str, schema: str) -> None:
    with PostgresStore(pg_url, schema=schema, regex_timeout_ms=1) as store:
        cid = store.open_conversation("k")
        big = {"role": "tool", "tool_call_id": "t", "content": "ab" * 200_000}
        store.append_messages(cid, [big], token_counts=[1])
        try:
            page = store.search(cid, r"(a|b|ab|ba)*c", mode="regex")
        except StoreError as exc:
            assert "ran past" in str(exc)
        else:  # a fast server may finish inside the limit: it must then have found nothing
            assert page.results == []


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        pytest.param(r"\bcat\b", r"\ycat\y", id="word-boundary"),
        pytest.param(r"\Bat", r"\Yat", id="non-boundary"),
        pytest.param(r"[\b]x", r"[\b]x", id="backspace-in-class"),
        pytest.param(r"[]\b]", r"[]\b]", id="bracket-first-in-class"),
        pytest.param(r"(?P<word>\w+) \1", r"(\w+) \1", id="named-group"),
        pytest.param(r"\\b", r"\\b", id="escaped-backslash"),
    ],
)
def test_python_regex_isms_are_translated(pattern: str, expected: str) -> None:
    assert translate_regex(pattern) == expected


def test_word_boundary_regex_means_what_it_means_in_python(store: PostgresStore) -> None:
    cid = store.open_conversation("k")
    store.append_messages(
        cid,
        [{"role": "user", "content": "concatenate"}, {"role": "user", "content": "the cat sat"}],
        token_counts=[1, 1],
    )
    page = store.search(cid, r"\bcat\b", mode="regex")
    assert [h.seq for h in page.results] == [1]
    assert "«cat»" in page.results[0].snippet


def test_nul_characters_survive_in_summaries_and_large_contents(store: PostgresStore) -> None:
    cid = store.open_conversation("k")
    stored = store.append_messages(
        cid, [{"role": "user", "content": "binary \x00 output"}], token_counts=[1]
    )
    (record,) = store.commit_compaction(cid, [leaf([stored[0].id], "sum \x00 mary")], None)
    large = store.put_large_content(cid, stored[0].id, "blob\x00blob", 2)
    assert store.get_messages(cid)[0].message["content"] == "binary \x00 output"
    summary = store.get_summary(cid, record.id)
    assert summary is not None and summary.content == "sum \x00 mary"
    fetched = store.get_large_content(cid, large.id)
    assert fetched is not None and fetched.content == "blob\x00blob"
    assert [h.id for h in store.search(cid, "mary").results] == [record.id]


# ------------------------------------------------------------------------------ the engine on it


def test_lossless_engine_finds_what_left_the_view_in_postgres(pg_url: str, schema: str) -> None:
    """The engine takes a postgresql:// URL and its tools work as on SQLite."""
    import json

    from contextengine.engines.lossless import LosslessEngine

    engine = LosslessEngine(context_length=3_000, store=f"{pg_url}?schema={schema}")
    try:
        engine.on_session_start("pg-engine")
        history: list[dict[str, Any]] = [{"role": "system", "content": "You keep an orchard."}]
        for i in range(40):
            history += [
                {"role": "user", "content": f"where is crate orchard-{i:03d}?"},
                {"role": "assistant", "content": f"Crate orchard-{i:03d} is in bin {i * 7}."},
            ]
        engine.select_context(history, conversation_messages=history)
        engine.compress(history)
        found = json.loads(engine.handle_tool_call("lcm_grep", {"query": '"orchard-003"'}))
        hit = found["results"][0]
        assert hit["summary_id"] is not None  # it left the view; a summary stands for it
        opened = json.loads(engine.handle_tool_call("lcm_expand", {"id": hit["id"]}))
        assert "orchard-003" in json.dumps(opened)
    finally:
        engine.close()


def test_two_engines_on_one_conversation_compact_one_at_a_time(pg_url: str, schema: str) -> None:
    """Two workers serving one conversation never summarise the same messages twice."""
    import threading

    from contextengine.engines.lossless import LosslessEngine

    history: list[dict[str, Any]] = [{"role": "system", "content": "You keep an orchard."}]
    for i in range(40):
        history += [
            {"role": "user", "content": f"where is crate orchard-{i:03d}?"},
            {"role": "assistant", "content": f"Crate orchard-{i:03d} is in bin {i * 7}."},
        ]
    url = f"{pg_url}?schema={schema}"
    engines = [LosslessEngine(context_length=3_000, store=url) for _ in range(2)]
    try:
        for engine in engines:
            engine.on_session_start("shared-orchard")
            engine.select_context(history, conversation_messages=history)
        start = threading.Barrier(2)

        def compact(engine: LosslessEngine) -> None:
            start.wait()
            engine.compress(history)

        workers = [threading.Thread(target=compact, args=(e,)) for e in engines]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        leaf_sources = sql_rows(
            url.split("?")[0],
            schema,
            "SELECT e.source_id FROM summary_sources e JOIN summaries s ON s.id = e.summary_id"
            " WHERE s.kind = 'leaf'",
        )
        sources = [row[0] for row in leaf_sources]
        assert sources, "the conversation was compacted"
        assert len(sources) == len(set(sources)), "a message was summarised twice"
    finally:
        for engine in engines:
            engine.close()


def test_a_read_only_store_creates_nothing_and_writes_nothing(pg_url: str, schema: str) -> None:
    with pytest.raises(StoreError, match="no archive in schema"):
        PostgresStore(pg_url, schema=schema, read_only=True)
    found = sql_rows(
        pg_url,
        "public",
        "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
        (schema,),
    )
    assert found == []  # reading created no schema
    with PostgresStore(pg_url, schema=schema) as writer:
        cid = writer.open_conversation("s")
        writer.append_messages(cid, [{"role": "user", "content": "hello archive"}], start_seq=0)
    with PostgresStore(pg_url, schema=schema, read_only=True) as reader:
        assert reader.search(cid, "archive").results
        with pytest.raises(StoreError):
            reader.append_messages(cid, [{"role": "user", "content": "more"}], start_seq=1)


def test_turn_lock_serialises_two_processes_on_one_connection_each(
    pg_url: str, schema: str
) -> None:
    """Two stores are two processes: a held turn refuses the other; 50 held cost one connection."""
    with (
        PostgresStore(pg_url, schema=schema, max_size=2) as worker_a,
        PostgresStore(pg_url, schema=schema, max_size=2) as worker_b,
    ):
        assert worker_a.try_turn_lock("serve-1")
        assert not worker_b.try_turn_lock("serve-1"), "another process took a held turn"
        assert worker_b.try_turn_lock("serve-2")
        keys = [f"serve-many-{i}" for i in range(50)]
        assert all(worker_a.try_turn_lock(k) for k in keys)
        # Other test processes may hold advisory locks: count those of these two stores only.
        pids = [w._turn_conn.info.backend_pid for w in (worker_a, worker_b) if w._turn_conn]
        with psycopg.connect(pg_url) as probe:
            holders = probe.execute(
                "SELECT pid, COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND pid = ANY(%s) GROUP BY pid ORDER BY COUNT(*) DESC",
                (pids,),
            ).fetchall()
        assert [n for _pid, n in holders] == [51, 1], "turn locks take one connection per process"
        # The pool (2 connections) is untouched by 51 held turns: the archive still serves.
        cid = worker_a.open_conversation("serve-1")
        assert worker_a.append_messages(cid, chat(2), token_counts=[1, 1])
        worker_a.release_turn_lock("serve-1")
        assert worker_b.try_turn_lock("serve-1")
        worker_b.release_turn_lock("serve-1")
    with PostgresStore(pg_url, schema=schema) as worker_c:
        # Closing a store (a process that died) released every lock it held.
        assert worker_c.try_turn_lock("serve-many-7")
        worker_c.release_turn_lock("serve-many-7")
