"""Our engines inside Hermes: a subclass of Hermes's ``ContextEngine`` that drives one of ours.

Hermes accepts only instances of its own ABC (``agent/context_engine.py``;
``hermes_cli/plugins.py: PluginContext.register_context_engine`` checks
``isinstance``). :func:`hermes_engine_class` builds that subclass the first
time it is asked, from :class:`_ForwardingEngine` (the forwarding code, plain
Python) and the ABC of the installed Hermes, so ``contextengine`` never imports
Hermes until a Hermes user selects one of our engines. Without Hermes it
raises :class:`~contextengine.HermesUnavailableError`.

Each Hermes hook is forwarded to the hook of the same name of our engine,
except where the two differ (see ``docs/hermes.md`` for the table):

* ``update_from_response`` receives Hermes's flat usage dict, moved into the
  provider shape our engines read (:func:`~contextengine.hermes.mapping.usage_from_hermes`);
  the empty dict Hermes sends for a response without usage is not forwarded.
* ``compress`` is called by Hermes with the keywords its signature names
  (``agent/conversation_compression.py: _supported_compression_kwargs``);
  afterwards the Hermes-only flags it reads (``_last_compression_made_progress``,
  ``_last_summary_fallback_used``, ``_last_compress_aborted``,
  ``_last_summary_error``) are set from our engine's ``last_compression``.
* ``get_active_compression_failure_cooldown`` (a Hermes name) answers from
  our ``should_compress_info`` when its reason is a cooldown.
* ``get_tool_schemas`` returns bare function schemas, which Hermes wraps.
* ``on_turn_complete`` is not an engine hook in Hermes: the plugin
  (:mod:`contextengine.hermes.plugin`) calls it from Hermes's ``post_llm_call``
  hook, through :func:`live_engines`.
* The token attributes Hermes reads and writes directly
  (``last_prompt_tokens = -1`` after a compaction, ``threshold_tokens``) are
  properties of our engine's own, so both sides see one value.

Hermes deep-copies the engine a plugin registered for every agent it builds
(``agent/agent_init.py``, "#42449"). A copy here is a new engine from the same
factory: one archive file, one engine object per agent.
"""

from __future__ import annotations

import functools
import importlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from contextengine.engine import ContextEngine, call_with_supported_kwargs
from contextengine.errors import HermesUnavailableError
from contextengine.hermes.mapping import TOKEN_FIELDS, bare_tool_schema, usage_from_hermes

__all__ = ["hermes_abc", "hermes_engine_class", "live_engines", "make_hermes_engine"]

logger = logging.getLogger("contextengine.hermes")

Message = dict[str, Any]
EngineFactory = Callable[[], ContextEngine]

# Every adapter built in this process, so that Hermes's post_llm_call plugin
# hook (a global one) can reach the engine of the session that just finished a
# turn. Weak: an agent Hermes drops takes its engine with it.
_LIVE: weakref.WeakSet[_ForwardingEngine] = weakref.WeakSet()


def _forwarded(field: str) -> property:
    def get(self: _ForwardingEngine) -> Any:
        return getattr(self.engine, field)

    def set_(self: _ForwardingEngine, value: Any) -> None:
        setattr(self.engine, field, value)

    return property(get, set_, doc=f"Our engine's ``{field}``, read and written by Hermes.")


def hermes_class(module_name: str, name: str) -> Any:
    """``module_name.name`` from the installed Hermes; HermesUnavailableError without it.

    Returns what the module holds (None when it has no ``name``): callers check its shape.
    """
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise HermesUnavailableError("hermes-agent", f"cannot import {module_name}: {exc}") from exc
    return getattr(module, name, None)


def hermes_abc() -> type:
    """Hermes's ``agent.context_engine.ContextEngine``; HermesUnavailableError without it."""
    found = hermes_class("agent.context_engine", "ContextEngine")
    if not isinstance(found, type):
        raise HermesUnavailableError("hermes-agent", "agent.context_engine has no ContextEngine")
    return found


class _ForwardingEngine:
    """The Hermes-facing side of one of our engines; subclassed with Hermes's ABC at run time.

    ``factory`` builds our engine on first use (Hermes builds this object when
    the plugin registers and copies it per agent; only copies do work).
    """

    def __init__(self, factory: EngineFactory, *, name: str) -> None:
        self._factory = factory
        self._name = name
        self._engine: ContextEngine | None = None
        #: The Hermes session this engine serves (set by on_session_start).
        self.session_id = ""
        # Flags Hermes reads after compress (agent/conversation_compression.py).
        self._last_compression_made_progress = False
        self._last_summary_fallback_used = False
        self._last_compress_aborted = False
        self._last_summary_error: str | None = None
        _LIVE.add(self)

    @property
    def engine(self) -> ContextEngine:
        """Our engine, built by the factory on first use."""
        if self._engine is None:
            self._engine = self._factory()
        return self._engine

    def __deepcopy__(self, memo: dict[int, Any]) -> _ForwardingEngine:
        # A fresh engine for each agent (see the module docstring): a store
        # connection cannot be copied, and the archive file is shared anyway.
        return type(self)(self._factory, name=self._name)

    # ------------------------------------------------------------------ identity

    @property
    def name(self) -> str:
        """The name selected in Hermes's ``context.engine`` setting."""
        return self._name

    # ------------------------------------------------------------------ decisions

    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Hermes calls this after every response; an empty usage is not forwarded."""
        report = usage_from_hermes(usage)
        if report:
            self.engine.update_from_response(report)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Hermes asks before a request and after tool calls (``agent/conversation_loop.py``)."""
        return self.engine.should_compress_info(prompt_tokens)[0]

    def get_active_compression_failure_cooldown(
        self, *, refresh: bool = False
    ) -> dict[str, Any] | None:
        """Hermes's "automatic compaction is paused" (``agent/turn_context.py``), or None.

        The shape of Hermes's own compressor: ``cooldown_until`` (epoch
        seconds), ``remaining_seconds`` and ``error``.
        """
        reason = self.engine.should_compress_info(None)[1] or ""
        if not reason.startswith("cooldown:"):
            return None
        try:
            remaining = max(0.0, float(reason.partition(":")[2]))
        except ValueError:
            return None
        return {
            "cooldown_until": time.time() + remaining,
            "remaining_seconds": remaining,
            "error": self._last_summary_error,
        }

    @property
    def last_real_prompt_tokens(self) -> int:
        """The last prompt size a provider reported (never the -1 marker).

        Hermes 0.19.0 logs it whenever ``should_defer_preflight_to_real_usage``
        says yes (``agent/turn_context.py``), an attribute only its own
        compressor has: without it that log line raises.
        """
        value = getattr(self.engine, "last_real_prompt_tokens", None)
        return int(value) if isinstance(value, int) else max(0, self.engine.last_prompt_tokens)

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        return self.engine.should_compress_preflight(messages)

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        return self.engine.should_defer_preflight_to_real_usage(rough_tokens)

    def has_content_to_compress(self, messages: list[Message]) -> bool:
        """Hermes's gateway ``/compress`` asks this before compacting."""
        return self.engine.has_content_to_compress(messages)

    # ------------------------------------------------------------------ transforms

    def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
    ) -> list[Message]:
        """Hermes replaces its history with the result (``agent/conversation_compression.py``)."""
        before = self.engine.compression_count
        try:
            result = call_with_supported_kwargs(
                self.engine.compress,
                messages,
                current_tokens=current_tokens,
                focus_topic=focus_topic,
                force=force,
                memory_context=memory_context,
            )
        except Exception as exc:
            # Hermes's contract: an aborted compaction returns the input and says why.
            logger.warning("context engine %s: compress failed: %s", self._name, exc)
            self._last_compress_aborted = True
            self._last_compression_made_progress = False
            self._last_summary_error = f"{type(exc).__name__}: {exc}"
            return messages
        report = getattr(self.engine, "last_compression", None)
        self._last_compress_aborted = bool(getattr(report, "aborted", False))
        self._last_compression_made_progress = self.engine.compression_count > before
        self._last_summary_fallback_used = bool(getattr(report, "fallback_used", False))
        warning = getattr(report, "warning", None) or getattr(report, "stopped", None)
        if self._last_compress_aborted and not warning:
            # Hermes shows this as the reason ("Compression aborted: ...").
            warning = getattr(report, "reason", None) or "nothing could be compacted"
        self._last_summary_error = str(warning) if warning else None
        return result

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        """Not called by hermes-agent 0.19.0; forwarded for a Hermes that does."""
        return self.engine.select_context(
            request_messages,
            conversation_messages=conversation_messages,
            incoming_message=incoming_message,
            budget_tokens=budget_tokens,
        )

    def prune_tool_results_only(
        self, messages: list[Message], current_tokens: int | None = None
    ) -> tuple[list[Message], int]:
        """Not called by hermes-agent 0.19.0; forwarded for a Hermes that does."""
        return self.engine.prune_tool_results_only(messages, current_tokens)

    # ------------------------------------------------------------------ observation

    def on_turn_complete(
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Called from Hermes's ``post_llm_call`` plugin hook (see the plugin module)."""
        call_with_supported_kwargs(
            self.engine.on_turn_complete,
            messages,
            usage_from_hermes(usage) or None,
            **kwargs,
        )

    # ------------------------------------------------------------------ session

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Hermes: at agent construction, after a reset and at a compaction boundary."""
        self.session_id = session_id
        self.engine.on_session_start(session_id, **kwargs)

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        self.engine.on_session_end(session_id, messages)

    def on_session_reset(self) -> None:
        self.engine.on_session_reset()

    def carry_over_new_session_context(
        self, old_session_id: str, new_session_id: str, messages: list[Message] | None = None
    ) -> None:
        self.engine.carry_over_new_session_context(
            old_session_id, new_session_id, messages=messages
        )

    # ------------------------------------------------------------------ tools, status, model

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """Bare function schemas: Hermes wraps them itself (``agent/agent_init.py``)."""
        return [bare_tool_schema(schema) for schema in self.engine.get_tool_schemas()]

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Hermes passes ``messages=`` (its live history); the result is a JSON string."""
        return self.engine.handle_tool_call(name, args, **kwargs)

    def get_status(self) -> dict[str, Any]:
        return self.engine.get_status()

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        self.engine.update_model(model, context_length, base_url, api_key, provider, api_mode)

    def close(self) -> None:
        """Close our engine (its archive) when it was built."""
        closer = getattr(self._engine, "close", None)
        if callable(closer):
            closer()


for _field in TOKEN_FIELDS:
    setattr(_ForwardingEngine, _field, _forwarded(_field))


@functools.cache
def hermes_engine_class() -> type[_ForwardingEngine]:
    """The subclass of Hermes's ``ContextEngine`` that forwards to ours (built once)."""
    base = hermes_abc()
    cls = type("HermesContextEngineAdapter", (_ForwardingEngine, base), {})
    cls.__module__ = __name__
    cls.__doc__ = _ForwardingEngine.__doc__
    return cls


def make_hermes_engine(factory: EngineFactory, *, name: str) -> _ForwardingEngine:
    """An instance of Hermes's ``ContextEngine`` ABC that runs the engine ``factory`` builds."""
    return hermes_engine_class()(factory, name=name)


def live_engines(session_id: str | None = None) -> list[_ForwardingEngine]:
    """The adapters alive in this process (those serving ``session_id`` when given)."""
    return [e for e in list(_LIVE) if session_id is None or e.session_id == session_id]
