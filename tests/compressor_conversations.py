"""Hand-made conversations and test summarisers shared by the compressor tests.

The summarisers here are test doubles of *our* ``Summarizer`` protocol (an
object with ``summarize(request) -> str``), not mocks of any HTTP library.
"""

from __future__ import annotations

import json
from typing import Any

from contextengine.summarizers import SummaryRequest

Message = dict[str, Any]

SYSTEM_PROMPT = "You are a careful coding agent. Follow the repository's conventions."


def system(text: str = SYSTEM_PROMPT) -> Message:
    return {"role": "system", "content": text}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def call(*calls: tuple[str, str, dict[str, Any]], text: str | None = None) -> Message:
    """An assistant message with tool calls given as (id, name, arguments)."""
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for cid, name, args in calls
        ],
    }


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def log_output(n: int, chars: int = 3_000) -> str:
    """A realistic, distinct tool output of about ``chars`` characters."""
    line = f"src/pkg/module_{n}.py:{n}: checked function handler_{n} ok\n"
    body = (line * (chars // len(line) + 1))[:chars]
    return f"{body}\n<returncode>{n % 2}</returncode>"


def coding_session(turns: int = 12, output_chars: int = 3_000, chatter: int = 0) -> list[Message]:
    """System, a task, then ``turns`` rounds of tool call + result + remark.

    Every fourth round the user adds a request. ``chatter`` adds that many
    characters of assistant prose per round (prose pass 1 cannot prune).
    """
    messages: list[Message] = [system(), user("Fix the failing test in tests/test_api.py.")]
    for i in range(turns):
        cid = f"call_{i:03d}"
        messages.append(call((cid, "bash", {"command": f"pytest tests/test_{i}.py -x"})))
        messages.append(result(cid, log_output(i, output_chars)))
        remark = f"Round {i}: looked at module_{i}. " + ("Reasoning about it. " * (chatter // 20))
        messages.append(assistant(remark))
        if i % 4 == 3:
            messages.append(user(f"Also check module_{i} handles ERR_{i}."))
    messages.append(user("Now run the whole suite and tell me the result."))
    messages.append(call(("call_final", "bash", {"command": "pytest -q"})))
    messages.append(result("call_final", "12 passed in 0.41s"))
    messages.append(assistant("All 12 tests pass."))
    return messages


class RecordingSummarizer:
    """Returns a fixed answer and remembers every request."""

    def __init__(self, answer: str = "## Goal\nFix the failing test.") -> None:
        self.answer = answer
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return self.answer


class RaisingSummarizer:
    """Raises the given exception on every call and counts the calls."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        self.calls += 1
        raise self.error


class ScriptedSummarizer:
    """Raises or answers, one scripted step per call; the last step repeats."""

    def __init__(self, *steps: str | BaseException) -> None:
        self.steps = list(steps)
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> str:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if isinstance(step, BaseException):
            raise step
        return step


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def tool_pairs_intact(messages: list[Message]) -> bool:
    """Every tool call is answered right after its message, every result answers a call."""
    pending: set[str] = set()
    for msg in messages:
        if msg.get("role") == "tool":
            if msg.get("tool_call_id") not in pending:
                return False
            pending.discard(str(msg.get("tool_call_id")))
            continue
        if pending:
            return False
        for tool_call in msg.get("tool_calls") or []:
            pending.add(str(tool_call["id"]))
    return not pending
