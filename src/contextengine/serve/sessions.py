"""The proxy's sessions: which conversation a request belongs to, and the live ones in memory.

The key, first that applies (:func:`session_key`):

1. the ``X-Context-Session`` header;
2. the request's own conversation key: OpenAI ``user``, Anthropic ``metadata.user_id``;
3. a digest of the system prompt and the first user message (a client that names
   nothing gets one session per conversation it starts).

Keys are namespaced by the client's credential (a digest of its
``Authorization`` or ``x-api-key`` header, never the credential itself), so a
client cannot reach another's session by guessing a key. The stored session id
is ``serve-<credential digest>-<key digest>``: no key or credential appears in
the archive or in logs.

:class:`SessionCache` keeps one :class:`~contextengine.AsyncContextHost` per
live session, at most ``max_sessions``; the least recently used idle one is
ended (``end_session``: an archive engine stores what is left) when a new one
needs room. A session ended that way resumes from the archive when it comes
back (lcm), or starts over from the client's history (the compressor).

With a :class:`~contextengine.serve.fleet.Fleet` (a store shared by several
processes), every conversation enters the fleet's turn lock for each request,
and a session ended to make room is ended only when no other process served
it since (else its engine is just closed: the other process holds the newer
view, and ending would store a stale one).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from contextengine.async_host import AsyncContextHost
from contextengine.relay.conversation import Conversation
from contextengine.relay.wire import Message

if TYPE_CHECKING:
    from contextengine.serve.fleet import Fleet

__all__ = ["SessionCache", "credential_digest", "session_key"]

logger = logging.getLogger("contextengine.serve")

SESSION_HEADER = "x-context-session"


def _digest(text: str, size: int = 16) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def credential_digest(headers: Mapping[str, str]) -> str:
    """A digest of the client's credential (``Authorization``, else ``x-api-key``; "" if none)."""
    credential = headers.get("authorization") or headers.get("x-api-key") or ""
    return _digest("credential\0" + credential, 8)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def session_key(headers: Mapping[str, str], hint: str | None, messages: Sequence[Message]) -> str:
    """The stored session id of a request (see the module docstring)."""
    key = headers.get(SESSION_HEADER, "").strip()
    source = "header"
    if not key and hint:
        key, source = hint, "user"
    if not key:
        system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
        user = next((m for m in messages if m.get("role") == "user"), None)
        key = (
            _text(system.get("content") if system else "")
            + "\0"
            + _text(user.get("content") if user else "")
        )
        source = "hash"
    return f"serve-{credential_digest(headers)}-{_digest(source + chr(0) + key)}"


class SessionCache:
    """Live conversations by session id, LRU-bounded; eviction ends the session.

    ``host_factory`` builds the host of a new session (its engine, model and
    window); the cache starts the session on it. Called by the proxy for every
    request, from the event loop.
    """

    def __init__(
        self,
        host_factory: Callable[[], AsyncContextHost],
        *,
        max_sessions: int = 256,
        fleet: Fleet | None = None,
    ) -> None:
        self._factory = host_factory
        self.fleet = fleet
        self.max_sessions = max(1, int(max_sessions))
        self._live: OrderedDict[str, Conversation] = OrderedDict()
        self._guard = asyncio.Lock()
        #: Sessions ended to make room since start.
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._live)

    async def get(self, key: str) -> Conversation:
        """The live conversation for ``key``, started (resumed from the archive) when new.

        Raises whatever building or starting the host raised: the proxy then
        fails open for this request.
        """
        async with self._guard:
            conv = self._live.get(key)
            if conv is not None:
                self._live.move_to_end(key)
                return conv
            # The stamp before the host loads: a write in between shows as a change.
            stamp = await self.fleet.stamp(key) if self.fleet is not None else None
            host = self._factory()
            await host.start_session(key)
            conv = Conversation(host, key)
            conv.shared, conv.stamp = self.fleet, stamp
            self._live[key] = conv
            await self._evict()
            return conv

    async def _evict(self) -> None:
        while len(self._live) > self.max_sessions:
            victim = next((k for k, c in self._live.items() if not c.lock.locked()), None)
            if victim is None:
                return  # every session is busy: over the bound until one finishes
            conv = self._live.pop(victim)
            await self._end(conv)
            self.evicted += 1

    async def _end(self, conv: Conversation) -> None:
        fleet = self.fleet
        if fleet is None:
            await self._end_session(conv)
        else:
            # Never wait here (the cache's guard is held): a session busy elsewhere is just closed.
            try:
                held = await fleet.acquire(conv.key, wait_s=0)
            except Exception as exc:
                held = False
                logger.warning("locking a session to end it failed: %s", type(exc).__name__)
            if held:
                try:
                    if not fleet.stale(conv.stamp, await fleet.stamp(conv.key)):
                        await self._end_session(conv)
                except Exception as exc:
                    logger.warning("ending session failed: %s", type(exc).__name__)
                finally:
                    await fleet.release(conv.key)
        close_engine(conv.host)

    @staticmethod
    async def _end_session(conv: Conversation) -> None:
        try:
            await conv.host.end_session(conv.history)
        except Exception as exc:
            logger.warning("ending session failed: %s", type(exc).__name__)

    async def close(self) -> None:
        """End every live session (the server is stopping)."""
        async with self._guard:
            while self._live:
                _key, conv = self._live.popitem(last=False)
                await self._end(conv)


def close_engine(host: AsyncContextHost) -> None:
    """Close a dropped host's engine when it has a ``close`` (never raises: logged)."""
    close = getattr(host.engine, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:
            logger.warning("closing an engine failed: %s", type(exc).__name__)
