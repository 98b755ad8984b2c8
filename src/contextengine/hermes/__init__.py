"""Hermes Agent, both ways: our engines inside Hermes, Hermes's engines on our host.

Nothing here imports ``hermes-agent`` until an adapter is used, so
``import contextengine`` (and this package) works without it; using an
adapter without it raises :class:`~contextengine.HermesUnavailableError`
naming the package to install.

* :mod:`.plugin` is the Hermes plugin (entry point ``contextengine`` in
  Hermes's ``hermes_agent.plugins`` group): ``context.engine:
  contextengine-lcm`` in Hermes's config.yaml runs our lcm inside Hermes,
  through :mod:`.adapter` (a subclass of Hermes's ``ContextEngine`` ABC,
  built at first use).
* :class:`HermesEngine` (``load_engine("hermes")``) runs Hermes's built-in
  ``ContextCompressor`` on our host, its summaries written by our
  summariser; :func:`load_hermes_plugin_dir` loads a Hermes context-engine
  plugin directory the way Hermes does.
* :func:`hook_routes` / :func:`unavailable_hooks` say which of our hooks the
  installed Hermes calls, read from its source (``contextengine engines``
  prints them).

See ``docs/hermes.md``.
"""

from __future__ import annotations

from contextengine.hermes._detect import (
    HERMES_DISTRIBUTION,
    HookRoute,
    compressor_missing_hooks,
    hermes_version,
    hook_routes,
    unavailable_hooks,
)
from contextengine.hermes.adapter import hermes_abc, hermes_engine_class, make_hermes_engine
from contextengine.hermes.host_engine import HermesEngine, HermesReport, load_hermes_plugin_dir
from contextengine.hermes.mapping import bare_tool_schema, usage_from_hermes, wrapped_tool_schema

__all__ = [
    "HERMES_DISTRIBUTION",
    "HermesEngine",
    "HermesReport",
    "HookRoute",
    "bare_tool_schema",
    "compressor_missing_hooks",
    "hermes_abc",
    "hermes_engine_class",
    "hermes_version",
    "hook_routes",
    "load_hermes_plugin_dir",
    "make_hermes_engine",
    "unavailable_hooks",
    "usage_from_hermes",
    "wrapped_tool_schema",
]
