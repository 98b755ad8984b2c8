"""Hermes's engines on our host: ``load_engine("hermes")`` and Hermes plugin directories.

:class:`HermesEngine` is one of our :class:`~contextengine.ContextEngine`
subclasses that drives an engine written for Hermes (an instance of Hermes's
own ABC, or anything with its methods). By default that is Hermes's built-in
``agent.context_compressor.ContextCompressor`` from the installed
``hermes-agent``; :func:`load_hermes_plugin_dir` loads a Hermes context-engine
plugin directory instead, the way Hermes does (``plugins/context_engine/__init__.py:
_load_engine_from_dir``: ``register(ctx)`` first, then a subclass scan).

Fairness in comparisons: Hermes's compressor writes its summaries with
``agent.auxiliary_client.call_llm`` (``ContextCompressor._generate_summary``).
Here that method is overridden to ask *our* configured summariser instead
(the offline :class:`~contextengine.DeterministicSummarizer` unless a summary
model is configured), with the turns Hermes chose, its previous summary, the
focus topic, the memory context and Hermes's own summary budget; Hermes's
prefix and iterative-update bookkeeping are kept. So a replay compares where
each engine cuts and what it keeps, never two different summarisers.

Hermes's ABC has no ``select_context``, ``on_turn_complete``,
``prune_tool_results_only``, ``plan_compression`` or ``keep_last``: those
hooks are forwarded when the Hermes engine has them and keep our defaults
otherwise (:attr:`HermesEngine.unavailable` lists them).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextengine.engine import ContextEngine, call_with_supported_kwargs, sanitize_memory_context
from contextengine.errors import EngineLoadError, HermesUnavailableError
from contextengine.hermes.adapter import hermes_abc, hermes_class
from contextengine.hermes.mapping import TOKEN_FIELDS, wrapped_tool_schema
from contextengine.redact import redact_messages
from contextengine.summary_prompt import render_summary_prompt
from contextengine.summary_request import Summarizer, SummaryRequest

__all__ = ["HermesEngine", "HermesReport", "load_hermes_plugin_dir"]

logger = logging.getLogger("contextengine.hermes")

Message = dict[str, Any]

# Our hooks that Hermes's ABC (0.19.0) does not define: forwarded only when the
# Hermes engine has a method of that name.
_OPTIONAL_HOOKS = (
    "select_context",
    "on_turn_complete",
    "prune_tool_results_only",
    "plan_compression",
    "is_own_message",
    "recovery_hint",
    "should_compress_preflight",
    "carry_over_new_session_context",
)

# What Hermes's update_model resets and a same-model call keeps here.
_USAGE_FIELDS = (
    "last_prompt_tokens",
    "last_completion_tokens",
    "last_total_tokens",
    "last_real_prompt_tokens",
)


@dataclass(frozen=True)
class HermesReport:
    """What the last compress of a Hermes engine did, read by our host (``last_compression``)."""

    summarizer_calls: int = 0
    fallback_used: bool = False
    aborted: bool = False
    warning: str | None = None


# ---------------------------------------------------------------- the summary route


def _routed_summary(
    compressor: Any, turns: list[Message], focus_topic: str | None, memory_context: str
) -> str | None:
    """Hermes's ``_generate_summary`` contract, answered by our summariser.

    Returns Hermes's prefixed summary, or None when the summariser failed
    (Hermes then inserts its static fallback or drops the turns, as it does
    when its own model call fails).
    """
    summarizer: Summarizer = compressor._contextengine_summarizer
    budget = int(compressor._compute_summary_budget(turns))
    previous = str(getattr(compressor, "_previous_summary", "") or "")
    messages = redact_messages([copy.deepcopy(m) for m in turns])
    memory = sanitize_memory_context(memory_context) if memory_context else ""
    request = SummaryRequest(
        messages=messages,
        previous_summary=previous,
        focus_topic=focus_topic,
        memory_context=memory,
        token_budget=budget,
        prompt=render_summary_prompt(
            messages=messages,
            previous_summary=previous,
            focus_topic=focus_topic,
            memory_context=memory,
            token_budget=budget,
        ),
        metadata={"engine": "hermes"},
    )
    compressor._contextengine_calls += 1
    try:
        text = summarizer.summarize(request).strip()
    except Exception as exc:
        compressor._last_summary_error = f"{type(exc).__name__}: {exc}"
        return None
    if not text:
        compressor._last_summary_error = "the summariser returned an empty summary"
        return None
    compressor._previous_summary = text
    compressor._last_summary_error = None
    return str(compressor._with_summary_prefix(text))


def _routed_compressor_class() -> type:
    """Hermes's ContextCompressor with its summary call routed to our summariser."""
    base = hermes_class("agent.context_compressor", "ContextCompressor")
    needed = ("_generate_summary", "_compute_summary_budget", "_with_summary_prefix")
    if not isinstance(base, type) or not all(hasattr(base, n) for n in needed):
        raise HermesUnavailableError(
            "a hermes-agent whose ContextCompressor has " + ", ".join(needed),
            "the summary route was written against hermes-agent 0.19.0",
        )

    def _generate_summary(
        self: Any,
        turns_to_summarize: list[Message],
        focus_topic: str | None = None,
        memory_context: str = "",
    ) -> str | None:
        return _routed_summary(self, turns_to_summarize, focus_topic, memory_context)

    return type("RoutedContextCompressor", (base,), {"_generate_summary": _generate_summary})


def _hermes_compressor(
    *,
    model: str,
    context_length: int,
    summarizer: Summarizer,
    options: Mapping[str, Any],
) -> Any:
    cls = _routed_compressor_class()
    try:
        engine = cls(
            model=model or "unknown",
            config_context_length=int(context_length),
            quiet_mode=True,
            **options,
        )
    except TypeError as exc:
        label = "hermes (agent.context_compressor.ContextCompressor)"
        raise EngineLoadError(label, str(exc)) from exc
    engine._contextengine_summarizer = summarizer
    engine._contextengine_calls = 0
    return engine


# ---------------------------------------------------------------- plugin directories


class _Collector:
    """The ``ctx`` a Hermes engine plugin's ``register(ctx)`` gets here.

    It keeps the engine; commands, tools and hooks a context-engine plugin
    may also register are Hermes features our host has no place for, and are
    ignored, as Hermes's own collector ignores all but commands.
    """

    def __init__(self) -> None:
        self.engine: Any = None

    def register_context_engine(self, engine: Any) -> None:
        self.engine = engine

    def register_command(self, *args: Any, **kwargs: Any) -> None:
        logger.debug("Hermes plugin command ignored on our host: %s", args[:1])

    def register_tool(self, *args: Any, **kwargs: Any) -> None:
        pass

    def register_hook(self, *args: Any, **kwargs: Any) -> None:
        pass

    def register_cli_command(self, *args: Any, **kwargs: Any) -> None:
        pass

    def register_memory_provider(self, *args: Any, **kwargs: Any) -> None:
        pass


def _looks_like_engine(obj: Any) -> bool:
    return all(callable(getattr(obj, n, None)) for n in ("should_compress", "compress"))


def load_hermes_plugin_dir(path: str | Path, *, abc: type | None = None) -> Any:
    """The engine a Hermes context-engine plugin directory provides, as Hermes would load it.

    The directory holds ``__init__.py`` (and optionally ``plugin.yaml`` and
    sibling modules, importable relatively). A ``register(ctx)`` function is
    called first with a collector; otherwise the module's first subclass of
    Hermes's ``ContextEngine`` (``abc``: the installed Hermes's, or any base
    class given) is instantiated without arguments. Raises EngineLoadError
    naming the directory and what went wrong.
    """
    folder = Path(path).expanduser().resolve()
    label = f"hermes plugin {folder}"
    init = folder / "__init__.py"
    if not init.is_file():
        raise EngineLoadError(label, "no __init__.py in the directory")
    name = f"_contextengine_hermes_plugin_{abs(hash(str(folder)))}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(folder)]
        )
        if spec is None or spec.loader is None:
            raise EngineLoadError(label, "cannot build an import spec")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise EngineLoadError(label, f"import failed: {type(exc).__name__}: {exc}") from exc
    register = getattr(module, "register", None)
    if callable(register):
        collector = _Collector()
        try:
            register(collector)
        except Exception as exc:
            cause = f"register(ctx) failed: {type(exc).__name__}: {exc}"
            raise EngineLoadError(label, cause) from exc
        if collector.engine is not None:
            return collector.engine
    base = abc if abc is not None else hermes_abc()
    for attribute in sorted(vars(module)):
        candidate = getattr(module, attribute)
        if inspect.isclass(candidate) and issubclass(candidate, base) and candidate is not base:
            if inspect.isabstract(candidate):
                continue
            try:
                return candidate()
            except Exception as exc:
                raise EngineLoadError(
                    label, f"{candidate.__qualname__}() failed: {type(exc).__name__}: {exc}"
                ) from exc
    raise EngineLoadError(
        label, "neither register(ctx) registered an engine nor a ContextEngine subclass was found"
    )


# ---------------------------------------------------------------- the engine


def _forwarded(field: str) -> property:
    def get(self: HermesEngine) -> Any:
        return getattr(self.hermes, field, 0)

    def set_(self: HermesEngine, value: Any) -> None:
        setattr(self.hermes, field, value)

    return property(get, set_, doc=f"The Hermes engine's ``{field}``.")


class HermesEngine(ContextEngine):
    """Hermes Agent's built-in ContextCompressor (or a Hermes plugin engine), on our host.

    ``engine`` is a ready Hermes engine object; ``plugin_dir`` a Hermes
    context-engine plugin directory; with neither, Hermes's own
    ``ContextCompressor`` from the installed ``hermes-agent`` is built with
    ``compressor_options`` (its constructor's keywords, e.g. ``protect_last_n``,
    ``summary_target_ratio``) and its summaries go to ``summarizer`` (ours:
    the configured one through ``load_engine``). ``threshold_percent`` is
    Hermes's default, 0.50. Raises HermesUnavailableError without Hermes.
    """

    def __init__(
        self,
        *,
        context_length: int,
        model: str = "",
        summarizer: Summarizer | None = None,
        threshold_percent: float = 0.50,
        engine: Any = None,
        plugin_dir: str | None = None,
        compressor_options: Mapping[str, Any] | None = None,
    ) -> None:
        if engine is not None and plugin_dir is not None:
            raise ValueError("give engine or plugin_dir, not both")
        if engine is None and plugin_dir is not None:
            engine = load_hermes_plugin_dir(plugin_dir)
        if engine is None:
            from contextengine.summarizers import DeterministicSummarizer

            options = {"threshold_percent": threshold_percent, **(compressor_options or {})}
            engine = _hermes_compressor(
                model=model,
                context_length=context_length,
                summarizer=summarizer or DeterministicSummarizer(),
                options=options,
            )
        if not _looks_like_engine(engine):
            raise EngineLoadError("hermes", f"{engine!r} has no should_compress/compress")
        #: The Hermes engine this one drives.
        self.hermes: Any = engine
        self._name = "hermes" if plugin_dir is None else f"hermes:{Path(plugin_dir).name}"
        self.last_compression: HermesReport | None = None
        self.update_model(model, context_length)

    @property
    def name(self) -> str:
        """``"hermes"`` for Hermes's compressor, ``"hermes:<dir>"`` for a plugin directory."""
        return self._name

    @property
    def unavailable(self) -> list[str]:
        """Our hooks this Hermes engine does not implement (they keep our defaults)."""
        return [hook for hook in _OPTIONAL_HOOKS if not callable(getattr(self.hermes, hook, None))]

    def _call(self, hook: str, default: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.hermes, hook, None)
        if not callable(method):
            return default
        return call_with_supported_kwargs(method, *args, **kwargs)

    # ------------------------------------------------------------------ decisions

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Our normalised usage already carries Hermes's flat keys: passed as is."""
        self.hermes.update_from_response(dict(usage))

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return bool(self.hermes.should_compress(prompt_tokens))

    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """Hermes's answer, and its compression-failure cooldown as the reason."""
        decision = self.should_compress(prompt_tokens)
        cooldown = self._call("get_active_compression_failure_cooldown", None)
        if not decision and isinstance(cooldown, Mapping):
            return False, f"cooldown:{float(cooldown.get('remaining_seconds') or 0.0):.0f}"
        return decision, None

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        return bool(self._call("should_compress_preflight", False, messages))

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        return bool(self._call("should_defer_preflight_to_real_usage", False, rough_tokens))

    def has_content_to_compress(
        self, messages: list[Message], *, keep_last: int | None = None
    ) -> bool:
        return bool(self._call("has_content_to_compress", True, messages))

    # ------------------------------------------------------------------ transforms

    # No keep_last: Hermes cannot honour it, and the host offers keep_last only to
    # engines whose compress names it (telling the user this one cannot).
    def compress(  # type: ignore[override]
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[Message]:
        """Hermes's compress, with the keywords its signature names (as Hermes filters them)."""
        calls_before = int(getattr(self.hermes, "_contextengine_calls", 0))
        result = call_with_supported_kwargs(
            self.hermes.compress,
            [copy.deepcopy(m) for m in messages],
            current_tokens=current_tokens,
            focus_topic=focus_topic,
            force=force,
            memory_context=memory_context,
        )
        error = getattr(self.hermes, "_last_summary_error", None)
        self.last_compression = HermesReport(
            summarizer_calls=int(getattr(self.hermes, "_contextengine_calls", 0)) - calls_before,
            fallback_used=bool(getattr(self.hermes, "_last_summary_fallback_used", False)),
            aborted=bool(getattr(self.hermes, "_last_compress_aborted", False)),
            warning=str(error) if error else None,
        )
        return list(result)

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        result: list[Message] | None = self._call(
            "select_context",
            None,
            request_messages,
            conversation_messages=conversation_messages,
            incoming_message=incoming_message,
            budget_tokens=budget_tokens,
        )
        return result

    def prune_tool_results_only(
        self, messages: list[Message], current_tokens: int | None = None
    ) -> tuple[list[Message], int]:
        result: tuple[list[Message], int] = self._call(
            "prune_tool_results_only", (messages, 0), messages, current_tokens
        )
        return result

    # ------------------------------------------------------------------ observation and session

    def on_turn_complete(
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        self._call("on_turn_complete", None, messages, usage, **kwargs)

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        self._call("on_session_start", None, session_id, **kwargs)

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        self._call("on_session_end", None, session_id, messages)

    def on_session_reset(self) -> None:
        self._call("on_session_reset", None)

    def carry_over_new_session_context(
        self, old_session_id: str, new_session_id: str, messages: list[Message] | None = None
    ) -> None:
        self._call(
            "carry_over_new_session_context",
            None,
            old_session_id,
            new_session_id,
            messages=messages,
        )

    # ------------------------------------------------------------------ tools, status, model

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """The Hermes engine's bare function schemas, wrapped as OpenAI tools (nameless skipped)."""
        schemas = []
        for schema in self._call("get_tool_schemas", []) or []:
            try:
                schemas.append(wrapped_tool_schema(schema))
            except (ValueError, AttributeError) as exc:
                logger.warning("Hermes engine %s: tool schema skipped: %s", self.name, exc)
        return schemas

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        return str(self.hermes.handle_tool_call(name, args, **kwargs))

    def get_status(self) -> dict[str, Any]:
        status = self._call("get_status", None)
        return dict(status) if isinstance(status, Mapping) else super().get_status()

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        """Hermes's update_model, with our rule for the last usage.

        The endpoint is not passed on: Hermes's compressor would use it for its
        own summary calls, which go to our summariser here. Hermes forgets the
        last prompt count on every call; our host calls this also when only the
        request's ``max_tokens`` changed, so for the same model the count is
        kept (another model's count, from another tokenizer, is forgotten).
        """
        kept = {}
        if model == self.model:
            kept = {f: getattr(self.hermes, f) for f in _USAGE_FIELDS if hasattr(self.hermes, f)}
        self.model = model
        self.hermes.update_model(model=model, context_length=int(context_length))
        for field, value in kept.items():
            setattr(self.hermes, field, value)


for _field in TOKEN_FIELDS:
    setattr(HermesEngine, _field, _forwarded(_field))
