"""``contextengine chat`` (the reference agent) and ``contextengine sessions``.

``chat`` is an interactive terminal agent against any OpenAI-compatible
endpoint, with the configured context engine managing its context: answers
stream, the engine's tools are offered to the model, each automatic compaction
prints a one-line notice, and the session is saved after every turn. Slash
commands::

    /compress [focus]   compact now, optionally prioritising a topic
    /compress here N    keep the last N messages, compact the rest (also --keep N)
    /compress --preview what would be summarised and the saving; changes nothing
    /status             context usage bar, threshold, compactions
    /engine             the active engine and its tools
    /reset              start a new session (the old one stays saved)
    /help               the commands, the engine's own included
    /quit               save and leave (also Ctrl-D)

The engine may add commands (``ContextEngine.chat_commands``; lcm adds
``/grep WORDS``); :mod:`contextengine.chat.commands` parses and dispatches.

``--script FILE`` runs one turn (or slash command) per non-empty line and
exits: the command's tests drive it that way against the scripted server.

Summaries are written by the configured summary model (``--summary-model``,
``--summary-base-url``, ``CONTEXTENGINE_SUMMARY_MODEL``...), retried once on
the chat's own model when it fails; with no summary model configured, by the
chat's own model at its own endpoint. ``/status`` says which, and why.

``--resume ID`` continues a saved session with the model, engine and context
length it was saved with; an option given on the command line wins, and the
configuration (``CONTEXTENGINE_MODEL``...) only fills what the session did
not record. A session in which nothing was said is not saved, and neither
``chat`` nor ``sessions`` creates the session file before there is a session
to save.

The engine is loaded strictly: a name or ``module:attribute`` that does not
load is an error (exit 78) rather than a warning and the compressor.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import click
import httpx

from contextengine.chat.agent import ChatAgent, ChatClient
from contextengine.chat.commands import (
    compress_command,
    engine_commands,
    help_text,
    run_engine_command,
)
from contextengine.chat.session_store import SessionInfo, SessionStore, data_dir
from contextengine.cli._output import emit_json, json_options
from contextengine.cli._summary import summary_options
from contextengine.config import ResolvedConfig, resolve_config
from contextengine.engine import ContextEngine
from contextengine.errors import ConfigError, EngineLoadError, EngineNotFoundError
from contextengine.events import Event
from contextengine.host import ContextHost
from contextengine.registry import load_engine
from contextengine.summarizer_config import MainModel, configured_summarizers

__all__ = ["chat", "sessions"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_SYSTEM = "You are a helpful assistant."
_BAR_WIDTH = 20


def _notice(event: Event) -> None:
    """Observer: print the event's user-visible line, if it has one."""
    if event.message:
        prefix = "[context]" if event.level == "info" else f"[context {event.level}]"
        click.echo(f"{prefix} {event.message}")


def _status_line(host: ContextHost) -> str:
    status = host.status()
    used = int(status.get("last_prompt_tokens") or 0) or int(status.get("rough_tokens") or 0)
    limit = int(status.get("context_length") or host.context_length) or 1
    share = min(1.0, used / limit)
    filled = round(share * _BAR_WIDTH)
    bar = "█" * filled + "░" * (_BAR_WIDTH - filled)
    return (
        f"context [{bar}] {share:.0%} · {used:,} / {limit:,} tokens · "
        f"threshold {int(status.get('threshold_tokens') or 0):,} · "
        f"compactions {int(status.get('compression_count') or 0)} · engine {host.engine_name}"
    )


def _said_anything(history: list[dict[str, Any]]) -> bool:
    return any(message.get("role") != "system" for message in history)


class _Session:
    """The state of one chat: agent, host, store, and the slash commands."""

    def __init__(
        self,
        agent: ChatAgent,
        store: SessionStore,
        session_id: str,
        system: str,
        *,
        engine_spec: str,
        saved: bool = False,
        summary: str = "",
    ) -> None:
        self.agent = agent
        self.host = agent.host
        self.store = store
        self.session_id = session_id
        self.system = system
        #: The name (or module:attribute) the engine was loaded by: what a resume loads.
        self.engine_spec = engine_spec
        #: Whether this session is in the store (resumed, or saved since).
        self.saved = saved
        self.failed_turns = 0
        #: The engine's own slash commands, checked once (a skipped one is announced).
        self.engine_commands = engine_commands(self.host.engine, self.host.engine_name, click.echo)
        #: Which summariser writes the summaries and why (what /status shows).
        self.summary = summary

    def save(self) -> None:
        """Save the history, unless nothing was said yet in a session never saved."""
        if not self.saved and not _said_anything(self.agent.history):
            return
        self.store.save(
            self.session_id,
            self.agent.history,
            model=self.host.model,
            engine=self.engine_spec,
            context_length=self.host.context_length,
        )
        self.saved = True

    def command(self, line: str) -> bool:
        """Run a slash command; False means quit."""
        name, _, rest = line[1:].partition(" ")
        name, rest = name.lower(), rest.strip()
        if name in ("quit", "exit", "q"):
            return False
        if name == "compress":
            history, text = compress_command(self.host, self.agent.history, rest)
            if text:
                click.echo(text)
            if history is not self.agent.history:
                self.agent.history = history
                self.save()
        elif name == "status":
            click.echo(_status_line(self.host))
            click.echo(f"summaries: {self.summary}")
        elif name == "engine":
            engine = self.host.engine
            tools = [str((t.get("function") or {}).get("name")) for t in self.host.tool_schemas()]
            click.echo(
                f"engine {self.host.engine_name} ({type(engine).__module__}."
                f"{type(engine).__qualname__}); tools: {', '.join(tools) or 'none'}"
            )
        elif name == "reset":
            self.save()
            new_id = uuid.uuid4().hex[:12]
            self.host.reset_session(new_id, self.agent.history)
            self.session_id = new_id
            self.saved = False
            self.agent.history = [{"role": "system", "content": self.system}]
            click.echo(f"new session {new_id}")
        elif name == "help":
            click.echo(help_text(self.engine_commands, self.host.engine_name))
        elif name in self.engine_commands:
            output = run_engine_command(
                name, self.engine_commands[name], rest, self.host, self.agent.history
            )
            if output:
                click.echo(output)
        else:
            click.echo(f"unknown command /{name}; /help lists the commands")
        return True

    def turn(self, text: str) -> None:
        try:
            self.agent.run_turn(text)
            click.echo("")
        except httpx.HTTPError as exc:
            self.failed_turns += 1
            click.echo(f"\nerror: the provider request failed: {exc}")
        finally:
            self.save()

    def handle(self, line: str) -> bool:
        line = line.strip()
        if not line:
            return True
        if line.startswith("/"):
            return self.command(line)
        self.turn(line)
        return True


@click.command()
@click.option(
    "--base-url",
    envvar=["CONTEXTENGINE_BASE_URL", "OPENAI_BASE_URL"],
    default=None,
    help=f"OpenAI-compatible endpoint (default {DEFAULT_BASE_URL}).",
)
@click.option("--model", default=None, help="Model name (default: configured model).")
@click.option(
    "--api-key",
    envvar=["CONTEXTENGINE_API_KEY", "OPENAI_API_KEY"],
    default="",
    help="API key (default: $CONTEXTENGINE_API_KEY or $OPENAI_API_KEY).",
)
@click.option(
    "--engine",
    "engine_name",
    default=None,
    help="Context engine name, or module:attribute (default: configured).",
)
@click.option(
    "--context-length",
    type=int,
    default=None,
    help="The model's context window in tokens (default: configured).",
)
@click.option(
    "--system", default=DEFAULT_SYSTEM, show_default=True, help="System prompt of a new session."
)
@click.option(
    "--resume",
    "resume_id",
    default=None,
    help="Continue a saved session by id, with its model, engine and context length.",
)
@click.option(
    "--script",
    "script",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Run one turn per non-empty line of FILE, then exit.",
)
@click.option(
    "--cache-control",
    is_flag=True,
    help="Add Anthropic-style prompt-cache breakpoints to each request.",
)
@summary_options
def chat(
    base_url: str | None,
    model: str | None,
    api_key: str,
    engine_name: str | None,
    context_length: int | None,
    system: str,
    resume_id: str | None,
    script: Path | None,
    cache_control: bool,
) -> None:
    """Chat with a model through a context engine (a reference agent).

    Type a message, or a slash command: /compress [here N | --keep N]
    [--preview] [focus], /status, /engine, /reset, /help, /quit, and those the
    engine adds (lcm: /grep WORDS).
    """
    with SessionStore(data_dir() / "sessions.db") as store:
        saved = store.info(resume_id) if resume_id else None
        history = store.load(resume_id) if resume_id else None
        # A resumed session keeps what it ran with; the command line still wins.
        if saved is not None:
            model = model or saved.model or None
            engine_name = engine_name or saved.engine or None
            context_length = context_length or saved.context_length or None
        config = resolve_config(model=model, context_length=context_length)
        if not config.model:
            raise click.UsageError("no model: pass --model or set CONTEXTENGINE_MODEL")
        # The chat's own endpoint summarises when no summary model is configured,
        # and is the one retry when a separate summary model fails.
        main = MainModel(
            model=config.model, base_url=base_url or DEFAULT_BASE_URL, api_key=api_key or None
        )
        engine, engine_spec = _load_engine(engine_name, config, saved, main)
        host = ContextHost(
            engine,
            model=config.model,
            context_length=config.context_length,
            observers=[_notice],
            cache_control=cache_control,
        )
        with ChatClient(
            base_url=base_url or DEFAULT_BASE_URL, model=config.model, api_key=api_key
        ) as client:
            session = _run(
                host,
                client,
                store,
                session_id=resume_id or uuid.uuid4().hex[:12],
                history=history or [{"role": "system", "content": system}],
                system=system,
                engine_spec=engine_spec,
                resumed=saved is not None,
                script=script,
                summary=_summary_note(engine, config, main),
            )
    if session.saved:
        click.echo(
            f"session {session.session_id} saved; resume with: "
            f"contextengine chat --resume {session.session_id}"
        )
    else:
        click.echo(f"session {session.session_id} not saved: nothing was said")
    if session.failed_turns:
        raise SystemExit(1)


def _summary_note(engine: ContextEngine, config: ResolvedConfig, main: MainModel) -> str:
    """What /status says about the summariser: the configured one, if the engine takes one."""
    if not hasattr(engine, "summary_chain"):
        return f"written by the {engine.name!r} engine's own summariser"
    return configured_summarizers(config, main=main).description


def _load_engine(
    name: str | None, config: ResolvedConfig, saved: SessionInfo | None, main: MainModel
) -> tuple[ContextEngine, str]:
    """The engine, loaded strictly, and the name to save with the session for a resume."""
    spec = name or config.engine
    # The configured engine is loaded as such, so its configured options apply.
    load_as = None if spec == config.engine else spec
    options: dict[str, Any] = {}
    if spec == "compressor" and (load_as is not None or "archive" not in config.engine_options):
        # The chat keeps its sessions in the data directory: what the compressor
        # summarises is kept there too (the default archive, lcm's), when writable.
        options["archive"] = True
    try:
        engine = load_engine(
            load_as, strict=True, observers=[_notice], config=config, main_model=main, **options
        )
    except (EngineNotFoundError, EngineLoadError) as exc:
        if saved is None or spec != saved.engine:
            raise
        raise ConfigError(
            f"session {saved.id} was saved with engine {spec!r}, which does not load "
            f"({exc}); pass --engine to resume it with another"
        ) from exc
    return engine, spec


def _run(
    host: ContextHost,
    client: ChatClient,
    store: SessionStore,
    *,
    session_id: str,
    history: list[dict[str, Any]],
    system: str,
    engine_spec: str,
    resumed: bool,
    script: Path | None,
    summary: str = "",
) -> _Session:
    """Run the conversation (the script's lines, or the prompt) and return its final state."""
    agent = ChatAgent(
        host,
        client,
        history=history,
        on_text=lambda piece: click.echo(piece, nl=False),
        on_tool=lambda line: click.echo(f"[tool] {line}"),
    )
    session = _Session(
        agent, store, session_id, system, engine_spec=engine_spec, saved=resumed, summary=summary
    )
    host.start_session(session_id, resumed=resumed)
    click.echo(
        f"session {session_id} · model {host.model} · engine {host.engine_name} · "
        f"context {host.context_length:,} tokens"
    )
    try:
        if script is not None:
            for line in script.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    click.echo(f"> {line.strip()}")
                if not session.handle(line):
                    break
        else:
            while True:
                try:
                    line = click.prompt("you", prompt_suffix="> ", default="", show_default=False)
                except (EOFError, click.Abort):
                    break
                if not session.handle(line):
                    break
    finally:
        session.save()
        host.end_session(agent.history)
    return session


@click.command()
@click.option("--limit", default=20, show_default=True, help="How many sessions to list.")
@json_options
def sessions(limit: int, as_json: bool, output: Path | None) -> None:
    """List saved chat sessions, most recent first (creates nothing)."""
    with SessionStore(data_dir() / "sessions.db") as store:
        rows = store.list_sessions(limit)
    if emit_json([vars(row) for row in rows], as_json=as_json, output=output):
        return
    if not rows:
        click.echo("no saved chat sessions")
        return
    import datetime as dt

    for row in rows:
        when = dt.datetime.fromtimestamp(row.updated_at).strftime("%Y-%m-%d %H:%M")
        click.echo(
            f"{row.id}  {when}  {row.message_count:>4} msgs  {row.model or '-'}  "
            f"{row.engine or '-'}  {row.title}"
        )
