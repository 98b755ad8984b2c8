"""The Hermes plugin: our engines selectable in Hermes's own configuration.

Installing contextengine into Hermes's environment declares one plugin in
Hermes's ``hermes_agent.plugins`` entry-point group (see our pyproject). Hermes
discovers it (``hermes_cli/plugins.py: PluginManager._scan_entry_points``) but
loads entry-point plugins only when they are listed in ``plugins.enabled``
(``PluginManager._discover_and_load_inner``), and uses a plugin's engine only
when ``context.engine`` names it (``agent/agent_init.py``, "Select context
engine"). So a Hermes user opts in twice, with Hermes's own commands::

    hermes plugins enable contextengine
    hermes config set context.engine contextengine-lcm      # or contextengine-compressor

and switches back with ``hermes config set context.engine compressor``.
Even when enabled, :func:`register` registers an engine only when
``context.engine`` names one of ours: an enabled plugin never replaces the
engine a user chose.

The selectable names are ``contextengine-<name>`` for every engine in our
registry (``contextengine-lcm``, ``contextengine-compressor``, third-party
ones). Options for it come from the ``contextengine:`` section of Hermes's
``config.yaml``, keyed by our engine name::

    contextengine:
      lcm:
        threshold_percent: 0.6
        store: ~/.hermes/contextengine/lcm.sqlite   # the default, per Hermes home
      compressor:
        archive: false          # default: ~/.hermes/contextengine/compressor.sqlite

Summaries use our configured summariser (``contextengine config``; offline by
default), as ``load_engine`` does everywhere else.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

from contextengine.engine import ContextEngine
from contextengine.errors import ConfigError
from contextengine.hermes.adapter import live_engines, make_hermes_engine

__all__ = ["ENGINE_PREFIX", "PLUGIN_NAME", "engine_factory", "register"]

logger = logging.getLogger("contextengine.hermes")

#: The plugin's name in Hermes (``hermes plugins enable contextengine``).
PLUGIN_NAME = "contextengine"
#: ``context.engine: contextengine-lcm`` selects our ``lcm``.
ENGINE_PREFIX = "contextengine-"


_ARCHIVE_OPTION = {"lcm": "store", "compressor": "archive"}


def _hermes_config() -> dict[str, Any]:
    """Hermes's config.yaml, as Hermes reads it (its defaults merged in)."""
    config = importlib.import_module("hermes_cli.config").load_config()
    return config if isinstance(config, dict) else {}


def _hermes_home() -> Path:
    """``$HERMES_HOME`` or the platform default, as Hermes resolves it (profiles included)."""
    return Path(importlib.import_module("hermes_constants").get_hermes_home())


def engine_factory(
    name: str, options: dict[str, Any] | None = None, *, hermes_home: Path | None = None
) -> Any:
    """A function building our engine ``name`` with ``options`` (from Hermes's config).

    lcm's store and the compressor's archive default to
    ``<hermes home>/contextengine/<name>.sqlite``, so each Hermes profile keeps
    its own. An unknown option is a ConfigError
    naming the section, raised when the factory runs.
    """
    from contextengine.registry import load_engine

    settings = dict(options or {})
    # lcm's store and the compressor's archive (which gives it the lcm tools,
    # as in `contextengine chat`) live in the Hermes home unless configured.
    key = _ARCHIVE_OPTION.get(name)
    if key is not None and key not in settings and hermes_home is not None:
        folder = hermes_home / "contextengine"
        folder.mkdir(parents=True, exist_ok=True)
        settings[key] = str(folder / f"{name}.sqlite")

    def build() -> ContextEngine:
        try:
            return load_engine(name, strict=True, **settings)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"Hermes config.yaml, contextengine.{name}: {exc}") from exc

    return build


def _after_turn(**kwargs: Any) -> None:
    """Hermes's ``post_llm_call`` hook: our ``on_turn_complete`` for that session's engine.

    Hermes fires it once per finished turn with the whole history
    (``agent/turn_finalizer.py``); not after an interrupted turn.
    """
    history = kwargs.get("conversation_history")
    session_id = kwargs.get("session_id") or ""
    if not isinstance(history, list):
        return
    for engine in live_engines(session_id):
        try:
            engine.on_turn_complete(history, turn_id=kwargs.get("turn_id"))
        except Exception as exc:  # an observer must never break Hermes's turn
            logger.warning("context engine %s: on_turn_complete failed: %s", engine.name, exc)


def register(ctx: Any) -> None:
    """Hermes calls this when the plugin is enabled: register the selected engine, if ours."""
    config = _hermes_config()
    context = config.get("context")
    selected = context.get("engine") if isinstance(context, dict) else None
    if not isinstance(selected, str) or not selected.startswith(ENGINE_PREFIX):
        logger.debug("context.engine is %r, not one of ours: nothing registered", selected)
        return
    name = selected[len(ENGINE_PREFIX) :]
    section = config.get("contextengine")
    options = section.get(name) if isinstance(section, dict) else None
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"Hermes config.yaml, contextengine.{name}: expected a mapping")
    factory = engine_factory(name, options, hermes_home=_hermes_home())
    ctx.register_context_engine(make_hermes_engine(factory, name=selected))
    ctx.register_hook("post_llm_call", _after_turn)
