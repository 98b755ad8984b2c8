"""The scripted coding agent the framework adapters' tests share.

A model that reads the file the user names, searches the archive when asked
to "search", and answers "Done: …" after a tool result, decided from the
request it is sent as a real model would; and the project files it reads, one
of which holds :data:`CODE`, the fact a test later finds with ``lcm_grep``.
"""

from __future__ import annotations

from typing import Any

#: The fact planted in ``notes.txt``: once it has left the context, only a search finds it.
CODE = "ZX-4471"


def file_text(name: str) -> str:
    """The contents of a project file: long enough that a few overflow a 2,000-token window."""
    lines = [f"{name} line {i}: the quick brown fox jumps over the lazy dog" for i in range(70)]
    if name == "notes.txt":
        lines.insert(7, f"the deploy code is {CODE}")
    return "\n".join(lines)


def text_of(message: dict[str, Any]) -> str:
    """A message's text, from a string or a list of content parts."""
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def responder(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted model (a ``ScriptedOpenAIServer`` responder)."""
    last = body["messages"][-1]
    if last["role"] == "user":
        text = text_of(last)
        if text.startswith("search"):
            return {"tool_calls": [{"name": "lcm_grep", "arguments": {"query": CODE}}]}
        return {"tool_calls": [{"name": "read_file", "arguments": {"name": text.split()[-1]}}]}
    if last["role"] == "tool":
        return {"content": f"Done: {text_of(last)[:40]}"}
    return {"content": "ok"}


def tool_message(request: dict[str, Any], name: str) -> dict[str, Any]:
    """The last result of tool ``name`` in a recorded request's messages."""
    calls = {
        call["id"]: call["function"]["name"]
        for message in request["messages"]
        for call in message.get("tool_calls") or []
    }
    found = [
        m
        for m in request["messages"]
        if m["role"] == "tool" and calls.get(m.get("tool_call_id")) == name
    ]
    assert found, f"no {name} result in the request"
    return found[-1]
