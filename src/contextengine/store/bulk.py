"""The bulk path shared by every store: ``import_messages`` and ``copy_messages``.

An agent appends one to three messages per turn (:meth:`Store.append_messages`:
one short transaction, the latency that matters). Importers, replays and
``contextengine archive migrate`` write thousands at once, where throughput
matters: :meth:`Store.import_messages` and :meth:`Store.copy_messages`. They
store exactly what ``append_messages`` stores for the same messages (same
identity keys, ids, seqs, token counts, index rows and context), but:

* the work is split in two threads: this module *prepares* chunks of
  :data:`CHUNK` messages (JSON, content hash, identity key, id, search text,
  segments, token count) in a producer thread while the store *writes* the
  previous chunk. The writer's database calls release the GIL (sqlite3's
  ``step``, psycopg's I/O), and so does tiktoken, so the two overlap on two
  cores (:func:`pipelined`);
* each chunk is one transaction, so a long import does not block other
  writers for its whole length, and memory stays bounded. A failure (an
  invalid message, a database error) stops the import: the chunks before it
  stay committed and importing again with the same ``start_seq`` (or none,
  which aligns by content like ``append_messages``) stores only what is missing.

Token counts stay exact: ``import_messages`` counts each message with the
store's counter (the tokenizer runs in the producer thread) unless the caller
passes ``token_counts``; ``copy_messages`` copies the counts of the archive it
reads.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from contextengine.errors import InvalidMessagesError, StoreError
from contextengine.store._common import (
    CONTEXT_CHARS,
    canonical_hash,
    message_id_for,
    message_search_text,
)
from contextengine.store.protocol import StoredMessage
from contextengine.store.segments import segment_text

__all__ = [
    "CHUNK",
    "IndexHook",
    "Prepared",
    "new_rows",
    "pipelined",
    "prepare_messages",
    "prepare_records",
]

#: Messages per chunk: one transaction each.
CHUNK = 20_000

T = TypeVar("T")


class Prepared(NamedTuple):
    """One message ready to write. ``seq``/``created_at`` are set for copies only."""

    key: str
    id: str
    role: str
    json: str
    tokens: int
    #: The searchable text, cut into index segments
    #: (:func:`~contextengine.store.segments.segment_text`).
    segments: list[str]
    seq: int | None = None
    created_at: float | None = None
    #: The ``ctx`` this message gets if the message before it in the batch is
    #: stored right before it (the writer checks), and the store's index data
    #: for the message computed with it (the ``index`` hook of the prepare functions).
    ctx: str = ""
    index: Any = None


def _encode(msg: Any, index: int) -> str:
    if not isinstance(msg, dict):
        raise InvalidMessagesError("a message must be a JSON object", index=index)
    try:
        return json.dumps(msg, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidMessagesError(f"not JSON-serialisable: {exc}", index=index) from None


IndexHook = Callable[[list[str], str], Any]


def prepare_messages(
    conversation_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    start: int,
    token_counts: Sequence[int] | None,
    count: Callable[[Mapping[str, Any]], int],
    chunk: int = CHUNK,
    index: IndexHook | None = None,
) -> Iterator[list[Prepared]]:
    """Chunks of ``messages`` (``messages[i]`` at position ``start + i``), ready to write.

    The identity rule is :func:`contextengine.store._common.identity_key`'s,
    inlined: a provider id needs no content hash. ``index(segments, ctx)``
    computes a store's own index data in this (the producer's) thread.
    """
    if token_counts is not None and len(token_counts) != len(messages):
        raise StoreError("token_counts must have one entry per message")
    previous = ""
    for lo, hi in _spans(len(messages), chunk):
        out: list[Prepared] = []
        for i in range(lo, hi):
            msg = messages[i]
            encoded = _encode(msg, i)
            provider_id = msg.get("id")
            if isinstance(provider_id, str) and provider_id:
                key = f"id:{provider_id}"
            else:
                key = f"h:{start + i}:{canonical_hash(msg)}"
            tokens = int(token_counts[i]) if token_counts is not None else int(count(msg))
            segments = segment_text(message_search_text(msg))
            ctx = previous[:CONTEXT_CHARS]
            out.append(
                Prepared(
                    key,
                    message_id_for(conversation_id, key),
                    str(msg.get("role", "")),
                    encoded,
                    tokens,
                    segments,
                    ctx=ctx,
                    index=index(segments, ctx) if index is not None else None,
                )
            )
            previous = segments[0]
        yield out


def prepare_records(
    records: Iterable[StoredMessage], *, chunk: int = CHUNK, index: IndexHook | None = None
) -> Iterator[list[Prepared]]:
    """Chunks of messages copied from another archive: ids, seqs, counts and times kept."""
    out: list[Prepared] = []
    previous = ""
    size = min(_FIRST_CHUNK, chunk)
    for n, record in enumerate(records):
        segments = segment_text(message_search_text(record.message))
        ctx = previous[:CONTEXT_CHARS]
        out.append(
            Prepared(
                record.identity_key,
                record.id,
                record.role,
                _encode(record.message, n),
                int(record.token_count),
                segments,
                int(record.seq),
                float(record.created_at),
                ctx,
                index(segments, ctx) if index is not None else None,
            )
        )
        previous = segments[0]
        if len(out) >= size:
            yield out
            out = []
            size = min(chunk, 2 * size)
    if out:
        yield out


#: The first chunk is small so the writer starts at once; each next one doubles, up to ``chunk``.
_FIRST_CHUNK = 1_000


def _spans(total: int, chunk: int) -> Iterator[tuple[int, int]]:
    lo, size = 0, min(_FIRST_CHUNK, chunk)
    while lo < total:
        yield lo, min(total, lo + size)
        lo += size
        size = min(chunk, 2 * size)


_DONE = object()


def new_rows(
    chunk: Iterable[Prepared],
    conversation_id: str,
    start: int,
    *,
    existing: set[str],
    seen: set[str],
) -> Iterator[tuple[Prepared, int]]:
    """The messages of ``chunk`` a store must write, each with its ``seq`` from ``start`` on.

    Called by each store's chunk writer. Left out: identities already stored
    (``existing``) or written earlier in this import (``seen``, which this
    adds provider-id identities to: ``h:`` keys hold positions, so a repeat of
    one is a new message). A copied message whose recorded ``seq`` is not where
    the history continues is an error, not a silent renumbering.
    """
    seq = start
    for p in chunk:
        if p.key in existing or p.key in seen:
            continue
        if p.key.startswith("id:"):
            seen.add(p.key)
        if p.seq is not None and p.seq != seq:
            raise StoreError(
                f"copy_messages: message {p.id} has seq {p.seq} but the history of"
                f" {conversation_id!r} continues at {seq}"
            )
        yield p, seq
        seq += 1


def pipelined(chunks: Iterator[T], *, depth: int = 2) -> Iterator[T]:
    """``chunks``, produced by a background thread up to ``depth`` chunks ahead of the consumer.

    An exception in the producer is raised in the consumer when it reaches
    that point; a consumer that stops early stops the producer.
    """
    handoff: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in chunks:
                while not stop.is_set():
                    try:
                        handoff.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            handoff.put(_DONE)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            handoff.put(exc)

    thread = threading.Thread(target=produce, name="contextengine-bulk", daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                handoff.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.05)
