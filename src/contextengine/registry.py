"""Engine discovery: the ``contextengine.engines`` entry-point group, and loading by name.

Built-in engines and third-party ones are found the same way: a distribution
declares an entry point in the group ``contextengine.engines`` whose value is a
:class:`~contextengine.ContextEngine` subclass or a factory returning an
instance. Our own pyproject registers ``compressor`` and ``lcm`` there, exactly
as a plugin would::

    [project.entry-points."contextengine.engines"]
    my-engine = "my_package.engine:MyEngine"

Decisions live here, not in the plugins:

* an unknown name is :class:`~contextengine.EngineNotFoundError`, listing what
  is available;
* :meth:`Registry.problem` says why a name could not be loaded (unknown,
  fails to import, not an engine) without building it: ``contextengine
  config`` and ``engines`` report a configured engine that cannot load;
* an unknown constructor option is :class:`~contextengine.EngineLoadError`
  naming the option and the accepted ones (a typo must never go unnoticed);
* a plugin that fails to import or construct, or that yields something other
  than a ContextEngine, is :class:`~contextengine.EngineLoadError` with
  ``strict=True``; by default the compressor is loaded instead and a warning
  :class:`~contextengine.events.HostEvent` naming the plugin and its error goes
  to the observers (and the ``contextengine.registry`` logger).

Discovery is injectable: :class:`Registry` takes the function that lists entry
points, so tests (and applications with their own plugin directories) point it
at any path with :meth:`Registry.from_paths`. The module-level
:func:`load_engine` and :func:`available_engines` use :data:`default_registry`.
"""

from __future__ import annotations

import importlib.metadata as metadata
import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from contextengine.config import ResolvedConfig, resolve_config
from contextengine.engine import ContextEngine
from contextengine.errors import EngineLoadError, EngineNotFoundError
from contextengine.events import HostEvent, Observer, notify
from contextengine.summarizer_config import MainModel, configured_summarizers

__all__ = [
    "BUILTIN_ENGINES",
    "DEFAULT_ENGINE",
    "ENTRY_POINT_GROUP",
    "OPTIONAL_ENGINES",
    "EngineInfo",
    "Registry",
    "available_engines",
    "default_registry",
    "engine_problem",
    "load_engine",
]

logger = logging.getLogger("contextengine.registry")

ENTRY_POINT_GROUP = "contextengine.engines"
DEFAULT_ENGINE = "compressor"

#: The built-in engines, as declared in our pyproject. Used only when the
#: package runs from a source checkout that was never installed (no metadata,
#: hence no entry points); an installed package always goes through its own.
BUILTIN_ENGINES: dict[str, str] = {
    "compressor": "contextengine.engines.compressor:ContextCompressor",
    "lcm": "contextengine.engines.lossless:LosslessEngine",
}
_SOURCE_CHECKOUT = "contextengine (source checkout)"

#: Our engines that drive another package: (the distribution, the extra that
#: installs it). They are registered like the others but listed and loadable
#: only where that distribution is installed; elsewhere loading one says what
#: to install.
OPTIONAL_ENGINES: dict[str, tuple[str, str]] = {
    "hermes": ("hermes-agent", "hermes"),
}
BUILTIN_ENGINES["hermes"] = "contextengine.hermes.host_engine:HermesEngine"

EntryPointSource = Callable[[], Iterable[metadata.EntryPoint]]


class EngineInfo(NamedTuple):
    """One row of :func:`available_engines`."""

    name: str
    description: str
    #: The distribution that registered the engine, such as "contextengine".
    origin: str


@dataclass(frozen=True)
class _Candidate:
    name: str
    value: str
    origin: str
    entry_point: metadata.EntryPoint


def _missing_requirement(name: str, value: str) -> str | None:
    """The distribution our optional engine ``name`` needs when it is not installed, else None."""
    needed = OPTIONAL_ENGINES.get(name)
    if needed is None or not value.startswith("contextengine."):
        return None  # a third-party engine of that name is its own business
    try:
        metadata.distribution(needed[0])
    except metadata.PackageNotFoundError:
        return needed[0]
    return None


def _installed_entry_points() -> list[metadata.EntryPoint]:
    """Entry points of the group from the installed distributions, plus built-in fallbacks.

    Our optional engines whose package is missing are left out.
    """
    found = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    names = {ep.name for ep in found}
    for name, value in BUILTIN_ENGINES.items():
        if name not in names:
            found.append(metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP))
    return [ep for ep in found if _missing_requirement(ep.name, ep.value) is None]


def _origin(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return _SOURCE_CHECKOUT
    try:
        return str(dist.metadata["Name"] or dist.name)
    except Exception:  # broken metadata must not hide the engine
        return "unknown"


def _first_doc_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


#: Settings handed to an engine constructor that accepts them and was not given them.
_CONFIGURED = ("context_length", "model")


def _accepts(target: Callable[..., Any], key: str) -> bool:
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(key)
    return param is not None and param.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def _with_configured(
    target: Callable[..., Any],
    options: dict[str, Any],
    config: ResolvedConfig | None,
    main: MainModel | None = None,
) -> dict[str, Any]:
    """``options`` plus what the configuration says and the target takes but was not given.

    That is the configured context_length and model, and the configured
    summariser (:func:`~contextengine.summarizer_config.configured_summarizers`):
    ``summarizer``, ``main_summarizer`` and ``abort_on_summary_failure``. A
    ``summarizer`` given explicitly is kept, and then no main-model summariser
    is added either: the caller chose its summariser.
    """
    missing = [key for key in _CONFIGURED if key not in options and _accepts(target, key)]
    wants_summarizer = "summarizer" not in options and _accepts(target, "summarizer")
    wants_abort = "abort_on_summary_failure" not in options and _accepts(
        target, "abort_on_summary_failure"
    )
    if not (missing or wants_summarizer or wants_abort):
        return options
    config = config or resolve_config()
    added: dict[str, Any] = {key: config.get(key) for key in missing}
    if wants_summarizer or wants_abort:
        setup = configured_summarizers(config, main=main).engine_options()
        if not wants_summarizer:
            setup = {k: v for k, v in setup.items() if k == "abort_on_summary_failure"}
        if not wants_abort:
            setup.pop("abort_on_summary_failure", None)
        added.update({k: v for k, v in setup.items() if k not in options and _accepts(target, k)})
    return {**options, **added}


def _check_options(plugin: str, target: Callable[..., Any], options: dict[str, Any]) -> None:
    """Raise EngineLoadError naming the first option ``target`` does not accept."""
    if not options:
        return
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return  # not introspectable: let the constructor decide
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    accepted = sorted(
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name != "self"
    )
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise EngineLoadError(
            plugin,
            f"unknown option {unknown[0]!r} (accepted: {', '.join(accepted) or 'none'})",
        )


class Registry:
    """Finds engines through entry points and builds them.

    ``entry_points`` returns the entry points to consider (any group; others
    are ignored). The default lists the installed distributions' entry points.
    Entry points are listed again on every call, so a plugin installed while
    the process runs is seen; import happens only when an engine is loaded or
    described.
    """

    def __init__(self, entry_points: EntryPointSource | None = None) -> None:
        self._source: EntryPointSource = entry_points or _installed_entry_points

    @classmethod
    def from_paths(cls, paths: Sequence[str], *, include_installed: bool = False) -> Registry:
        """A registry reading distributions (``*.dist-info``) found on ``paths`` only.

        The plugin modules themselves must be importable (on ``sys.path``).
        ``include_installed`` adds the installed engines as well.
        """

        def source() -> list[metadata.EntryPoint]:
            found: list[metadata.EntryPoint] = []
            for dist in metadata.distributions(path=list(paths)):
                found.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
            if include_installed:
                names = {ep.name for ep in found}
                found.extend(ep for ep in _installed_entry_points() if ep.name not in names)
            return found

        return cls(source)

    def _candidates(self) -> dict[str, _Candidate]:
        candidates: dict[str, _Candidate] = {}
        for ep in self._source():
            if ep.group and ep.group != ENTRY_POINT_GROUP:
                continue
            # First wins: an installed distribution shadows nothing silently,
            # the duplicate is logged so the user can find it.
            if ep.name in candidates:
                logger.warning(
                    "context engine %r registered twice (%s and %s); using the first",
                    ep.name,
                    candidates[ep.name].origin,
                    _origin(ep),
                )
                continue
            candidates[ep.name] = _Candidate(ep.name, ep.value, _origin(ep), ep)
        return candidates

    def names(self) -> list[str]:
        """The registered engine names, sorted."""
        return sorted(self._candidates())

    def available(self) -> list[EngineInfo]:
        """(name, description, origin package) for every registered engine, sorted by name.

        The description is the first line of the engine's docstring; a plugin
        that fails to import is listed with its error instead.
        """
        rows = []
        for name, candidate in sorted(self._candidates().items()):
            try:
                description = _first_doc_line(candidate.entry_point.load())
            except Exception as exc:
                description = f"(failed to load: {type(exc).__name__}: {exc})"
            rows.append(EngineInfo(name, description, candidate.origin))
        return rows

    def _candidate(self, name: str) -> tuple[_Candidate | None, dict[str, _Candidate]]:
        """The candidate for ``name`` (a registered name or a ``module:attribute``), and all."""
        candidates = self._candidates()
        candidate = candidates.get(name)
        if candidate is None and ":" in name:
            # "package.module:Factory": an engine under development, not yet registered.
            ep = metadata.EntryPoint(name=name, value=name, group=ENTRY_POINT_GROUP)
            candidate = _Candidate(name, name, "direct reference", ep)
            candidates = {**candidates, name: candidate}
        return candidate, candidates

    def problem(self, name: str) -> str | None:
        """Why ``name`` cannot be loaded, in one line, or None when it imports as an engine.

        Imports the plugin (as :meth:`available` does) but constructs nothing:
        an unknown name, a failing import and something that is not a
        ContextEngine are found; a constructor that fails is not.
        """
        candidate, candidates = self._candidate(name)
        if candidate is None:
            try:
                _raise_if_optional(name)
            except EngineLoadError as exc:
                return str(exc)
            return str(EngineNotFoundError(name, sorted(candidates)))
        try:
            self._import(candidate)
        except EngineLoadError as exc:
            return str(exc)
        return None

    @staticmethod
    def _plugin_label(candidate: _Candidate) -> str:
        return f"{candidate.name} ({candidate.origin}: {candidate.value})"

    def _import(self, candidate: _Candidate) -> Callable[..., Any]:
        """Import an engine's class or factory; EngineLoadError when it is neither."""
        plugin = self._plugin_label(candidate)
        try:
            target = candidate.entry_point.load()
        except Exception as exc:
            raise EngineLoadError(plugin, f"import failed: {type(exc).__name__}: {exc}") from exc
        if isinstance(target, ContextEngine) or not callable(target):
            raise EngineLoadError(
                plugin, f"{target!r} is not a ContextEngine subclass or a factory returning one"
            )
        if inspect.isclass(target) and not issubclass(target, ContextEngine):
            raise EngineLoadError(plugin, f"{target.__qualname__} is not a ContextEngine")
        return target  # type: ignore[no-any-return]  # entry points load as Any

    def _construct(
        self, candidate: _Candidate, target: Callable[..., Any], options: dict[str, Any]
    ) -> ContextEngine:
        plugin = self._plugin_label(candidate)
        try:
            engine = target(**options)
        except Exception as exc:
            raise EngineLoadError(
                plugin, f"construction failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(engine, ContextEngine):
            raise EngineLoadError(
                plugin, f"factory returned {type(engine).__qualname__}, not a ContextEngine"
            )
        return engine

    def load(
        self,
        name: str | None = None,
        *,
        strict: bool = False,
        observers: Iterable[Observer] = (),
        config: ResolvedConfig | None = None,
        main_model: MainModel | None = None,
        **options: Any,
    ) -> ContextEngine:
        """Build the engine registered as ``name`` (None: the configured one) with ``options``.

        ``name`` may also be a ``"module:attribute"`` reference to an engine
        class or factory that is not registered (yet).

        None resolves the configuration (``CONTEXTENGINE_ENGINE``,
        ``[tool.contextengine]``...) and adds its engine options under the
        explicit ones. A constructor that takes ``context_length`` or
        ``model`` and was not given them gets the configured values (the
        host's ``update_model`` adjusts them later anyway). One that takes a
        ``summarizer`` and was not given one gets the configured summariser
        (:func:`~contextengine.summarizer_config.configured_summarizers`, with
        ``main_model`` as the main model's endpoint: the chat passes its own),
        and ``main_summarizer`` and ``abort_on_summary_failure`` likewise; with
        nothing configured that is the offline default. ``config`` is the
        resolved configuration to use (None: resolve it now). Raises
        EngineNotFoundError for an unknown name and EngineLoadError for an
        option the engine does not accept, always. A plugin that fails to
        import or construct, or is not a ContextEngine, raises EngineLoadError
        when ``strict``; otherwise the compressor is built instead (with the
        configured context length only) and a warning event naming the plugin
        and its error goes to ``observers``.
        """
        if name is None:
            config = config or resolve_config()
            name = config.engine or DEFAULT_ENGINE
            options = {**config.engine_options, **options}
        candidate, candidates = self._candidate(name)
        if candidate is None:
            _raise_if_optional(name)
            raise EngineNotFoundError(name, sorted(candidates))
        try:
            target = self._import(candidate)
        except EngineLoadError as exc:
            return self._fall_back(
                exc,
                name,
                candidates,
                strict=strict,
                observers=observers,
                config=config,
                main_model=main_model,
            )
        # A typo in an option is a configuration mistake: never masked by the fallback.
        _check_options(self._plugin_label(candidate), target, options)
        options = _with_configured(target, options, config, main_model)
        try:
            return self._construct(candidate, target, options)
        except EngineLoadError as exc:
            return self._fall_back(
                exc,
                name,
                candidates,
                strict=strict,
                observers=observers,
                config=config,
                main_model=main_model,
            )

    def _fall_back(
        self,
        exc: EngineLoadError,
        failed: str,
        candidates: dict[str, _Candidate],
        *,
        strict: bool,
        observers: Iterable[Observer],
        config: ResolvedConfig | None = None,
        main_model: MainModel | None = None,
    ) -> ContextEngine:
        """Re-raise ``exc`` when strict (or nothing to fall back to), else build the compressor."""
        fallback = candidates.get(DEFAULT_ENGINE)
        if strict or fallback is None or failed == DEFAULT_ENGINE:
            raise exc
        message = f"{exc}; using the {DEFAULT_ENGINE!r} engine instead"
        logger.warning("%s", message)
        notify(
            tuple(observers),
            HostEvent(
                kind="engine_fallback",
                message=message,
                level="warning",
                engine=DEFAULT_ENGINE,
                error=exc.cause,
                details={"plugin": failed, "origin": candidates[failed].origin},
            ),
        )
        target = self._import(fallback)
        return self._construct(fallback, target, _with_configured(target, {}, config, main_model))


def _raise_if_optional(name: str) -> None:
    """EngineLoadError saying what to install when ``name`` is our engine for a missing package."""
    needed = OPTIONAL_ENGINES.get(name)
    if needed is None:
        return
    value = BUILTIN_ENGINES.get(name, "contextengine.")
    missing = _missing_requirement(name, value)
    if missing is not None:
        raise EngineLoadError(
            f"{name} (contextengine)",
            f"it needs the {missing} package, which is not installed: "
            f"pip install 'contextengine[{needed[1]}]'",
        )


#: The registry behind :func:`load_engine` and :func:`available_engines`.
default_registry = Registry()


def load_engine(
    name: str | None = None,
    *,
    strict: bool = False,
    observers: Iterable[Observer] = (),
    config: ResolvedConfig | None = None,
    main_model: MainModel | None = None,
    **options: Any,
) -> ContextEngine:
    """Load a context engine by name from the default registry; see :meth:`Registry.load`.

    Every engine that takes a ``summarizer`` gets the configured one (a summary
    model, or the offline default); ``main_model`` names the main model's
    endpoint, which summarises when no summary model is configured and is
    retried once when a separate summary model fails.
    """
    return default_registry.load(
        name, strict=strict, observers=observers, config=config, main_model=main_model, **options
    )


def available_engines() -> list[EngineInfo]:
    """(name, description, origin package) of every registered engine, sorted by name."""
    return default_registry.available()


def engine_problem(name: str) -> str | None:
    """Why ``name`` cannot be loaded from the default registry; see :meth:`Registry.problem`."""
    return default_registry.problem(name)
