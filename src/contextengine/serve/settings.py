"""What ``contextengine serve`` runs with, and the hosts it builds for new sessions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contextengine.async_host import AsyncContextHost
from contextengine.registry import load_engine
from contextengine.serve.metrics import Metrics
from contextengine.store import open_store

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ServeSettings",
    "build_host_factory",
    "shared_store",
]

logger = logging.getLogger("contextengine.serve")

DEFAULT_HOST = "127.0.0.1"
#: Seconds an idle client connection is kept open. Longer than clients' own pool
#: expiry (httpx and the OpenAI and Anthropic SDKs: 5 s), so the client always
#: closes first: with uvicorn's default of 5 s the two race, and a request sent
#: on a connection the server is closing that instant fails with a read error
#: (seen: 1-2 in 2,000 requests at 50 concurrent sessions).
KEEP_ALIVE_S = 75
DEFAULT_PORT = 8787


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """The proxy's settings (``contextengine serve`` resolves them from flags and config).

    ``upstream`` is the upstream's base URL, with or without its ``/v1``.
    ``store`` is the archive (a path, ``:memory:`` or a ``postgresql://`` URL;
    empty: the default archive file for lcm, none for the compressor).
    ``api_key``, when set, is the key clients must present (``Authorization:
    Bearer`` or ``x-api-key``); ``upstream_api_key``, when set, is what the
    proxy sends upstream instead of the client's credential.
    """

    upstream: str
    engine: str = "compressor"
    context_length: int = 128_000
    store: str = ""
    api_key: str = ""
    upstream_api_key: str = ""
    max_sessions: int = 256
    max_engine_rounds: int = 4
    upstream_timeout: float = 600.0
    engine_options: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # keys never end up in a log line or a traceback
        return (
            f"ServeSettings(upstream={self.upstream!r}, engine={self.engine!r},"
            f" context_length={self.context_length}, store={'set' if self.store else 'default'},"
            f" api_key={'set' if self.api_key else 'none'})"
        )


def build_host_factory(
    settings: ServeSettings, metrics: Metrics
) -> tuple[Callable[[], AsyncContextHost], Callable[[], None] | None]:
    """A factory of hosts for new sessions, and the closer of the archive they share.

    The archive is opened once and shared by every session's engine (each
    engine gets the ``Store`` object, which it does not own): one SQLite
    connection, or one PostgreSQL pool, per proxy process.
    """
    factory, store = shared_store(settings, metrics)
    return factory, store.close if store is not None else None


def shared_store(
    settings: ServeSettings, metrics: Metrics
) -> tuple[Callable[[], AsyncContextHost], Any]:
    """:func:`build_host_factory`, with the archive itself (None without one).

    The proxy closes the store when it stops, and takes its turn lock for
    every request when the store is shared across processes
    (``shared_across_processes``: PostgreSQL).
    """
    options: dict[str, Any] = dict(settings.engine_options)
    store: Any = None
    if settings.engine == "lcm" or settings.store:
        store = open_store(settings.store or None)
        # lcm calls it store=, the compressor archive=; other engines get neither.
        if settings.engine == "lcm":
            options.setdefault("store", store)
        elif settings.engine == "compressor":
            options.setdefault("archive", store)
    observer = metrics.observer()

    def factory() -> AsyncContextHost:
        engine = load_engine(settings.engine, context_length=settings.context_length, **options)
        return AsyncContextHost(
            engine, model="", context_length=settings.context_length, observers=[observer]
        )

    return factory, store
