"""The OpenAI Agents SDK with a context engine: an archive-backed session and a model-input filter.

::

    from agents import Agent, RunConfig, Runner
    from contextengine.integrations.openai_agents import ArchiveSession, context_filter

    compaction = context_filter(engine="lcm", session_id="chat-1", context_length=128_000)
    agent = Agent(name="helper", tools=[*my_tools, *compaction.tools()])
    session = ArchiveSession("chat-1", store="archive.db")
    result = await Runner.run(
        agent, "hello", session=session,
        run_config=RunConfig(call_model_input_filter=compaction), hooks=compaction.hooks,
    )

* :class:`ArchiveSession` is the SDK's ``Session`` protocol on our archive
  (:mod:`contextengine.store`, SQLite or PostgreSQL): ``Runner.run`` stores
  every item there, verbatim (:mod:`.openai_agents_session`).
* :func:`context_filter` returns a :class:`ContextFilter`: the SDK calls it
  (``RunConfig.call_model_input_filter``) right before every model call with
  the instructions and input items it is about to send; the filter converts
  them to chat messages (:mod:`contextengine.integrations._agents_items`,
  exact both ways), lets the host compact and select the view, and returns
  the view as instructions and items. Its :attr:`ContextFilter.hooks` (a
  ``RunHooks``, optional) hand the host each response's usage and end the turn
  when the agent finishes; without them the host works from its own counts.
  :meth:`ContextFilter.tools` (or :func:`engine_tools`) are the engine's tools
  as ``FunctionTool``\\ s, answered by the engine.

The session keeps the whole conversation; the filter changes only what each
model call is sent, so a later run, or another filter, still sees everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contextengine.async_host import AsyncContextHost
from contextengine.engine import ContextEngine
from contextengine.errors import ConfigError
from contextengine.events import Observer
from contextengine.integrations._extras import missing_extra

try:
    from agents import FunctionTool, RunHooks
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("openai-agents", "contextengine.integrations.openai_agents", exc) from exc

from contextengine.integrations._agents_items import (
    ITEMS_KEY,
    items_to_messages,
    messages_to_items,
)
from contextengine.integrations._tracking import SeenHistory
from contextengine.integrations.openai_agents_session import ArchiveSession

__all__ = ["ArchiveSession", "ContextFilter", "context_filter", "engine_tools"]

Message = dict[str, Any]


def _usage_of(response: Any) -> dict[str, Any]:
    """A model response's usage, Responses-shaped (what ``normalize_usage`` reads)."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    details = getattr(usage, "input_tokens_details", None)
    out_details = getattr(usage, "output_tokens_details", None)
    return {
        "input_tokens": int(getattr(usage, "input_tokens", 0) or 0),
        "output_tokens": int(getattr(usage, "output_tokens", 0) or 0),
        "total_tokens": int(getattr(usage, "total_tokens", 0) or 0),
        "input_tokens_details": {"cached_tokens": int(getattr(details, "cached_tokens", 0) or 0)},
        "output_tokens_details": {
            "reasoning_tokens": int(getattr(out_details, "reasoning_tokens", 0) or 0)
        },
    }


def _schema_of(tool: Any) -> dict[str, Any] | None:
    """The chat-completions schema of an agent's function tool, for the window's count."""
    if not isinstance(tool, FunctionTool):
        return None
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.params_json_schema,
        },
    }


class _Hooks(RunHooks):  # type: ignore[misc,unused-ignore]  # RunHooks is generic in the run's context
    """Run hooks that tell the filter's host about responses and finished turns."""

    def __init__(self, owner: ContextFilter) -> None:
        self._owner = owner

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        """Called by the SDK after every model response: its usage goes to the host."""
        await self._owner._record(response)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        """Called by the SDK when the agent produced its final output: the turn ends."""
        await self._owner._end_turn()


class ContextFilter:
    """A ``call_model_input_filter`` that applies a context engine to every model call.

    Made by :func:`context_filter`. One filter drives one conversation (one
    host and session); give each conversation its own. Awaited by the SDK
    before each model call; see the module docstring for what it does.
    """

    def __init__(
        self,
        engine: ContextEngine,
        *,
        session_id: str,
        context_length: int,
        model: str,
        observers: Iterable[Observer] = (),
    ) -> None:
        self.host = AsyncContextHost(
            engine, model=model, context_length=context_length, observers=observers
        )
        self.session_id = session_id
        self._started = False
        self._seen = SeenHistory(session_id)
        self._usage: dict[str, Any] | None = None
        self._answer: list[Message] = []
        #: Pass as ``Runner.run(..., hooks=...)`` for usage and turn ends.
        self.hooks = _Hooks(self)
        self._tools: list[FunctionTool] | None = None

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            await self.host.start_session(self.session_id)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Called by the SDK right before each model call: the view to send instead."""
        await self._start()
        model_data = data.model_data
        instructions = model_data.instructions
        head: list[Message] = (
            [{"role": "system", "content": instructions}] if instructions is not None else []
        )
        body = items_to_messages(list(model_data.input))
        host = self.host
        step = self._seen.step(host.history, head[0] if head else None, body)
        if step.restart is not None:
            await host.reset_session(step.restart, host.history)
        working = step.working
        if step.added and step.added[-1]["role"] == "tool":
            working = await host.after_tool_calls(working)
        tools = [s for s in (_schema_of(t) for t in getattr(data.agent, "tools", [])) if s]
        view = await self.host.prepare_request(working, tools=tools)
        # The instructions, or a system prompt the engine wrote, go back as the
        # instructions; a system message of the input's own stays an item.
        if view and view[0].get("role") == "system" and ITEMS_KEY not in view[0]:
            content = view[0].get("content")
            if instructions is not None and view[0] == head[0]:
                view = view[1:]
            elif isinstance(content, str):
                instructions, view = content, view[1:]
        items = messages_to_items(view)
        return ModelInputData(input=items, instructions=instructions)  # type: ignore[arg-type,unused-ignore]  # plain dicts of the item shapes

    async def _record(self, response: Any) -> None:
        await self._start()
        self._usage = _usage_of(response)
        self._answer = items_to_messages(
            [item.model_dump(exclude_unset=True) for item in getattr(response, "output", [])]
        )
        if self._usage["input_tokens"] or self._usage["output_tokens"]:
            # A response without usage: zeros would tell the engine the context
            # is empty; the host's own counts serve instead.
            await self.host.record_response(self._usage)

    async def _end_turn(self) -> None:
        await self._start()
        history = [*self.host.history, *self._answer]
        await self.host.end_turn(history, self._usage)

    def tools(self) -> list[FunctionTool]:
        """The engine's tools as ``FunctionTool``\\ s, answered by this filter's engine."""
        if self._tools is None:
            from contextengine._host_tools import normalize_tool_schemas

            schemas = normalize_tool_schemas(self.host.engine.get_tool_schemas())
            self._tools = [self._tool(schema["function"]) for schema in schemas]
        return list(self._tools)

    def _tool(self, function: dict[str, Any]) -> FunctionTool:
        name = str(function["name"])

        async def invoke(context: Any, arguments: str) -> str:
            await self._start()
            return await self.host.handle_tool_call(name, arguments)

        return FunctionTool(
            name=name,
            description=str(function.get("description") or name),
            params_json_schema=function.get("parameters") or {"type": "object", "properties": {}},
            on_invoke_tool=invoke,
            # The engine's schemas have optional arguments, which strict mode forbids.
            strict_json_schema=False,
        )


def context_filter(
    engine: str | ContextEngine = "lcm",
    *,
    context_length: int,
    session_id: str = "default",
    store: Any = None,
    model: str = "gpt-4o",
    observers: Iterable[Observer] = (),
    **engine_options: Any,
) -> ContextFilter:
    """A ``call_model_input_filter`` for ``RunConfig`` that runs ``engine`` on every model call.

    ``engine`` is an engine name (loaded with :func:`~contextengine.load_engine`
    and ``engine_options``) or an engine. ``context_length`` is the model's
    window; ``model`` names the tokenizer; ``store`` is the archive (lcm's
    ``store=``, the compressor's ``archive=``); ``session_id`` is the engine's
    session (lcm's conversation in the archive).
    """
    if context_length <= 0:
        raise ConfigError(f"context_length must be positive, got {context_length}")
    if isinstance(engine, str):
        from contextengine.registry import load_engine

        options = dict(engine_options)
        if store is not None:
            options["archive" if engine == "compressor" else "store"] = store
        built = load_engine(
            engine, strict=True, context_length=context_length, model=model, **options
        )
    elif isinstance(engine, ContextEngine):
        built = engine
    else:
        raise ConfigError(f"engine must be a name or a ContextEngine, not {type(engine).__name__}")
    return ContextFilter(
        built,
        session_id=session_id,
        context_length=context_length,
        model=model,
        observers=observers,
    )


def engine_tools(context: ContextFilter) -> list[FunctionTool]:
    """The engine tools of ``context`` as ``FunctionTool``\\ s, to add to the ``Agent``."""
    return context.tools()
