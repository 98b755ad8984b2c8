"""One conversation the relay serves: its host, and how the client's history maps onto it.

A client sends its whole history with every request. The relay keeps the
session's own history (what the host holds, compacted when the engine
compacted it, with the engine-tool rounds the client never saw) and adds to
it only what is new in the client's, recognised by position: the client's
first ``seen`` messages are the ones accounted for last time, checked by the
digest of the last of them.

The answer the relay returned last (the assistant message as the model gave
it, engine calls included, and the engine's results) was added to the
session's history already. In the client's next request the message at that
position is the client's copy of it, and stands for it: it is skipped, not
added again (so engine calls removed from what the client saw are still
paired with their results upstream). A client that leaves the answer out (it
retried the same request) takes it back out of the session's history. A
client whose history does not start with what was accounted for (it edited
or compacted its own history, or it is a first request) is taken as sent: its
history replaces the session's.

A conversation served by several processes (a fleet on one archive) has a
:class:`SharedTurn` (:attr:`Conversation.shared`) that :meth:`Conversation.turn`
enters after the conversation's own lock: the owner's cross-process lock,
which may rebuild the host from the archive (:meth:`Conversation.adopt`)
when another process served the session since.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from contextengine.async_host import AsyncContextHost
from contextengine.relay.wire import Message, fingerprint
from contextengine.tokens import count_message_tokens

__all__ = ["Conversation", "SharedTurn"]


class SharedTurn(Protocol):
    """A lock beyond this process, entered for each request after the conversation's own.

    Set by the conversation's owner (the proxy's fleet, :mod:`contextengine.serve.fleet`);
    :meth:`Conversation.turn` calls :meth:`enter` before the request and
    :meth:`leave` after it (also when the request failed or its client went away).
    """

    async def enter(self, conv: Conversation) -> None:
        """Wait for the session's lock; make the host current. Raises: the request fails open."""
        ...

    async def leave(self, conv: Conversation) -> None:
        """Note what the session holds now and release its lock."""
        ...


class Conversation:
    """A session's host and history; one request at a time (:attr:`lock`).

    Built by whoever owns sessions (the proxy's cache, a wrapped client);
    ``start_session`` on the host is the builder's job.
    """

    def __init__(self, host: AsyncContextHost, key: str) -> None:
        self.host = host
        self.key = key
        #: Held for a whole request, streaming included: one request at a time per session.
        self.lock = asyncio.Lock()
        #: The owner's cross-process lock, entered after :attr:`lock` (None: this process only).
        self.shared: SharedTurn | None = None
        #: The owner's note of what the archive held after this process's last turn.
        self.stamp: object = None
        self._seen = 0
        self._last_seen: str | None = None
        self._answer: list[Message] = []
        self._client_tokens = 0

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[BaseException | None]:
        """Hold the session for one request: :attr:`lock`, then :attr:`shared` when set.

        Yields None when held, or the exception that refused the shared lock
        (the request then fails open: it goes upstream as the client sent it).
        The shared lock is left even when the request is cancelled.
        """
        async with self.lock:
            shared = self.shared
            if shared is None:
                yield None
                return
            try:
                await shared.enter(self)
            except Exception as exc:
                yield exc
                return
            try:
                yield None
            finally:
                # Shielded: a client that went away must not leave the session locked.
                await asyncio.shield(asyncio.ensure_future(shared.leave(self)))

    def adopt(self, host: AsyncContextHost) -> None:
        """Serve on ``host`` (rebuilt from the archive) from now on; account for nothing sent.

        Called under :meth:`turn` by the owner's shared lock. The client's
        next history is taken as sent, as a fresh process would take it.
        """
        self.host = host
        self.forget_client()

    @property
    def history(self) -> list[Message]:
        """The session's history: the host's (compacted when the engine compacted)."""
        return self.host.history

    def ingest(self, messages: Sequence[Message], model: str | None) -> list[Message]:
        """The session's history with what is new in the client's ``messages`` appended.

        Called once per request, under :attr:`lock`, before the host prepares
        it. Returns a new list; the host adopts it in ``prepare_request``.
        """
        seen = self._seen
        history = list(self.host.history)
        if seen and len(messages) >= seen and fingerprint(messages[seen - 1]) == self._last_seen:
            new = list(messages[seen:])
            self._client_tokens += count_message_tokens(new, model) if new else 0
            if self._answer:
                if new and new[0].get("role") == "assistant":
                    new = new[1:]  # the client's copy of the answer the relay recorded
                else:
                    history = self._without_answer(history)
        else:
            new = []
            history = list(messages)
            self.host.forget_cache()
            self._client_tokens = count_message_tokens(messages, model) if messages else 0
        self._seen = len(messages)
        self._last_seen = fingerprint(messages[-1]) if messages else None
        self._answer = []
        return history + new

    @property
    def client_tokens(self) -> int:
        """Prompt tokens of the client's history as of the last :meth:`ingest`."""
        return self._client_tokens

    def _without_answer(self, history: list[Message]) -> list[Message]:
        count = len(self._answer)
        tail = history[-count:] if count <= len(history) else []
        if tail and all(a is b for a, b in zip(tail, self._answer, strict=True)):
            return history[:-count]
        return history  # a compaction took it in since: it stays, summarised

    def answered(self, answer: list[Message]) -> None:
        """Record the answer just added to the history (the assistant message, engine results)."""
        self._answer = list(answer)

    def forget_client(self) -> None:
        """Account for nothing the client sent: its next request is adopted whole (fail-open)."""
        self._seen = 0
        self._last_seen = None
        self._answer = []
