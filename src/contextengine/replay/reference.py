"""The two reference traces a replay is compared with, built one message at a time.

* :class:`BaselineBuilder` / :func:`baseline_trace`: no context management,
  every request the whole history, capped at the context length (a provider
  refuses beyond it; those requests are flagged ``overflow``);
* :class:`RecordedBuilder` / :func:`recorded_trace`: for a Claude Code
  session that recorded its own compaction, the requests Claude Code actually
  sent: the whole history until a boundary, then its summary and what followed.

Both are fed the session's messages in order (:meth:`feed`) and keep running
sums instead of the history, so a 200 MB session costs them the same per
message as a small one. The baseline's request is always the previous one
plus what came since, so its cached prefix is the previous request's tokens
without looking at a message again. The recorded trace keeps one digest and
one token count per message since the last recorded compaction (about 130
bytes each), which it needs once per compaction to compare the first request
after it with the one before.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from contextengine.formats import Session
from contextengine.replay.trace import DEFAULT_MODEL, RequestRecord, Trace
from contextengine.tokens import REPLY_PRIMING_TOKENS, message_tokens

__all__ = [
    "BaselineBuilder",
    "RecordedBuilder",
    "baseline_trace",
    "is_boundary",
    "recorded_trace",
]

Message = dict[str, Any]


def _is_reply(index: int, message: Mapping[str, Any]) -> bool:
    """A reply that follows at least one message: the moment a request is sent."""
    return index > 0 and message.get("role") == "assistant"


class BaselineBuilder:
    """:func:`baseline_trace`, one message at a time; :attr:`trace` is the result so far."""

    def __init__(self, *, context_length: int, model: str = DEFAULT_MODEL) -> None:
        self.context_length = int(context_length)
        self.model = model
        self.trace = Trace("baseline")
        self._index = 0
        self._running = 0  # tokens of every message so far
        self._previous = 0  # tokens of the previous request's messages

    def feed(self, message: Mapping[str, Any]) -> None:
        """Account for the next message of the session."""
        index = self._index
        tokens = message_tokens(message, self.model)
        if _is_reply(index, message):
            full = self._running + REPLY_PRIMING_TOKENS
            prompt = min(full, self.context_length)
            self.trace.requests.append(
                RequestRecord(
                    index=index,
                    prompt_tokens=prompt,
                    # The previous request is a prefix of this one.
                    cached_tokens=min(self._previous, prompt),
                    completion_tokens=tokens,
                    messages_sent=index,
                    overflow=full > self.context_length,
                )
            )
            self._previous = self._running
        self._running += tokens
        self._index += 1


def baseline_trace(
    messages: Iterable[Message], *, context_length: int, model: str = DEFAULT_MODEL
) -> Trace:
    """Every request the whole history, capped at ``context_length`` (flagged ``overflow``)."""
    builder = BaselineBuilder(context_length=context_length, model=model)
    for message in messages:
        builder.feed(message)
    return builder.trace


def _digest(message: Mapping[str, Any]) -> int:
    """:func:`~contextengine.replay.cost.message_fingerprint` in 8 bytes, for an array."""
    wire = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.blake2b(wire.encode(), digest_size=8).digest(), "little")


def _prefix_tokens(previous: Sequence[int], current: Sequence[int], tokens: Sequence[int]) -> int:
    """:func:`~contextengine.replay.cost.cached_prefix_tokens` over 8-byte digests."""
    same = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        same += 1
    return sum(tokens[:same])


def is_boundary(boundary: Any) -> bool:
    """A recorded compaction a trace can use: an int ``index`` and a non-empty ``summary``."""
    return (
        isinstance(boundary, Mapping)
        and isinstance(boundary.get("index"), int)
        and bool(boundary.get("summary"))
    )


class RecordedBuilder:
    """:func:`recorded_trace`, one message at a time.

    ``boundaries`` returns the recorded compactions known so far, in index
    order (``metadata["compactions"]`` of a Claude Code session, or of a
    :class:`~contextengine.formats.SessionStream`, where each appears before
    the message at its index). :attr:`trace` is None until a valid one has
    been seen, as :func:`recorded_trace` returns None for a session without.
    """

    def __init__(
        self, boundaries: Callable[[], Sequence[Any]], *, model: str = DEFAULT_MODEL
    ) -> None:
        self.model = model
        self._source = boundaries
        self._read = 0  # entries of the source looked at
        self._boundaries: list[Mapping[str, Any]] = []
        self._trace = Trace("recorded")
        self._index = 0
        self._current = -1  # the latest boundary applied
        self._summary: tuple[int, int] | None = None  # its message's digest and tokens
        # Digest and tokens of each message from _start on: the current segment.
        self._start = 0
        self._digests = array("Q")
        self._tokens = array("q")
        self._segment_tokens = 0
        # The previous request: how many messages it sent and their tokens.
        self._previous_len = 0
        self._previous_tokens = 0

    @property
    def trace(self) -> Trace | None:
        """The recorded trace so far; None while no recorded compaction has been seen."""
        return self._trace if self._boundaries else None

    def _refresh(self) -> None:
        source = self._source()
        while self._read < len(source):
            entry = source[self._read]
            self._read += 1
            if is_boundary(entry):
                self._boundaries.append(entry)

    def feed(self, message: Mapping[str, Any]) -> None:
        """Account for the next message of the session."""
        self._refresh()
        index = self._index
        tokens = message_tokens(message, self.model)
        if _is_reply(index, message):
            self._request(index, tokens)
        self._digests.append(_digest(message))
        self._tokens.append(tokens)
        self._segment_tokens += tokens
        self._index += 1

    def _request(self, index: int, completion: int) -> None:
        boundaries = self._boundaries
        latest = self._current
        while latest + 1 < len(boundaries) and int(boundaries[latest + 1]["index"]) <= index:
            latest += 1
        phases: tuple[str, ...] = ()
        if latest == self._current:
            # The same segment: this request extends the previous one.
            cached = self._previous_tokens
        else:
            phases = tuple(
                str(b.get("trigger") or "auto") for b in boundaries[self._current + 1 : latest + 1]
            )
            cached = self._switch(boundaries[latest])
            self._current = latest
        head = 1 if self._summary is not None else 0
        sent = head + len(self._digests)
        body = self._segment_tokens + (self._summary[1] if self._summary is not None else 0)
        prompt = body + REPLY_PRIMING_TOKENS
        self._trace.requests.append(
            RequestRecord(
                index=index,
                prompt_tokens=prompt,
                cached_tokens=min(cached, prompt) if self._previous_len else 0,
                completion_tokens=completion,
                messages_sent=sent,
                compactions=phases,
                summarizer_calls=len(phases),
            )
        )
        self._previous_len = sent
        self._previous_tokens = body

    def _switch(self, boundary: Mapping[str, Any]) -> int:
        """Start the segment at ``boundary``; the cached tokens of its first request."""
        start = int(boundary["index"])
        summary = {"role": "user", "content": str(boundary["summary"])}
        new_head = (_digest(summary), message_tokens(summary, self.model))
        # The previous request, as digests: its head, then the segment up to its end.
        previous: list[int] = []
        if self._previous_len:
            if self._summary is not None:
                previous = [self._summary[0], *self._digests[: self._previous_len - 1]]
            else:
                previous = list(self._digests[: self._previous_len])
        drop = max(0, start - self._start)
        current = [new_head[0], *self._digests[drop:]]
        tokens = [new_head[1], *self._tokens[drop:]]
        cached = _prefix_tokens(previous, current, tokens)
        self._start += drop
        self._segment_tokens -= sum(self._tokens[:drop])
        del self._digests[:drop], self._tokens[:drop]
        self._summary = new_head
        return cached


def recorded_trace(session: Session, *, model: str = DEFAULT_MODEL) -> Trace | None:
    """The requests Claude Code sent around its own recorded compactions; None without one.

    Reads ``metadata["compactions"]`` of the ``claude-code`` importer: before
    the first boundary the request is the whole history; after a boundary at
    ``index`` it is the summary (as a user message) and the messages from
    ``index`` on. The summariser call itself is counted, not priced.
    """
    boundaries = sorted(
        (c for c in session.metadata.get("compactions") or [] if is_boundary(c)),
        key=lambda c: int(c["index"]),
    )
    if not boundaries:
        return None
    builder = RecordedBuilder(lambda: boundaries, model=model)
    for message in session.messages:
        builder.feed(message)
    return builder.trace
