"""The offline demo: a recorded coding-agent session replayed through a host and an engine.

``contextengine demo`` (see :mod:`contextengine.cli.demo`) presents what
:func:`run_demo` does. The session, ``data/demo_session.json``, was written for
this project (``scripts/make_demo_session.py``): a coding agent fixing a
rounding bug, adding a CSV export and shepherding a pull request, with large
tool outputs, a failing test run and a long tail. Its recorded assistant
messages stand in for the model, so the demo needs no network and no key; the
usage of each request is counted with the shipped tokenizer from what the
engine actually sends, as a provider would report it.

The last user turn asks for a fact stated in the very first one (the staging
database port). With a small context length that fact leaves the view; the
lossless engine then shows the model-side recovery: ``lcm_grep`` finds the
archived message and ``lcm_expand`` reopens it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from contextengine.events import CompactionEvent, Event
from contextengine.host import ContextHost
from contextengine.registry import load_engine
from contextengine.tokens import count_message_tokens, message_tokens

__all__ = ["DemoRequest", "DemoResult", "RecallStep", "load_demo_session", "run_demo"]

Message = dict[str, Any]

#: The fact the last turn asks about, and the words the recovery searches for.
DEMO_FACT = "6543"
DEMO_QUERY = "staging database port"


def load_demo_session() -> list[Message]:
    """The bundled demo session as OpenAI-format messages."""
    text = resources.files("contextengine.data").joinpath("demo_session.json").read_text("utf-8")
    messages: list[Message] = json.loads(text)
    return messages


@dataclass(frozen=True, kw_only=True)
class DemoRequest:
    """One request the demo agent sent."""

    index: int
    turn: int
    context_tokens: int
    context_messages: int
    compactions: list[CompactionEvent]


@dataclass(frozen=True, kw_only=True)
class RecallStep:
    """One tool call the demo makes to recover the fact that left the view."""

    tool: str
    args: dict[str, Any]
    result: dict[str, Any]


@dataclass(kw_only=True)
class DemoResult:
    """Everything the demo did, for the terminal view and ``--json``."""

    engine: str
    context_length: int
    threshold_tokens: int
    requests: list[DemoRequest] = field(default_factory=list)
    final_context: list[Message] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    fact_in_context: bool = False
    recall: list[RecallStep] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def compactions(self) -> list[CompactionEvent]:
        return [event for request in self.requests for event in request.compactions]


def _assistant_steps(session: list[Message]) -> Iterator[tuple[int, Message, list[Message]]]:
    """Yield (position, recorded assistant reply, the tool results that follow it)."""
    position = 0
    while position < len(session):
        message = session[position]
        if message.get("role") != "assistant":
            position += 1
            continue
        results = []
        cursor = position + 1
        while cursor < len(session) and session[cursor].get("role") == "tool":
            results.append(session[cursor])
            cursor += 1
        yield position, message, results
        position = cursor


def run_demo(
    *,
    engine: str = "compressor",
    context_length: int = 8_000,
    model: str = "gpt-4o",
    on_request: Callable[[DemoRequest], None] | None = None,
    engine_options: dict[str, Any] | None = None,
) -> DemoResult:
    """Replay the demo session through a :class:`ContextHost` driving ``engine``.

    ``on_request`` is called after each request, so a terminal view can print
    as the demo goes. The lossless engine gets an in-memory archive unless
    ``engine_options`` names a store. ``engine`` is loaded strictly: a name
    that does not load raises rather than demonstrating the compressor.
    """
    options = dict(engine_options or {})
    if engine == "lcm":
        options.setdefault("store", ":memory:")
    started = time.perf_counter()
    events: list[Event] = []
    context_engine = load_engine(
        engine, strict=True, context_length=context_length, model=model, **options
    )
    host = ContextHost(
        context_engine, model=model, context_length=context_length, observers=[events.append]
    )
    session = load_demo_session()
    host.start_session("demo")
    result = DemoResult(
        engine=context_engine.name,
        context_length=context_length,
        threshold_tokens=context_engine.threshold_tokens,
    )

    history: list[Message] = []
    consumed = 0
    turn = 0
    request: list[Message] = []
    usage: dict[str, int] = {}
    for position, reply, tool_results in _assistant_steps(session):
        # Everything recorded before this reply (the user's message) joins the history.
        for message in session[consumed:position]:
            history.append(message)
            turn += message.get("role") == "user"
        seen = len(events)
        request = host.prepare_request(history)
        history = host.history
        usage = {
            "prompt_tokens": count_message_tokens(request, model=model),
            "completion_tokens": message_tokens(reply, model=model),
        }
        host.record_response(usage)
        history.append(reply)
        if tool_results:
            history.extend(tool_results)
            history = host.after_tool_calls(history)
        else:
            host.end_turn(history, usage)
        consumed = position + 1 + len(tool_results)
        step = DemoRequest(
            index=len(result.requests) + 1,
            turn=turn,
            context_tokens=usage["prompt_tokens"],
            context_messages=len(request),
            compactions=[e for e in events[seen:] if isinstance(e, CompactionEvent)],
        )
        result.requests.append(step)
        if on_request is not None:
            on_request(step)

    # The last user turn has no recorded reply: prepare the request the model would get.
    history.extend(session[consumed:])
    request = host.prepare_request(history)
    result.final_context = request
    result.fact_in_context = any(DEMO_FACT in json.dumps(m) for m in request)
    if any(schema["function"]["name"] == "lcm_grep" for schema in host.tool_schemas()):
        result.recall = _recover_fact(host, request)
    result.status = host.status()
    host.end_session(host.history)
    result.duration_s = time.perf_counter() - started
    return result


def _recover_fact(host: ContextHost, request: list[Message]) -> list[RecallStep]:
    """What a model would do with the lossless engine's tools: search, then reopen."""
    steps = []
    grep_args: dict[str, Any] = {"query": DEMO_QUERY, "limit": 3}
    found = json.loads(host.handle_tool_call("lcm_grep", grep_args, messages=request))
    steps.append(RecallStep(tool="lcm_grep", args=grep_args, result=found))
    # Hits still in the view (no covering summary) are already visible to the
    # model; of the others, a raw message is the most direct way back.
    hidden = [hit for hit in found.get("results", []) if hit.get("summary_id")]
    hidden.sort(key=lambda hit: hit.get("kind") != "message")
    for hit in hidden:
        expand_args: dict[str, Any] = {"id": hit["id"]}
        opened = json.loads(host.handle_tool_call("lcm_expand", expand_args, messages=request))
        steps.append(RecallStep(tool="lcm_expand", args=expand_args, result=opened))
        if DEMO_FACT in json.dumps(opened):
            break
    return steps
