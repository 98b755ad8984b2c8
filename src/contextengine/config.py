"""Resolved configuration: every setting with its value and where that value came from.

Precedence, lowest to highest::

    defaults
    < [tool.contextengine] in ./pyproject.toml
    < ./contextengine.toml (top-level keys; the more specific file wins over pyproject)
    < environment (CONTEXTENGINE_ENGINE, CONTEXTENGINE_MODEL, CONTEXTENGINE_CONTEXT_LENGTH,
                   CONTEXTENGINE_STORE_URL, CONTEXTENGINE_SUMMARY_BASE_URL / _API_KEY / _MODEL,
                   falling back to OPENAI_BASE_URL / OPENAI_API_KEY for the summariser;
                   CONTEXTENGINE_UPSTREAM_URL, _SERVE_HOST, _SERVE_PORT, _SERVE_API_KEY,
                   _UPSTREAM_API_KEY for ``contextengine serve``)
    < explicit arguments (None means "not given"), including those a command set
      for the code it runs with :func:`config_overrides` (``--summary-model``...)

Files are looked up in the working directory only: the configuration belongs
to the project you run from, not to whatever directory happens to be above it.
A misspelt key or a value of the wrong type is an error that names the file and
key, never silently ignored. ``contextengine config`` prints the result.

The summariser settings (``summary_model``, ``summary_base_url``,
``summary_api_key``, ``abort_on_summary_failure``) are turned into the
engine's summariser by :func:`contextengine.summarizer_config.configured_summarizers`,
which :func:`contextengine.load_engine` calls for every engine that takes a
``summarizer``.

Engine constructor options go in a sub-table, ``[tool.contextengine.options]``
(or ``[options]`` in contextengine.toml); they are passed to the configured
engine by :func:`contextengine.load_engine`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextengine.errors import ConfigError

__all__ = [
    "DEFAULTS",
    "ENV_VARS",
    "ConfigValue",
    "ResolvedConfig",
    "config_overrides",
    "resolve_config",
]

#: Every setting and its default.
DEFAULTS: dict[str, Any] = {
    "engine": "compressor",
    "model": "",
    "context_length": 128_000,
    "store_url": "",
    "summary_base_url": "",
    "summary_api_key": "",
    "summary_model": "",
    "abort_on_summary_failure": False,
    # contextengine serve: the upstream, the address it binds, and its keys.
    "upstream_url": "",
    "serve_host": "127.0.0.1",
    "serve_port": 8787,
    "serve_api_key": "",
    "upstream_api_key": "",
}

#: Environment variables per setting, first match wins.
ENV_VARS: dict[str, tuple[str, ...]] = {
    "engine": ("CONTEXTENGINE_ENGINE",),
    "model": ("CONTEXTENGINE_MODEL",),
    "context_length": ("CONTEXTENGINE_CONTEXT_LENGTH",),
    "store_url": ("CONTEXTENGINE_STORE_URL",),
    "summary_base_url": ("CONTEXTENGINE_SUMMARY_BASE_URL", "OPENAI_BASE_URL"),
    "summary_api_key": ("CONTEXTENGINE_SUMMARY_API_KEY", "OPENAI_API_KEY"),
    "summary_model": ("CONTEXTENGINE_SUMMARY_MODEL",),
    "abort_on_summary_failure": ("CONTEXTENGINE_ABORT_ON_SUMMARY_FAILURE",),
    "upstream_url": ("CONTEXTENGINE_UPSTREAM_URL",),
    "serve_host": ("CONTEXTENGINE_SERVE_HOST",),
    "serve_port": ("CONTEXTENGINE_SERVE_PORT",),
    "serve_api_key": ("CONTEXTENGINE_SERVE_API_KEY",),
    "upstream_api_key": ("CONTEXTENGINE_UPSTREAM_API_KEY",),
}

_SECRET_KEYS = frozenset({"summary_api_key", "serve_api_key", "upstream_api_key"})
_OPTIONS_TABLE = "options"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

#: Settings a command gave for the code it calls (see :func:`config_overrides`).
_OVERRIDES: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "contextengine_config_overrides", default=None
)


@contextmanager
def config_overrides(**settings: Any) -> Iterator[None]:
    """Within the block, :func:`resolve_config` treats ``settings`` as explicit arguments.

    For commands whose engines are built deep inside library code (a replay
    builds one per session and engine): ``--summary-model`` becomes an
    argument of every configuration resolved there. None values are "not
    given"; arguments passed to ``resolve_config`` itself still win. The
    override is per context (thread, task) and ends with the block.
    """
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown configuration argument {unknown[0]!r}")
    given = {key: value for key, value in settings.items() if value is not None}
    token = _OVERRIDES.set({**(_OVERRIDES.get() or {}), **given})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


@dataclass(frozen=True)
class ConfigValue:
    """One resolved setting: its value and a human-readable source."""

    value: Any
    #: "default", "pyproject.toml [tool.contextengine]", "contextengine.toml",
    #: "env CONTEXTENGINE_ENGINE" or "argument".
    source: str


@dataclass(frozen=True)
class ResolvedConfig:
    """The configuration in effect, built by :func:`resolve_config`."""

    values: Mapping[str, ConfigValue]
    #: Engine constructor options from the configuration files.
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    engine_options_source: str = "default"

    @property
    def engine(self) -> str:
        return str(self.values["engine"].value)

    @property
    def model(self) -> str:
        return str(self.values["model"].value)

    @property
    def context_length(self) -> int:
        return int(self.values["context_length"].value)

    @property
    def store_url(self) -> str:
        return str(self.values["store_url"].value)

    @property
    def abort_on_summary_failure(self) -> bool:
        return bool(self.values["abort_on_summary_failure"].value)

    def get(self, key: str) -> Any:
        """The value of ``key`` (KeyError for an unknown setting)."""
        return self.values[key].value

    def source(self, key: str) -> str:
        """Where the value of ``key`` came from."""
        return self.values[key].source

    def display_items(self) -> Iterator[tuple[str, str, str]]:
        """(key, printable value, source) for each setting; secrets are masked."""
        for key, item in self.values.items():
            shown = "" if item.value in ("", None) else str(item.value)
            if key in _SECRET_KEYS and shown:
                shown = shown[:3] + "…" if len(shown) > 8 else "***"
            yield key, shown, item.source
        if self.engine_options:
            yield "options", repr(dict(self.engine_options)), self.engine_options_source


def _coerce(key: str, raw: Any, where: str) -> Any:
    """Check and convert a raw value to the type of its default."""
    default = DEFAULTS[key]
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        word = str(raw).strip().lower() if isinstance(raw, str | int) else None
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ConfigError(f"{where}: {key} must be true or false, got {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, bool):
            raise ConfigError(f"{where}: {key} must be an integer, got {raw!r}")
        try:
            value = int(str(raw).replace("_", "").strip()) if isinstance(raw, str) else int(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {key} must be an integer, got {raw!r}") from None
        if value <= 0:
            raise ConfigError(f"{where}: {key} must be positive, got {value}")
        return value
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: {key} must be a string, got {raw!r}")
    return raw


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def _apply_table(
    table: Mapping[str, Any],
    where: str,
    values: dict[str, ConfigValue],
    options: dict[str, Any],
) -> bool:
    """Merge a config table into ``values``; returns whether it held engine options."""
    had_options = False
    for key, raw in table.items():
        if key == _OPTIONS_TABLE:
            if not isinstance(raw, Mapping):
                raise ConfigError(f"{where}: {_OPTIONS_TABLE} must be a table")
            options.update(raw)
            had_options = True
            continue
        if key not in DEFAULTS:
            known = ", ".join([*DEFAULTS, _OPTIONS_TABLE])
            raise ConfigError(f"{where}: unknown key {key!r} (known: {known})")
        values[key] = ConfigValue(_coerce(key, raw, where), where)
    return had_options


def resolve_config(
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **explicit: Any,
) -> ResolvedConfig:
    """Resolve the configuration for a working directory and an environment.

    ``cwd`` defaults to the process's working directory and ``environ`` to
    ``os.environ``; tests pass both. ``explicit`` holds settings given as
    arguments (for example from CLI options); None values count as "not
    given". Raises :class:`~contextengine.ConfigError` naming the
    file or variable for an unknown key or an ill-typed value.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    env = os.environ if environ is None else environ
    values = {key: ConfigValue(default, "default") for key, default in DEFAULTS.items()}
    options: dict[str, Any] = {}
    options_source = "default"

    pyproject = base / "pyproject.toml"
    if pyproject.is_file():
        tool = _read_toml(pyproject).get("tool", {})
        table = tool.get("contextengine") if isinstance(tool, Mapping) else None
        if isinstance(table, Mapping):
            where = "pyproject.toml [tool.contextengine]"
            if _apply_table(table, where, values, options):
                options_source = where
    dedicated = base / "contextengine.toml"
    if dedicated.is_file() and _apply_table(
        _read_toml(dedicated), "contextengine.toml", values, options
    ):
        options_source = "contextengine.toml"

    for key, names in ENV_VARS.items():
        for name in names:
            raw = env.get(name)
            if raw is not None and raw.strip():
                values[key] = ConfigValue(_coerce(key, raw.strip(), f"env {name}"), f"env {name}")
                break

    given = {key: raw for key, raw in explicit.items() if raw is not None or key not in DEFAULTS}
    for key, raw in {**(_OVERRIDES.get() or {}), **given}.items():
        if key not in DEFAULTS:
            raise ConfigError(f"unknown configuration argument {key!r}")
        if raw is not None:
            values[key] = ConfigValue(_coerce(key, raw, "argument"), "argument")
    return ResolvedConfig(values, engine_options=options, engine_options_source=options_source)
