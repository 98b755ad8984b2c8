"""Worker processes of the PostgreSQL concurrency tests (started with multiprocessing "spawn").

They live in their own module, importable by name from a spawned child,
and take only picklable arguments. Each opens its own ``PostgresStore`` (its
own pool), as an agent on another host would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

__all__ = ["StallingSources", "stall_mid_compaction", "write_and_search"]


def write_and_search(
    url: str, schema: str, session_key: str, worker: int, batches: int, shared: bool, barrier: Any
) -> list[str]:
    """Append ``batches`` batches to ``session_key`` while searching; return the acknowledged ids.

    A message is acknowledged once the ``append_messages`` call that carried it
    returned. With ``shared``, every batch is followed by a batch that the
    other worker on the same conversation also appends (same provider ids):
    it must be stored once.
    """
    from contextengine.store.postgres import PostgresStore

    acked: list[str] = []
    barrier.wait()  # all open (and so migrate) the fresh archive at the same moment
    with PostgresStore(url, schema=schema, max_size=2) as store:
        cid = store.open_conversation(session_key)
        for b in range(batches):
            mine = [
                {
                    "role": "user",
                    "content": f"worker {worker} batch {b} item {i} lorem ipsum",
                    "id": f"w{worker}-b{b}-i{i}",
                }
                for i in range(4)
            ]
            batch_list = [mine]
            if shared:
                batch_list.append(
                    [
                        {
                            "role": "assistant",
                            "content": f"common batch {b} item {i}",
                            "id": f"common-b{b}-i{i}",
                        }
                        for i in range(3)
                    ]
                )
            for batch in batch_list:
                store.append_messages(cid, batch, token_counts=[1] * len(batch))
                acked.extend(str(m["id"]) for m in batch)
            if b % 3 == 0:
                store.search(cid, f"worker {worker} lorem", limit=5)
                store.search(cid, r"batch \d+ item [0-3]", mode="regex", limit=5)
    return acked


class StallingSources(Sequence[str]):
    """Source ids that, once iterated, signal through a file and then hang (to be killed)."""

    def __init__(self, signal_path: str) -> None:
        self.signal_path = signal_path

    def __iter__(self) -> Iterator[str]:
        Path(self.signal_path).write_text("inside the transaction")
        time.sleep(600)
        return iter(())

    def __len__(self) -> int:
        return 0

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        raise IndexError(index)


def stall_mid_compaction(
    url: str, schema: str, conversation_id: str, message_ids: list[str], signal_path: str
) -> None:
    """Start a two-summary compaction and hang after the first summary row is written."""
    from contextengine.store.postgres import PostgresStore
    from contextengine.store.protocol import ContextRef, NewSummary

    def summary(sources: Sequence[str]) -> NewSummary:
        return NewSummary(
            kind="leaf",
            depth=0,
            content="half-written summary",
            token_count=3,
            source_ids=sources,
            seq_start=0,
            seq_end=1,
            time_start=0.0,
            time_end=0.0,
            descendant_count=1,
        )

    with PostgresStore(url, schema=schema, max_size=1) as store:
        store.commit_compaction(
            conversation_id,
            [summary(message_ids[:1]), summary(StallingSources(signal_path))],
            [ContextRef(kind="summary", id="new:0")],
        )
