"""The SQLite per-turn path indexes in batches: nothing stored is ever missing from a search."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from contextengine.store import SQLiteStore
from contextengine.store.sqlite import PENDING_MESSAGES


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {i} about the kiwi{i} ledger"},
        {"role": "assistant", "content": f"answer {i}: balanced"},
    ]


def test_a_turn_is_stored_without_touching_the_index_until_enough_wait(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        cid = store.open_conversation("s")
        stored = 0
        while stored + 2 < PENDING_MESSAGES:
            store.append_messages(cid, turn(stored // 2), start_seq=stored)
            stored += 2
        stats = store.stats()
        assert (stats["index_rows"], stats["index_pending"]) == (0, stored)
        store.append_messages(cid, turn(stored // 2), start_seq=stored)
        stats = store.stats()
        assert stats["index_pending"] == 0 and stats["index_rows"] == stored + 2


def test_a_search_sees_every_message_stored_before_it(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        cid = store.open_conversation("s")
        store.append_messages(cid, turn(1), start_seq=0)
        hits = store.search(cid, "kiwi1").results
        assert hits[0].seq == 0 and store.stats()["index_pending"] == 0


def test_rows_left_pending_by_a_process_that_died_are_indexed_by_the_next(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    writer = SQLiteStore(path)
    cid = writer.open_conversation("s")
    writer.append_messages(cid, turn(7), start_seq=0)
    # A process killed now never closes its store: its pending rows are in the file.
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM index_pending").fetchone()[0] == 2
    db.close()
    with SQLiteStore(path) as reader:
        assert reader.search(cid, "kiwi7").results[0].seq == 0
    writer._db.close()  # the dead process's connection, without its closing flush


def test_the_context_a_message_is_indexed_beside_is_the_message_before_it(
    tmp_path: Path,
) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        cid = store.open_conversation("s")
        store.append_messages(cid, turn(3), start_seq=0)
        # The answer does not contain "kiwi3"; it is found through its question.
        seqs = [h.seq for h in store.search(cid, "kiwi3").results]
        assert seqs[0] == 0 and 1 in seqs


def test_deleting_a_conversation_drops_its_pending_rows(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        gone = store.open_conversation("gone")
        kept = store.open_conversation("kept")
        store.append_messages(gone, turn(1), start_seq=0)
        store.append_messages(kept, turn(2), start_seq=0)
        store.delete_conversation(gone)
        assert store.stats()["index_pending"] == 2
        assert store.search(kept, "kiwi2").results
