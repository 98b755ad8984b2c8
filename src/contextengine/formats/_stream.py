"""Sessions read as they are iterated: :class:`SessionStream` and the streaming ``finish``.

:func:`contextengine.formats.load_session` builds every message of a file in
memory before anything can use the first one; a 200 MB Claude Code session is
then a gigabyte of dicts. A :class:`SessionStream` yields the same messages
one by one while it reads the file, so a consumer that keeps only what it
needs (the replay loop keeps the engine's view) runs in memory that does not
grow with the file.

The messages are exactly those of the list importer, in the same order, and
the metadata ends up equal to the list importer's once the stream is
exhausted. Two things a consumer must know:

* metadata fills in as the stream is read. Keys that describe the whole file
  (counts of skipped records, ``tool_messages_dropped``) are final only at
  the end; a recorded compaction appears in ``metadata["compactions"]``
  before the message at its ``index`` is yielded, so a consumer can act on
  it in order (the replay's recorded trace does, see
  :func:`contextengine.replay.compare_stream`);
* a stream is read once. Iterate it again by opening it again
  (:func:`contextengine.formats.stream_session`).

:func:`finish_stream` is the last step every streaming importer shares, the
streaming twin of :func:`contextengine.formats._session.finish`:
``sanitize_tool_pairs`` and ``validate_messages`` only ever look at one tool
group (an assistant message with tool calls and the ``tool`` messages right
after it) at a time, so holding one group back is enough to give the same
result, and the same error, as running them over the whole list.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError, InvalidMessagesError
from contextengine.formats._session import Session
from contextengine.messages import is_tool_call_message, sanitize_tool_pairs, validate_messages

__all__ = ["SessionStream", "finish_stream"]

Message = dict[str, Any]


class SessionStream:
    """One recorded conversation whose messages are read from the file as they are iterated.

    ``id``, ``source`` and ``format`` are those of the :class:`Session` the
    list importer returns; ``metadata`` is the same dict, filled in as the
    stream is read (see the module docstring). Iterating yields each message
    once; :attr:`consumed` counts those yielded so far; :meth:`to_session`
    reads what is left into a :class:`Session`.
    """

    def __init__(
        self,
        *,
        id: str,
        source: str,
        format: str,
        messages: Iterable[Message],
        metadata: dict[str, Any] | None = None,
        model_in_messages: bool = False,
    ) -> None:
        self.id = id
        self.source = source
        self.format = format
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}
        self._source = iter(messages)
        self._ahead: deque[Message] = deque()
        # True when metadata["model"] is learnt from the messages (Claude Code:
        # the first assistant message's model), so recorded_model() reads ahead.
        self._model_in_messages = model_in_messages
        self.consumed = 0

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        message = self._ahead.popleft() if self._ahead else next(self._source)
        self.consumed += 1
        return message

    def recorded_model(self) -> str | None:
        """The model the recording names, as ``metadata["model"]`` of the list importer.

        Replays choose their tokenizer from it before the first request. For
        formats that learn it from the messages, this reads ahead to the first
        assistant message that names one and keeps what it read for iteration
        (a handful of messages in any real session).
        """
        model = self.metadata.get("model")
        while self._model_in_messages and not model:
            try:
                self._ahead.append(next(self._source))
            except StopIteration:
                break
            model = self.metadata.get("model")
        return str(model) if model else None

    def to_session(self) -> Session:
        """The rest of the stream as a :class:`~contextengine.formats.Session` (reads it all)."""
        messages = list(self)
        return Session(
            id=self.id,
            source=self.source,
            format=self.format,
            messages=messages,
            metadata=self.metadata,
        )


def finish_stream(
    messages: Iterable[Message],
    *,
    path: Path,
    format: str,
    metadata: dict[str, Any],
    location: str = "",
    on_end: Callable[[], None] | None = None,
) -> Iterator[Message]:
    """Pair tool calls and validate, group by group, as the messages go by.

    Yields exactly what :func:`~contextengine.formats._session.finish` would
    put in ``Session.messages`` and sets ``metadata["tool_messages_dropped"]``
    when the input ends; an invalid message raises the same
    :class:`FormatError` (with its index in the output) when it is reached.
    ``on_end`` runs when the input is exhausted, before that count is set.
    """
    emitted = 0
    received = 0
    group: list[Message] = []

    def flush() -> list[Message]:
        nonlocal emitted
        if not group:
            return []
        paired = sanitize_tool_pairs(group)
        group.clear()
        try:
            validate_messages(paired)
        except InvalidMessagesError as exc:
            index = None if exc.index is None else exc.index + emitted
            problem = InvalidMessagesError(exc.problem, index=index)
            raise FormatError(
                str(path),
                location,
                f"messages that convert to valid OpenAI format ({format})",
                found=str(problem),
            ) from problem
        emitted += len(paired)
        return paired

    for message in messages:
        received += 1
        # A group is an assistant message with calls and the tool messages right
        # after it; anything else closes the group before it and stands alone.
        if group and (message.get("role") != "tool" or not is_tool_call_message(group[0])):
            yield from flush()
        group.append(message)
        if not is_tool_call_message(message) and message.get("role") != "tool":
            yield from flush()
    yield from flush()
    if on_end is not None:
        on_end()
    metadata["tool_messages_dropped"] = received - emitted
