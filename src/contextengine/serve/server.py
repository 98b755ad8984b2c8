"""The proxy in a background thread on a free port: for tests, benchmarks and embedding.

::

    with ProxyServer(ServeSettings(upstream=upstream.base_url, engine="lcm")) as proxy:
        client = OpenAI(base_url=proxy.base_url, api_key="sk-...")

uvicorn serves in its own thread and event loop; :meth:`ProxyServer.close`
asks it to stop and joins it, which ends every live session.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

import uvicorn

from contextengine.async_host import AsyncContextHost
from contextengine.serve.app import create_app
from contextengine.serve.settings import DEFAULT_HOST, KEEP_ALIVE_S, ServeSettings

__all__ = ["ProxyServer"]


class ProxyServer:
    """``contextengine serve`` on 127.0.0.1 (a free port unless given), in a thread."""

    def __init__(
        self,
        settings: ServeSettings,
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        host_factory: Callable[[], AsyncContextHost] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.app = create_app(settings, host_factory=host_factory)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self._sock = sock
        self._host = host
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="ProxyServer", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + startup_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: an Anthropic client's base URL."""
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: an OpenAI client's base URL."""
        return f"{self.url}/v1"

    def close(self) -> None:
        """Stop serving, end the sessions, join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> ProxyServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
