"""The crash harness (benchmarks/reliability/crash.py) at CI size, and the checks it relies on.

The quick run kills real worker processes with SIGKILL during per-turn
ingest, compaction and bulk import (10 kills on SQLite, 4 on PostgreSQL when a
server answers) and must find nothing: no acknowledged message lost or stored
twice, no orphan edge, a clean ``integrity_check``, every resume working. The
other tests damage an archive by hand, one way each, and check that the
verifier reports exactly that: a harness whose checks cannot fail proves
nothing. The full counts (1,000 and 200 kills) are in docs/reliability.md.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pg_support import require_pg

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    path = ROOT / "benchmarks" / "reliability" / "crash.py"
    spec = importlib.util.spec_from_file_location("_reliability_crash", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up by name while it executes
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


crash = _load()


def _assert_clean(rows: list[Any], store: str) -> None:
    assert rows and {row.store for row in rows} == {store}
    for row in rows:
        assert row.examples == [], row.examples
        assert (row.lost, row.duplicated, row.orphans, row.other) == (0, 0, 0, 0), row
        assert (row.integrity_failures, row.worker_errors) == (0, 0), row
        assert row.resumes_ok == row.kills > 0, row
        assert not row.failed
    # The kills must have had something to break: acknowledged messages, and
    # compactions under way (else the "compaction" phase proved nothing).
    assert sum(row.acknowledged for row in rows) > 0
    assert sum(row.summarizer_calls for row in rows) > 0


def test_quick_kills_on_sqlite_lose_and_duplicate_nothing() -> None:
    rows = crash.measure(quick=True, stores=("SQLite",))
    assert sum(row.kills for row in rows) == 10
    assert {row.phase for row in rows} == set(crash.PHASES)
    _assert_clean(rows, "SQLite")


def test_quick_kills_on_postgres_lose_and_duplicate_nothing() -> None:
    url = require_pg()
    rows = crash.measure(quick=True, pg_url=url, stores=("PostgreSQL",))
    assert sum(row.kills for row in rows) == 4
    _assert_clean(rows, "PostgreSQL")


# ---------------------------------------------------------------- the verifier catches damage


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A SQLite archive of a real session with compactions, and its acknowledged markers."""
    path = tmp_path_factory.mktemp("crash") / "archive.db"
    state = crash.initial_state()
    host = crash._open_host(str(path))
    acked: dict[str, str] = {}
    try:
        host.start_session(crash.session_key(1))
        for _ in range(3 * 14):
            stored, _ = crash.advance(host, state, 1)
            acked.update(dict.fromkeys(stored, crash.session_key(1)))
        archive = host.engine.store
        conversation = archive.open_conversation(crash.bulk_key(1, 0))
        archive.import_messages(conversation, crash.bulk_messages(1, 0))
        acked.update(dict.fromkeys(crash._markers_of_batch(1, 0), crash.bulk_key(1, 0)))
    finally:
        host.engine.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM summaries").fetchone()[0] > 0
        assert db.execute("SELECT COUNT(*) FROM large_contents").fetchone()[0] > 0
    return path, acked


def _damaged(archive: tuple[Path, dict[str, str]], tmp_path: Path, sql: str) -> Any:
    source, acked = archive
    copy = tmp_path / "copy.db"
    with sqlite3.connect(source) as db, sqlite3.connect(copy) as target:
        db.backup(target)
    with sqlite3.connect(copy) as db:
        db.executescript(sql)
    return crash.verify_sqlite(str(copy), acked)


def test_an_intact_archive_shows_no_damage(archive: tuple[Path, dict[str, str]]) -> None:
    damage = crash.verify_sqlite(str(archive[0]), archive[1])
    assert (damage.integrity, damage.lost, damage.duplicated) == ([], set(), set())
    assert (damage.orphans, damage.other) == (set(), set())


_DUPLICATE = """
INSERT INTO messages (id, conversation_id, seq, role, json, token_count, identity_key, created_at)
SELECT 'msg_copy', conversation_id, (SELECT MAX(seq) + 1 FROM messages m
        WHERE m.conversation_id = x.conversation_id),
       role, json, token_count, 'copy', created_at
FROM messages x WHERE json LIKE '%CM1x5U %';
"""

DAMAGE = [
    pytest.param(
        "DELETE FROM messages WHERE json LIKE '%CB1x0x7 %'",
        lambda d: d.lost == {"CB1x0x7"},
        id="bulk-message-deleted-is-lost",
    ),
    pytest.param(
        _DUPLICATE,
        lambda d: d.duplicated == {"CM1x5U"},
        id="message-stored-twice-is-duplicated",
    ),
    pytest.param(
        "INSERT INTO context_items SELECT id, 100000, 'summary', 'sum_gone'"
        " FROM conversations LIMIT 1",
        lambda d: any(o.startswith("context_items -> summaries") for o in d.orphans),
        id="context-item-naming-a-missing-summary",
    ),
    pytest.param(
        "UPDATE summary_sources SET source_id = 'msg_gone'"
        " WHERE source_kind = 'message' AND position = 0",
        lambda d: any(o.startswith("summary_sources -> messages") for o in d.orphans),
        id="summary-edge-to-a-missing-message",
    ),
    pytest.param(
        "DELETE FROM summaries WHERE rowid = (SELECT MIN(rowid) FROM summaries)",
        lambda d: (
            any(o.startswith("search_index") for o in d.orphans)
            and any(o.startswith("summary_sources.summary_id") for o in d.orphans)
        ),
        id="summary-deleted-leaves-its-edges-and-index-rows",
    ),
    pytest.param(
        "UPDATE large_contents SET message_id = 'msg_gone'",
        lambda d: any(o.startswith("large_contents") for o in d.orphans),
        id="large-content-of-a-missing-message",
    ),
    pytest.param(
        "INSERT INTO index_pending VALUES (999999, '')",
        lambda d: "index_pending 999999" in d.orphans,
        id="pending-index-row-of-a-missing-message",
    ),
    pytest.param(
        "DELETE FROM search_index WHERE rowid = (SELECT MAX(rowid) FROM messages)",
        lambda d: any(o.startswith("unindexed message") for o in d.other),
        id="message-neither-indexed-nor-pending",
    ),
    pytest.param(
        "DELETE FROM context_items WHERE position = (SELECT MAX(position) FROM context_items)",
        lambda d: any(o.startswith("unreachable") for o in d.other) and not d.lost,
        id="message-out-of-the-active-context",
    ),
    pytest.param(
        "UPDATE messages SET seq = seq + 1000 WHERE seq = 3",
        lambda d: any(o.startswith("seq gap") for o in d.other),
        id="seq-gap",
    ),
]


@pytest.mark.parametrize(("sql", "found"), DAMAGE)
def test_the_verifier_reports_each_kind_of_damage(
    archive: tuple[Path, dict[str, str]], tmp_path: Path, sql: str, found: Callable[[Any], bool]
) -> None:
    damage = _damaged(archive, tmp_path, sql)
    assert found(damage), damage
    assert damage.integrity == []


def test_a_corrupt_file_fails_the_integrity_check(
    archive: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    copy = tmp_path / "corrupt.db"
    with sqlite3.connect(archive[0]) as db, sqlite3.connect(copy) as target:
        db.backup(target)
    data = bytearray(copy.read_bytes())
    page = 4096
    # Garbage over the middle pages: b-tree pages of the tables and indexes.
    middle = (len(data) // page // 2) * page
    data[middle : middle + 4 * page] = b"\xa5" * (4 * page)
    copy.write_bytes(bytes(data))
    damage = crash.verify_sqlite(str(copy), archive[1])
    assert damage.integrity, damage
