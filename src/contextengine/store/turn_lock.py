"""The turn lock: one request (a whole turn) at a time per session, across whoever shares a store.

A host that serves one session from several workers (``contextengine serve``
processes behind a load balancer) takes the session's turn lock for each
request, from reading what is new to recording the answer, so the requests of
one session never interleave. The lock is the store's because the store is
what the workers share:

* :class:`~contextengine.store.PostgresStore` holds a PostgreSQL session
  advisory lock per locked session, all of a process's on **one** dedicated
  connection (not a pooled one: a turn lasts a whole upstream call, and 50
  sessions each holding a pooled connection would starve the pool). Taking it
  never waits in the server (``pg_try_advisory_lock``): a caller that is
  refused waits on its side and tries again (:meth:`TurnLock.turn_lock`, or
  the proxy's asynchronous loop), so a held lock costs no connection and no
  server-side waiter. A process that dies releases its locks with its
  connection.
* :class:`~contextengine.store.SQLiteStore` (this module's
  :class:`TurnLock`): a SQLite archive belongs to one process, so the lock is
  the store object's own (a set of held keys under a mutex): it serialises
  the turns of that process and nothing else. A fleet of processes needs
  PostgreSQL.

Either way the lock is not re-entrant: a second :meth:`TurnLock.try_turn_lock`
of a held key is refused, from the same thread or another.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from contextengine.errors import StoreError

__all__ = ["TurnLock"]

#: First and longest pause between two attempts of :meth:`TurnLock.turn_lock`.
POLL_S = 0.005
MAX_POLL_S = 0.1

_REGISTRY_GUARD = threading.Lock()


class TurnLock:
    """The in-process turn lock (a store's default); see the module docstring."""

    #: Whether the lock serialises several processes (True for PostgreSQL only).
    shared_across_processes: ClassVar[bool] = False

    def _held_turns(self) -> tuple[threading.Lock, set[str]]:
        # Created on first use, so the stores' constructors need not know about it.
        with _REGISTRY_GUARD:
            state = self.__dict__.get("_turn_state")
            if state is None:
                state = (threading.Lock(), set())
                self.__dict__["_turn_state"] = state
            return state

    def try_turn_lock(self, session_key: str) -> bool:
        """Take ``session_key``'s turn lock if nobody holds it; True when taken. Never waits."""
        mutex, held = self._held_turns()
        with mutex:
            if session_key in held:
                return False
            held.add(session_key)
            return True

    def release_turn_lock(self, session_key: str) -> None:
        """Release a turn lock :meth:`try_turn_lock` took (a key not held: nothing happens)."""
        mutex, held = self._held_turns()
        with mutex:
            held.discard(session_key)

    @contextmanager
    def turn_lock(self, session_key: str, *, timeout_s: float | None = None) -> Iterator[None]:
        """Hold ``session_key``'s turn lock for the block, waiting for it (blocking the thread).

        Tries every few milliseconds (backing off to 0.1 s) until it is free;
        raises :class:`~contextengine.errors.StoreError` after ``timeout_s``.
        An asynchronous caller runs :meth:`try_turn_lock` in a thread and
        sleeps on its event loop instead.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = POLL_S
        while not self.try_turn_lock(session_key):
            if deadline is not None and time.monotonic() >= deadline:
                raise StoreError(f"turn lock of a session still held after {timeout_s:g} s")
            time.sleep(pause)
            pause = min(pause * 2, MAX_POLL_S)
        try:
            yield
        finally:
            self.release_turn_lock(session_key)
