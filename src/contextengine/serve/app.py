"""The proxy as an ASGI application (Starlette): routes, credentials, errors, streaming.

Routes: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages``
(Anthropic), ``GET /v1/models`` (passed through), ``GET /healthz``,
``GET /metrics``. Every relayed request runs
:func:`~contextengine.relay.turn.complete_turn` or
:func:`~contextengine.relay.turn.stream_turn` on its session's
:class:`~contextengine.relay.conversation.Conversation`; what the engine did
comes back in ``X-Context-*`` headers.

Logs at the default level name the route, status, a digest of the session
and the engine's figures; never a credential, a session key or message text.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from contextengine.async_host import AsyncContextHost
from contextengine.relay.actions import EngineActions
from contextengine.relay.anthropic_wire import AnthropicWire
from contextengine.relay.conversation import Conversation
from contextengine.relay.openai_wire import OpenAIWire
from contextengine.relay.turn import MalformedUpstreamError, complete_turn, stream_turn
from contextengine.relay.wire import StreamEvent, WireFormat
from contextengine.serve.fleet import Fleet
from contextengine.serve.metrics import Metrics
from contextengine.serve.sessions import SessionCache, close_engine, session_key
from contextengine.serve.settings import ServeSettings, shared_store
from contextengine.serve.upstream import (
    HttpUpstream,
    UpstreamHTTPError,
    UpstreamUnreachableError,
    encode,
    encode_event,
)

__all__ = ["create_app"]

logger = logging.getLogger("contextengine.serve")

_CREDENTIAL_HEADERS = ("authorization", "x-api-key")


def _upstream_root(url: str) -> str:
    """The upstream URL without a trailing ``/`` or ``/v1``: client paths start with ``/v1``."""
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _presented_key(headers: dict[str, str]) -> str:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key", "").strip()


class _Proxy:
    """The application's state: settings, sessions, metrics and the upstream client."""

    def __init__(
        self,
        settings: ServeSettings,
        host_factory: Callable[[], AsyncContextHost] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.root = _upstream_root(settings.upstream)
        self._store_closer: Callable[[], None] | None = None
        self.fleet: Fleet | None = None
        if host_factory is None:
            host_factory, store = shared_store(settings, self.metrics)
            if store is not None:
                self._store_closer = store.close
                if getattr(store, "shared_across_processes", False):
                    # A fleet: each request waits at most as long as an upstream call may last.
                    self.fleet = Fleet(
                        store,
                        host_factory,
                        wait_s=settings.upstream_timeout + 30.0,
                        on_close=close_engine,
                    )
        self.sessions = SessionCache(
            host_factory, max_sessions=settings.max_sessions, fleet=self.fleet
        )
        self.client: httpx.AsyncClient | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        timeout = httpx.Timeout(self.settings.upstream_timeout, connect=10.0)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)
        try:
            yield
        finally:
            await self.sessions.close()
            await self.client.aclose()
            if self._store_closer is not None:
                self._store_closer()

    # ------------------------------------------------------------ credentials

    def _authorized(self, headers: dict[str, str]) -> bool:
        expected = self.settings.api_key
        if not expected:
            return True
        return hmac.compare_digest(_presented_key(headers).encode(), expected.encode())

    def _upstream_headers(self, headers: dict[str, str], wire: WireFormat | None) -> dict[str, str]:
        out = {"content-type": "application/json"}
        for name in ("anthropic-version", "anthropic-beta", "openai-organization"):
            if name in headers:
                out[name] = headers[name]
        key = self.settings.upstream_api_key
        if key:
            if isinstance(wire, AnthropicWire):
                out["x-api-key"] = key
            else:
                out["authorization"] = f"Bearer {key}"
        elif not self.settings.api_key:
            # No proxy key: the client's credential is the upstream's, passed on as it came.
            for name in _CREDENTIAL_HEADERS:
                if name in headers:
                    out[name] = headers[name]
        if isinstance(wire, AnthropicWire):
            out.setdefault("anthropic-version", "2023-06-01")
        return out

    # ------------------------------------------------------------ routes

    async def healthz(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok", "sessions": len(self.sessions)})

    async def metrics_text(self, _request: Request) -> Response:
        fleet = self.fleet
        text = self.metrics.render(
            sessions=len(self.sessions),
            evicted=self.sessions.evicted,
            resumed=fleet.resumed if fleet is not None else None,
            contended=fleet.contended if fleet is not None else 0,
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self._authorized(headers):
            return self._unauthorized(OpenAIWire(), "models")
        assert self.client is not None
        try:
            response = await self.client.get(
                self.root + "/v1/models", headers=self._upstream_headers(headers, None)
            )
        except httpx.TransportError as exc:
            self.metrics.upstream_error("models", "unreachable")
            self.metrics.request("models", 502)
            body = OpenAIWire().error_body(502, f"upstream unreachable ({type(exc).__name__})")
            return JSONResponse(body, status_code=502)
        self.metrics.request("models", response.status_code)
        if response.status_code >= 400:
            self.metrics.upstream_error("models", "status")
        return Response(
            response.content,
            status_code=response.status_code,
            media_type=response.headers.get("content-type", "application/json"),
        )

    async def chat_completions(self, request: Request) -> Response:
        return await self._relay(request, OpenAIWire(), "/v1/chat/completions", "chat_completions")

    async def messages(self, request: Request) -> Response:
        return await self._relay(request, AnthropicWire(), "/v1/messages", "messages")

    def _unauthorized(self, wire: WireFormat, endpoint: str) -> Response:
        self.metrics.request(endpoint, 401)
        body = wire.error_body(401, "missing or wrong API key for this proxy")
        if isinstance(wire, AnthropicWire):
            body["error"]["type"] = "authentication_error"
        return JSONResponse(body, status_code=401)

    def _error(self, wire: WireFormat, endpoint: str, exc: Exception) -> Response:
        """An upstream failure as the client gets it: passed through, or 502 with the reason."""
        if isinstance(exc, UpstreamHTTPError):
            self.metrics.upstream_error(endpoint, "status")
            self.metrics.request(endpoint, exc.status)
            return Response(exc.body, status_code=exc.status, media_type=exc.content_type)
        if isinstance(exc, UpstreamUnreachableError):
            kind, text = "unreachable", f"upstream unreachable ({exc})"
        else:
            kind, text = "malformed", f"upstream answer malformed: {exc}"
        self.metrics.upstream_error(endpoint, kind)
        self.metrics.request(endpoint, 502)
        logger.warning("%s: %s", endpoint, text)
        return JSONResponse(wire.error_body(502, text), status_code=502)

    async def _relay(
        self, request: Request, wire: WireFormat, path: str, endpoint: str
    ) -> Response:
        started = time.perf_counter()
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self._authorized(headers):
            return self._unauthorized(wire, endpoint)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.metrics.request(endpoint, 400)
            error = wire.error_body(400, "the request body is not a JSON object")
            return JSONResponse(error, status_code=400)
        assert self.client is not None
        upstream = HttpUpstream(
            self.client, self.root + path, self._upstream_headers(headers, wire)
        )
        actions = EngineActions()
        conv: Conversation | None = None
        try:
            key = session_key(headers, wire.session_hint(body), wire.messages(body))
            conv = await self.sessions.get(key)
        except Exception as exc:
            actions.fail_open, actions.fail_open_reason = True, type(exc).__name__
            logger.warning(
                "%s: no session (%s); the request goes upstream unmodified",
                endpoint,
                type(exc).__name__,
            )
        if body.get("stream"):
            return await self._stream(wire, body, upstream, actions, conv, endpoint, started)
        try:
            if conv is None:
                reply = await upstream.complete(body)
            else:
                reply = await complete_turn(
                    conv, wire, body, upstream, actions, max_rounds=self.settings.max_engine_rounds
                )
        except (UpstreamHTTPError, UpstreamUnreachableError, MalformedUpstreamError) as exc:
            self.metrics.actions(actions)
            return self._error(wire, endpoint, exc)
        self._done(endpoint, 200, actions, conv, started)
        content = encode(reply.data) if reply.modified else reply.raw
        return Response(content, media_type="application/json", headers=actions.headers())

    async def _stream(
        self,
        wire: WireFormat,
        body: dict[str, Any],
        upstream: HttpUpstream,
        actions: EngineActions,
        conv: Conversation | None,
        endpoint: str,
        started: float,
    ) -> Response:
        if conv is None:
            events: AsyncIterator[StreamEvent] = upstream.stream(body)
        else:
            events = stream_turn(
                conv, wire, body, upstream, actions, max_rounds=self.settings.max_engine_rounds
            )
        # The first event decides the status: engine rounds and upstream errors come before it.
        try:
            first: StreamEvent | None = await anext(events)
        except StopAsyncIteration:
            first = None
        except (UpstreamHTTPError, UpstreamUnreachableError, MalformedUpstreamError) as exc:
            await events.aclose()  # type: ignore[attr-defined]
            self.metrics.actions(actions)
            return self._error(wire, endpoint, exc)

        async def body_bytes() -> AsyncIterator[bytes]:
            status = 200
            try:
                if first is not None:
                    yield encode_event(first)
                    async for event in events:
                        yield encode_event(event)
            except (UpstreamUnreachableError, MalformedUpstreamError) as exc:
                # The client's stream has started: it ends here, as the upstream's did.
                kind = "unreachable" if isinstance(exc, UpstreamUnreachableError) else "malformed"
                self.metrics.upstream_error(endpoint, kind)
                status = 502
            finally:
                await events.aclose()  # type: ignore[attr-defined]
                self._done(endpoint, status, actions, conv, started)

        return StreamingResponse(
            body_bytes(),
            media_type="text/event-stream",
            headers={**actions.headers(), "cache-control": "no-cache"},
        )

    def _done(
        self,
        endpoint: str,
        status: int,
        actions: EngineActions,
        conv: Conversation | None,
        started: float,
    ) -> None:
        self.metrics.request(endpoint, status)
        self.metrics.actions(actions)
        logger.info(
            "%s %d session=%s compactions=%d engine_calls=%d tokens=%d->%d %.0fms%s",
            endpoint,
            status,
            conv.key.rsplit("-", 1)[-1][:8] if conv is not None else "-",
            actions.compactions,
            actions.engine_tool_calls,
            actions.tokens_received,
            actions.tokens_sent,
            (time.perf_counter() - started) * 1000,
            " fail-open" if actions.fail_open else "",
        )


def create_app(
    settings: ServeSettings,
    *,
    host_factory: Callable[[], AsyncContextHost] | None = None,
) -> Starlette:
    """The proxy's ASGI application for ``settings``.

    ``host_factory`` replaces the hosts the settings describe (tests inject
    an engine that fails; embedders their own engine).
    """
    proxy = _Proxy(settings, host_factory)
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", proxy.chat_completions, methods=["POST"]),
            Route("/v1/messages", proxy.messages, methods=["POST"]),
            Route("/v1/models", proxy.models, methods=["GET"]),
            Route("/healthz", proxy.healthz, methods=["GET"]),
            Route("/metrics", proxy.metrics_text, methods=["GET"]),
        ],
        lifespan=proxy.lifespan,
    )
    app.state.proxy = proxy
    return app
