"""``contextengine serve``: the OpenAI- and Anthropic-compatible proxy (docs/serve.md).

Settings come through the usual precedence (:mod:`contextengine.config`):
flags, then ``CONTEXTENGINE_*`` variables, then ``contextengine.toml`` /
``[tool.contextengine]``, then the defaults. The ASGI stack (Starlette and
uvicorn) is the ``serve`` extra, imported only here and only when the
command runs.
"""

from __future__ import annotations

import logging

import click

from contextengine.config import resolve_config

__all__ = ["serve"]

_MISSING_EXTRA = "contextengine serve needs the serve extra: pip install 'contextengine[serve]'"


@click.command()
@click.option("--upstream", default=None, help="The upstream's base URL (OpenAI or Anthropic).")
@click.option("--host", default=None, help="Address to bind (default 127.0.0.1: this machine).")
@click.option("--port", type=int, default=None, help="Port to bind (default 8787).")
@click.option("--engine", default=None, help="Context engine: lcm, compressor, … (configured).")
@click.option("--context-length", type=int, default=None, help="The window in tokens.")
@click.option("--store", default=None, help="Archive: a path, :memory: or postgresql://… URL.")
@click.option(
    "--api-key", default=None, help="Key clients must present (Authorization or x-api-key)."
)
@click.option("--upstream-api-key", default=None, help="Key sent upstream instead of the client's.")
@click.option(
    "--max-sessions",
    type=int,
    default=256,
    show_default=True,
    help="Sessions kept in memory; the least recently used is ended beyond it.",
)
@click.option(
    "--max-engine-rounds",
    type=int,
    default=4,
    show_default=True,
    help="Engine-tool rounds per request before the model must answer.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def serve(
    upstream: str | None,
    host: str | None,
    port: int | None,
    engine: str | None,
    context_length: int | None,
    store: str | None,
    api_key: str | None,
    upstream_api_key: str | None,
    max_sessions: int,
    max_engine_rounds: int,
    log_level: str,
) -> None:
    """Serve an OpenAI- and Anthropic-compatible proxy that manages each conversation's context.

    Point a client's base URL at it (OPENAI_BASE_URL=http://127.0.0.1:8787/v1,
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787); it forwards to --upstream.
    """
    try:
        import uvicorn

        from contextengine.serve.app import create_app
    except ImportError as exc:
        raise click.ClickException(f"{_MISSING_EXTRA} ({exc.name} is missing)") from None
    from contextengine.serve.settings import KEEP_ALIVE_S, ServeSettings

    config = resolve_config(
        engine=engine,
        context_length=context_length,
        store_url=store,
        upstream_url=upstream,
        serve_host=host,
        serve_port=port,
        serve_api_key=api_key,
        upstream_api_key=upstream_api_key,
    )
    url = str(config.get("upstream_url"))
    if not url:
        raise click.UsageError("--upstream URL is required (or CONTEXTENGINE_UPSTREAM_URL)")
    settings = ServeSettings(
        upstream=url,
        engine=config.engine,
        context_length=config.context_length,
        store=config.store_url,
        api_key=str(config.get("serve_api_key")),
        upstream_api_key=str(config.get("upstream_api_key")),
        max_sessions=max_sessions,
        max_engine_rounds=max_engine_rounds,
        engine_options=dict(config.engine_options),
    )
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    bind_host, bind_port = str(config.get("serve_host")), int(config.get("serve_port"))
    click.echo(
        f"contextengine serve: {settings.engine} engine, {settings.context_length:,}-token window,"
        f" http://{bind_host}:{bind_port} -> {url}",
        err=True,
    )
    uvicorn.run(
        create_app(settings),
        host=bind_host,
        port=bind_port,
        log_level=log_level,
        timeout_keep_alive=KEEP_ALIVE_S,
        # uvicorn's access log prints paths and client addresses, never bodies or headers.
        access_log=log_level == "debug",
    )
