"""Several proxy processes on one PostgreSQL archive: one request of a session at a time.

Each process keeps its own in-memory view of a session (a host per session
in :class:`~contextengine.serve.sessions.SessionCache`). Without more, a
session whose requests alternate between processes would be served from a
stale view, and two requests sent to two processes at once would interleave
their writes. :class:`Fleet` closes both gaps, for every request, after the
session's own lock in this process
(:meth:`~contextengine.relay.conversation.Conversation.turn`):

1. **The turn lock.** It takes the session's turn lock in the store
   (:meth:`~contextengine.store.PostgresStore.try_turn_lock`: a PostgreSQL
   advisory lock; all of a process's on one connection outside the pool,
   so 50 sessions in flight hold no pooled connection). Taking it never
   waits in the server: when another process holds it, the request sleeps
   on the event loop (5 ms, doubling to 100 ms) and tries again, so a
   session busy elsewhere costs nothing but its own latency. Every store
   call runs in a worker thread: the event loop never blocks on psycopg.
2. **The stamp.** Under the lock it reads the session's stamp
   (:meth:`~contextengine.store.StoreBase.session_stamp`: the conversation's
   message count and ``updated_at``) and compares it with the one this
   process noted when it last released the session. When they differ,
   another process served the session since: the host is rebuilt from the
   archive (a new host, ``start_session``: lcm resumes its context as a
   fresh process would; the compressor starts from the client's history,
   which the client sends whole) before the request is handled.
3. On leaving (also when the request failed or its client went away), it
   notes the stamp and releases the lock.

A lock that cannot be had within ``wait_s`` (a holder stuck on a slow
upstream), or a store error, fails the request open: it goes upstream as the
client sent it, counted in the metrics, and the session is not touched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from contextengine.async_host import AsyncContextHost
from contextengine.errors import StoreError
from contextengine.relay.conversation import Conversation

__all__ = ["Fleet", "FleetLockTimeout"]

logger = logging.getLogger("contextengine.serve")

#: A stamp no archive has: the next turn rebuilds the session (its stamp could not be read).
UNKNOWN = object()

#: First and longest pause between two attempts at a session's turn lock.
POLL_S = 0.005
MAX_POLL_S = 0.1


class FleetLockTimeout(StoreError):
    """A session's turn lock stayed held by another process longer than the proxy waits."""


class Fleet:
    """The proxy's cross-process turn lock and view refresh (see the module docstring).

    ``store`` is the archive every process shares (its ``try_turn_lock``,
    ``release_turn_lock`` and ``session_stamp``); ``host_factory`` builds
    the host a rebuilt session gets; ``wait_s`` bounds the wait for a lock.
    Built by the proxy when its store is shared across processes; entered by
    :meth:`Conversation.turn` for every request.
    """

    def __init__(
        self,
        store: Any,
        host_factory: Callable[[], AsyncContextHost],
        *,
        wait_s: float = 600.0,
        on_close: Callable[[AsyncContextHost], None] | None = None,
    ) -> None:
        self._store = store
        self._factory = host_factory
        self.wait_s = wait_s
        self._on_close = on_close
        #: Sessions rebuilt from the archive because another process served them.
        self.resumed = 0
        #: Requests that found their session's lock held by another process.
        self.contended = 0

    async def stamp(self, key: str) -> object:
        """The session's stamp in the archive now (None: no conversation yet)."""
        return await asyncio.to_thread(self._store.session_stamp, key)

    async def acquire(self, key: str, *, wait_s: float | None = None) -> bool:
        """Take ``key``'s turn lock, polling while another process holds it; False on timeout."""
        limit = self.wait_s if wait_s is None else wait_s
        deadline = time.monotonic() + limit
        pause = POLL_S
        waited = False
        while not await asyncio.to_thread(self._store.try_turn_lock, key):
            if time.monotonic() >= deadline:
                return False
            if not waited:
                waited = True
                self.contended += 1
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_POLL_S)
        return True

    async def release(self, key: str) -> None:
        try:
            await asyncio.to_thread(self._store.release_turn_lock, key)
        except StoreError as exc:
            # The lock went with its connection (PostgreSQL released it): nothing is held.
            logger.warning("releasing a session's turn lock failed: %s", type(exc).__name__)

    async def enter(self, conv: Conversation) -> None:
        """Lock the session fleet-wide; rebuild its host when another process served it."""
        if not await self.acquire(conv.key):
            raise FleetLockTimeout(
                f"a session stayed locked by another process for {self.wait_s:g} s"
            )
        try:
            now = await self.stamp(conv.key)
            if self.stale(conv.stamp, now):
                await self._rebuild(conv)
            conv.stamp = now
        except BaseException:
            await self.release(conv.key)
            raise

    async def leave(self, conv: Conversation) -> None:
        """Note what the session holds after this turn; release its lock."""
        try:
            conv.stamp = await self.stamp(conv.key)
        except StoreError as exc:
            conv.stamp = UNKNOWN
            logger.warning("reading a session's stamp failed: %s", type(exc).__name__)
        finally:
            await self.release(conv.key)

    @staticmethod
    def stale(seen: object, now: object) -> bool:
        """Whether the archive changed since this process saw ``seen``.

        A conversation with no message (none yet, or just created by this
        process's own ``start_session``) holds nothing a view could miss.
        """
        if now == seen or now is None:
            return False
        return not (isinstance(now, tuple) and now[0] == 0)

    async def _rebuild(self, conv: Conversation) -> None:
        """Replace the session's host by one resumed from the archive (the old one is dropped).

        The old host is not ended: ``end_session`` would store its stale view.
        """
        host = self._factory()
        await host.start_session(conv.key)
        old, self.resumed = conv.host, self.resumed + 1
        conv.adopt(host)
        if self._on_close is not None:
            self._on_close(old)
