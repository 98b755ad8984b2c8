"""``ContextEngineMiddleware``: a context engine inside a LangChain v1 agent (``create_agent``).

::

    from langchain.agents import create_agent
    from contextengine.integrations.langchain import ContextEngineMiddleware

    agent = create_agent(
        model, tools=[...], middleware=[ContextEngineMiddleware("lcm", context_length=128_000)]
    )

What happens, and who calls what (LangChain runs the hooks; the middleware
runs one :class:`~contextengine.ContextHost` per conversation thread):

* **When the agent is built**, ``create_agent`` reads :attr:`tools`: the
  engine's own tools (``lcm_grep``, ``lcm_describe``, ``lcm_expand`` for lcm,
  or the compressor with an archive) as LangChain tools, so the agent's tool
  node runs them; each call is answered by the engine of the thread it runs in.
* **Before every model call** (``wrap_model_call``): the state's messages,
  system prompt first, are converted to OpenAI format
  (:mod:`contextengine.integrations._langchain_messages`, exact both ways);
  the messages appended since the last call are added to the host's history
  (after tool results, ``after_tool_calls`` runs first); the host prepares the
  request (preflight compaction, ``select_context``, validation, the window
  guarantee, counting the tool schemas); the view is converted back and sent
  in place of the state's messages.
* **After the model answers**: its usage (the raw OpenAI usage when the model
  reports it, else LangChain's ``usage_metadata``) goes to ``record_response``;
  an answer without tool calls ends the turn (``end_turn``).

The agent state is never changed: it keeps every message exactly as
LangChain would, so checkpoints, ``get_state`` and a resumed thread see the
whole conversation; compaction only changes what is sent (the alternative,
writing the summary back into the state, is discussed in
docs/integrations.md). The host keeps its own, possibly compacted, history of
each thread; when the state stops extending what it saw (a thread rewound to
an earlier checkpoint, messages removed), it starts again from the state.

Threads are told apart by LangGraph's ``thread_id`` (``config={"configurable":
{"thread_id": ...}}``), ``"default"`` without one; each gets its own engine
(an engine name or a factory) and session.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextengine._host_tools import normalize_tool_schemas
from contextengine.engine import ContextEngine
from contextengine.errors import ConfigError
from contextengine.events import Observer
from contextengine.host import ContextHost
from contextengine.integrations._extras import missing_extra
from contextengine.overflow import is_context_overflow_error

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.config import get_config
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("langchain", "contextengine.integrations.langchain", exc) from exc

from contextengine.integrations._langchain_messages import from_openai, to_openai
from contextengine.integrations._tracking import SeenHistory

__all__ = ["ContextEngineMiddleware"]

Message = dict[str, Any]
EngineSpec = str | ContextEngine | Callable[[str], ContextEngine]
#: The thread of an agent run without a checkpointer (no ``thread_id``).
DEFAULT_THREAD = "default"


def _thread_id() -> str:
    """The LangGraph thread the current hook or tool runs in."""
    try:
        config = get_config()
    except RuntimeError:  # called outside a graph run
        return DEFAULT_THREAD
    thread = (config.get("configurable") or {}).get("thread_id")
    return str(thread) if thread is not None else DEFAULT_THREAD


def _usage_of(message: AIMessage) -> dict[str, Any]:
    """The usage of a model answer as the provider sent it, else from LangChain's summary."""
    raw = message.response_metadata.get("token_usage")
    if isinstance(raw, dict) and raw:
        return raw
    meta = message.usage_metadata
    if not meta:
        return {}
    cached = int((meta.get("input_token_details") or {}).get("cache_read") or 0)
    return {
        "prompt_tokens": meta.get("input_tokens", 0),
        "completion_tokens": meta.get("output_tokens", 0),
        "total_tokens": meta.get("total_tokens", 0),
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _answer_of(response: Any) -> tuple[list[BaseMessage], AIMessage | None]:
    """The messages a model call produced and the model's own answer among them."""
    if isinstance(response, AIMessage):
        messages: list[BaseMessage] = [response]
    else:  # ModelResponse, or ExtendedModelResponse around one
        inner = getattr(response, "model_response", response)
        messages = list(getattr(inner, "result", []) or [])
    answer = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    return messages, answer


@dataclass
class _Thread:
    """One conversation thread: its host and what the host has seen of the state."""

    host: ContextHost
    seen: SeenHistory
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The last request's tool schemas and the state's messages by id, for a retry.
    _schemas: list[dict[str, Any]] = field(default_factory=list)
    _by_id: dict[str, tuple[BaseMessage, Message]] = field(default_factory=dict)

    def prepare(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request to send: the host's view of the state, as LangChain messages."""
        state: list[BaseMessage] = list(request.messages)
        if request.system_message is not None:
            state.insert(0, request.system_message)
        converted = [to_openai(m) for m in state]
        by_id = {m.id: (m, c) for m, c in zip(state, converted, strict=True) if m.id}
        host = self.host
        head = converted[0] if request.system_message is not None else None
        step = self.seen.step(host.history, head, converted[1:] if head else converted)
        if step.restart is not None:
            host.reset_session(step.restart, host.history)
        working = step.working
        if step.added and step.added[-1]["role"] == "tool":
            working = host.after_tool_calls(working)
        self._schemas = [s for s in (_schema_of(tool) for tool in request.tools) if s]
        self._by_id = by_id
        return self._request(request, host.prepare_request(working, tools=self._schemas))

    def after_overflow(self, request: ModelRequest[Any]) -> ModelRequest[Any] | None:
        """After the provider said the request was too long: a compacted one, or None.

        ``handle_overflow`` compacts (forced); None when it freed nothing, and
        a retry would fail the same way.
        """
        host = self.host
        before = host.history
        history = host.handle_overflow(before)
        if history is before:
            return None
        return self._request(request, host.prepare_request(history, tools=self._schemas))

    def _request(self, request: ModelRequest[Any], view: list[Message]) -> ModelRequest[Any]:
        """``request`` sending ``view``, as LangChain messages."""
        lc_view: list[Any] = []  # AnyMessage, the union ModelRequest declares
        for message in view:
            key = message.get("id")
            original = self._by_id.get(key) if isinstance(key, str) else None
            # The state's own object when the engine sent it unchanged: nothing is
            # lost, not even a tool artifact that is not JSON.
            lc_view.append(
                original[0] if original and original[1] == message else from_openai(message)
            )
        system: SystemMessage | None = None
        if lc_view and isinstance(lc_view[0], SystemMessage):
            system = lc_view.pop(0)
        return request.override(messages=lc_view, system_message=system)

    def record(self, response: Any) -> None:
        """After the model answered: usage to the host; an answer without calls ends the turn."""
        produced, answer = _answer_of(response)
        if answer is None:
            return
        usage = _usage_of(answer)
        if usage:
            # No usage (a stream without stream_usage): zeros would tell the engine
            # the context is empty; the host's own counts serve instead.
            self.host.record_response(usage)
        if not answer.tool_calls:
            finished = [*self.host.history, *(to_openai(m) for m in produced)]
            self.host.end_turn(finished, usage or None)


def _schema_of(tool: Any) -> dict[str, Any] | None:
    """The OpenAI schema of a tool the request carries, for the window's count."""
    try:
        return dict(convert_to_openai_tool(tool))
    except Exception:  # a provider-specific tool dict: counted by the provider alone
        return None


class ContextEngineMiddleware(AgentMiddleware):
    """A context engine (``"lcm"``, ``"compressor"``, an engine or a factory) for ``create_agent``.

    ``engine`` is an engine name (loaded with :func:`~contextengine.load_engine`
    once per thread, with ``engine_options``), a factory called with the
    thread id (first with ``"default"`` at construction, to read the
    engine's tools: that engine serves thread ``"default"``), or one
    :class:`~contextengine.ContextEngine` instance, which can serve one
    thread only (a second thread is a :class:`~contextengine.errors.ConfigError`).
    ``context_length`` is the model's window; None takes it from the chat model's profile
    (``max_input_tokens``). ``store`` is the archive (a path,
    ``":memory:"``, a ``sqlite:///`` or ``postgresql://`` URL, or a
    ``Store``): lcm's ``store=``, the compressor's ``archive=``. ``model`` names
    the tokenizer's model (default: the chat model's ``model_name``).
    ``observers`` receive every compaction and host event.
    """

    def __init__(
        self,
        engine: EngineSpec = "lcm",
        *,
        context_length: int | None = None,
        store: Any = None,
        model: str | None = None,
        observers: Iterable[Observer] = (),
        **engine_options: Any,
    ) -> None:
        super().__init__()
        if context_length is not None and context_length <= 0:
            raise ConfigError(f"context_length must be positive, got {context_length}")
        self._spec = engine
        self._context_length = context_length
        self._store = store
        self._model = model
        self._observers = tuple(observers)
        self._options = dict(engine_options)
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.Lock()
        # The engine of the first thread, built now: its tools must be known
        # when create_agent reads ``tools``.
        self._spare: ContextEngine | None = self._build(DEFAULT_THREAD, context_length or 128_000)
        self.tools: Sequence[BaseTool] = [
            self._tool(schema) for schema in normalize_tool_schemas(self._spare.get_tool_schemas())
        ]

    @property
    def name(self) -> str:
        """The middleware's name in the agent graph."""
        return "ContextEngineMiddleware"

    # ------------------------------------------------------------ engines and threads

    def _build(self, thread_id: str, context_length: int) -> ContextEngine:
        spec = self._spec
        if isinstance(spec, ContextEngine):
            return spec
        if callable(spec):
            built = spec(thread_id)
            if not isinstance(built, ContextEngine):
                raise ConfigError(
                    f"the engine factory returned {type(built).__name__}, not a ContextEngine"
                )
            return built
        from contextengine.registry import load_engine

        options = dict(self._options)
        if self._store is not None:
            options["archive" if spec == "compressor" else "store"] = self._store
        return load_engine(
            spec, strict=True, context_length=context_length, model=self._model or "", **options
        )

    def _thread(self, request: ModelRequest[Any] | None) -> _Thread:
        """The thread the current run belongs to, its host started on first use."""
        thread_id = _thread_id()
        with self._lock:
            found = self._threads.get(thread_id)
            if found is not None:
                return found
            chat_model = request.model if request is not None else None
            model = self._model or str(getattr(chat_model, "model_name", "") or "")
            context_length = self._context_length or _profile_window(chat_model)
            spec = self._spec
            # A factory's engine is its thread's: the one built for the tools is "default"'s.
            if self._spare is not None and (not _is_factory(spec) or thread_id == DEFAULT_THREAD):
                engine, self._spare = self._spare, None
            elif isinstance(self._spec, ContextEngine):
                raise ConfigError(
                    "ContextEngineMiddleware was given one engine instance, which serves one "
                    f"thread; thread {thread_id!r} is a second: pass an engine name or a factory"
                )
            else:
                engine = self._build(thread_id, context_length)
            host = ContextHost(
                engine,
                model=model or "gpt-4o",
                context_length=context_length,
                observers=self._observers,
            )
            host.start_session(thread_id)
            found = self._threads[thread_id] = _Thread(host, SeenHistory(thread_id))
            return found

    def host_for(self, thread_id: str = DEFAULT_THREAD) -> ContextHost | None:
        """The host of a thread (its engine, history and status), None before its first call."""
        with self._lock:
            thread = self._threads.get(thread_id)
        return thread.host if thread is not None else None

    # ------------------------------------------------------------ LangChain hooks

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        """Called by the agent around every model call: send the host's view, record the answer.

        A provider error saying the request was too long
        (:func:`~contextengine.is_context_overflow_error`) compacts (forced) and
        retries once; any other error goes to the agent as it came.
        """
        thread = self._thread(request)
        with thread.lock:
            prepared = thread.prepare(request)
        try:
            response = handler(prepared)
        except Exception as exc:
            if not is_context_overflow_error(exc):
                raise
            with thread.lock:
                retry = thread.after_overflow(request)
            if retry is None:
                raise
            response = handler(retry)  # once: a second overflow is the caller's
        with thread.lock:
            thread.record(response)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """:meth:`wrap_model_call` for async agents; the host's work runs in a worker thread."""
        thread = self._thread(request)
        prepared = await asyncio.to_thread(_locked, thread, thread.prepare, request)
        try:
            response = await handler(prepared)
        except Exception as exc:
            if not is_context_overflow_error(exc):
                raise
            retry = await asyncio.to_thread(_locked, thread, thread.after_overflow, request)
            if retry is None:
                raise
            response = await handler(retry)
        await asyncio.to_thread(_locked, thread, thread.record, response)
        return response

    # ------------------------------------------------------------ engine tools

    def _tool(self, schema: dict[str, Any]) -> BaseTool:
        function = schema["function"]
        name = str(function["name"])
        parameters = function.get("parameters") or {"type": "object", "properties": {}}

        def run(**arguments: Any) -> str:
            return self._call_tool(name, arguments)

        async def arun(**arguments: Any) -> str:
            return await asyncio.to_thread(self._call_tool, name, arguments)

        return StructuredTool.from_function(
            func=run,
            coroutine=arun,
            name=name,
            description=str(function.get("description") or name),
            args_schema=parameters,
        )

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run by the agent's tool node: the engine of the current thread answers."""
        thread = self._thread(None)
        with thread.lock:
            return thread.host.handle_tool_call(name, arguments)


def _is_factory(spec: EngineSpec) -> bool:
    return callable(spec) and not isinstance(spec, str | ContextEngine)


def _locked(thread: _Thread, fn: Callable[[Any], Any], argument: Any) -> Any:
    with thread.lock:
        return fn(argument)


def _profile_window(chat_model: Any) -> int:
    """The context window a chat model's profile declares; a ConfigError without one."""
    profile = getattr(chat_model, "profile", None) or {}
    window = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    if isinstance(window, int) and window > 0:
        return window
    raise ConfigError(
        "ContextEngineMiddleware needs context_length=: the chat model "
        f"{type(chat_model).__name__} declares no max_input_tokens in its profile"
    )
