"""AsyncContextHost: the same lifecycle as coroutines; sync engines off the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from contextengine.async_host import AsyncContextHost
from contextengine.events import CompactionEvent, Event
from contextengine.testing.recording_engine import RecordingEngine

Message = dict[str, Any]
USAGE = {"prompt_tokens": 900, "completion_tokens": 50, "total_tokens": 950}


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "sys"}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"q{i} " * 30},
            {"role": "assistant", "content": f"a{i} " * 30},
        ]
    return messages


class ThreadNotingEngine(RecordingEngine):
    """Notes the thread each compress ran on."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.compress_threads: list[int] = []

    def compress(self, messages: list[Message], *args: Any, **kwargs: Any) -> list[Message]:
        self.compress_threads.append(threading.get_ident())
        return super().compress(messages, *args, **kwargs)


class AsyncEngine(RecordingEngine):
    """An engine whose compress and tool are coroutines."""

    async def compress(self, messages: list[Message], *args: Any, **kwargs: Any) -> list[Message]:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().compress(messages, *args, **kwargs)

    async def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:  # type: ignore[override]
        return '{"async": true}'


def test_async_session_calls_hooks_in_order_and_runs_sync_compress_in_a_thread() -> None:
    engine = ThreadNotingEngine(should_compress=[True, False])
    events: list[Event] = []
    host = AsyncContextHost(engine, model="m", context_length=100_000, observers=[events.append])

    async def session() -> list[Message]:
        await host.start_session("a1")
        history = conversation(6)
        request = await host.prepare_request(history)
        await host.record_response(USAGE)
        await host.end_turn(host.history, USAGE)
        await host.end_session(host.history)
        return request

    request = asyncio.run(session())
    assert request == host.history and len(request) < 13
    assert engine.compress_threads and engine.compress_threads[0] != threading.get_ident()
    assert engine.hook_names()[:2] == ["update_model", "on_session_start"]
    assert engine.hook_names()[-3:] == [
        "update_from_response",
        "on_turn_complete",
        "on_session_end",
    ]
    (event,) = [e for e in events if isinstance(e, CompactionEvent)]
    assert event.phase == "preflight" and not event.aborted


def test_async_engine_hooks_are_awaited() -> None:
    engine = AsyncEngine()
    host = AsyncContextHost(engine, model="m", context_length=100_000)

    async def run() -> tuple[list[Message], str]:
        compacted = await host.compress_now(conversation(6), focus_topic="x")
        return compacted, await host.handle_tool_call("anything", {})

    compacted, tool_result = asyncio.run(run())
    assert len(compacted) < 13 and tool_result == '{"async": true}'


def test_select_context_failure_fails_open_in_async_too() -> None:
    engine = RecordingEngine(select_result=RuntimeError("no index"))
    events: list[Event] = []
    host = AsyncContextHost(engine, model="m", context_length=100_000, observers=[events.append])
    history = conversation(2)
    assert asyncio.run(host.prepare_request(history)) == history
    assert [getattr(e, "kind", None) for e in events] == ["select_context_failed"]


def test_async_overflow_recovery_and_tools() -> None:
    engine = RecordingEngine(keep_last=2, tools={"note": lambda args: {"ok": args}})
    host = AsyncContextHost(engine, model="m", context_length=100_000)

    async def run() -> tuple[list[Message], list[dict[str, Any]], str]:
        compacted = await host.handle_overflow(conversation(5))
        return compacted, await host.tool_schemas(), await host.handle_tool_call("note", {"a": 1})

    compacted, schemas, result = asyncio.run(run())
    assert len(compacted) < 11
    assert schemas[0]["function"]["name"] == "note" and result == '{"ok": {"a": 1}}'
