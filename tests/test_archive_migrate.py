"""``contextengine archive migrate``: a SQLite archive copied into PostgreSQL, idempotently."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextengine.cli.archive_migrate import migrate
from contextengine.errors import StoreError
from contextengine.store import ContextRef, NewSummary, SQLiteStore, Store
from pg_support import drop_schema, fresh_schema, require_pg

pytest.importorskip("psycopg")
from contextengine.store.migrate import migrate_archive
from contextengine.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def target(tmp_path: Path) -> Iterator[PostgresStore]:
    url = require_pg()
    schema = fresh_schema()
    try:
        with PostgresStore(url, schema=schema) as store:
            yield store
    finally:
        drop_schema(schema)


def conversation(n: int, tag: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(n):
        msgs.append({"role": "user", "content": f"{tag} question {i} about lighthouses"})
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"{tag}_call_{i}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": json.dumps({"q": i})},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": f"{tag}_call_{i}", "content": f"fact {i}"})
    return msgs


def fill(store: Store, key: str, turns: int) -> tuple[str, str]:
    """A conversation with messages, two levels of summaries, a context and a large content."""
    cid = store.open_conversation(key)
    stored = store.append_messages(cid, conversation(turns, key), start_seq=0)
    leaves = store.commit_compaction(
        cid,
        [
            NewSummary(
                kind="leaf",
                depth=0,
                content=f"{key}: the user asked about lighthouses ({stored[1].id})",
                token_count=9,
                source_ids=[m.id for m in stored[1:4]],
                seq_start=1,
                seq_end=4,
                time_start=1.0,
                time_end=2.0,
                descendant_count=3,
            ),
            NewSummary(
                kind="condensed",
                depth=1,
                content=f"{key}: condensed\x00",
                token_count=4,
                source_ids=["new:0"],
                seq_start=1,
                seq_end=4,
                time_start=1.0,
                time_end=2.0,
                descendant_count=3,
                fallback=True,
            ),
        ],
        [ContextRef(kind="message", id=stored[0].id), ContextRef(kind="summary", id="new:1")]
        + [ContextRef(kind="message", id=m.id) for m in stored[4:]],
    )
    assert len(leaves) == 2
    large = store.put_large_content(cid, stored[3].id, f"{key} huge tool output " * 50, 400)
    return cid, large.id


def snapshot(store: Store) -> dict[str, Any]:
    """Everything a user can read back from an archive, by conversation."""
    out: dict[str, Any] = {}
    for info in store.list_conversations():
        cid = info.id
        context = store.get_context(cid)
        summaries = {}
        pending = [r.id for r in context if r.kind == "summary"]
        while pending:
            record = store.get_summary(cid, pending.pop())
            assert record is not None
            summaries[record.id] = (
                record.kind,
                record.depth,
                record.content,
                record.source_ids,
                record.fallback,
                record.created_at,
            )
            if record.kind == "condensed":
                pending.extend(record.source_ids)
        messages = store.get_messages(cid)
        out[info.session_key] = {
            "id": cid,
            "messages": [(m.id, m.seq, m.role, m.message, m.identity_key) for m in messages],
            "summaries": summaries,
            "context": context,
            "parents": [store.parent_summary(cid, m.id) for m in messages],
        }
    return out


def test_migration_copies_everything_with_its_ids(tmp_path: Path, target: PostgresStore) -> None:
    with SQLiteStore(tmp_path / "a.db") as source:
        filled = [fill(source, "alpha", 4), fill(source, "beta", 2)]
        report = migrate_archive(source, target)
        expected = snapshot(source)
        large = [source.get_large_content(cid, lc_id) for cid, lc_id in filled]
    assert report.conversations == 2
    assert report.messages == (1 + 3 * 4) + (1 + 3 * 2)
    assert report.summaries == 4 and report.large_contents == 2 and not report.skipped
    assert snapshot(target) == expected
    assert [target.get_large_content(c.conversation_id, c.id) for c in large if c] == large
    alpha = expected["alpha"]["id"]
    hits = {h.seq: h for h in target.search(alpha, "alpha question 0 lighthouses").results}
    compacted = expected["alpha"]["messages"][1][0]
    assert hits[1].id == compacted
    assert hits[1].summary_id == expected["alpha"]["parents"][1] is not None


def test_running_it_again_copies_nothing_then_only_what_is_new(
    tmp_path: Path, target: PostgresStore
) -> None:
    with SQLiteStore(tmp_path / "a.db") as source:
        cid, _ = fill(source, "alpha", 3)
        first = migrate_archive(source, target)
        assert first.copied > 0
        again = migrate_archive(source, target)
        assert again.copied == 0
        source.append_messages(cid, [{"role": "user", "content": "one more thing"}])
        later = migrate_archive(source, target)
        expected = snapshot(source)
    assert (later.messages, later.summaries, later.conversations) == (1, 0, 0)
    assert snapshot(target) == expected
    assert target.get_messages(cid)[-1].message == {"role": "user", "content": "one more thing"}


def test_a_conversation_with_another_history_in_the_target_is_skipped_not_merged(
    tmp_path: Path, target: PostgresStore
) -> None:
    live = target.open_conversation("alpha")  # an agent started on PostgreSQL already
    target.append_messages(live, [{"role": "user", "content": "live"}])
    with SQLiteStore(tmp_path / "a.db") as source:
        fill(source, "alpha", 1)
        fill(source, "beta", 1)
        report = migrate_archive(source, target)
    assert report.skipped == ["alpha"]
    assert [m.message["content"] for m in target.get_messages(live)] == ["live"]
    assert {c.session_key for c in target.list_conversations()} == {"alpha", "beta"}


def test_in_memory_source_and_sqlite_target_are_refused(tmp_path: Path, target: Store) -> None:
    with SQLiteStore(":memory:") as memory, pytest.raises(StoreError, match="in-memory"):
        migrate_archive(memory, target)
    with (
        SQLiteStore(tmp_path / "a.db") as source,
        SQLiteStore(tmp_path / "b.db") as other,
        pytest.raises(StoreError, match="postgresql"),
    ):
        migrate_archive(source, other)


def test_cli_migrate_reports_what_it_copied(tmp_path: Path, target: PostgresStore) -> None:
    path = tmp_path / "a.db"
    with SQLiteStore(path) as source:
        fill(source, "alpha", 2)
    url = f"{require_pg()}?schema={target.schema}"
    runner = CliRunner()
    first = runner.invoke(migrate, ["--from", f"sqlite:///{path}", "--to", url, "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["messages"] == 7  # progress lines go to stderr
    totals = tmp_path / "totals.json"
    second = runner.invoke(
        migrate, ["--from", str(path), "--to", url, "--quiet", "--output", str(totals)]
    )
    assert second.exit_code == 0, second.output
    assert second.output.startswith("copied 0 conversations, 0 messages, 0 summaries")
    assert json.loads(totals.read_text())["messages"] == 0  # --output writes what --json prints


def test_lineage_links_and_session_aliases_are_copied(
    tmp_path: Path, target: PostgresStore
) -> None:
    with SQLiteStore(tmp_path / "a.db") as source:
        old, _ = fill(source, "old", 2)
        new, _ = fill(source, "new", 1)
        source.link_conversations(new, old, reason="reset")
        source.alias_session("new-after-compaction", new)
        migrate_archive(source, target)
        migrate_archive(source, target)  # idempotent
    assert target.conversation_lineage(new) == [new, old]
    assert target.conversation_lineage(old) == [old]
    assert target.open_conversation("new-after-compaction") == new
