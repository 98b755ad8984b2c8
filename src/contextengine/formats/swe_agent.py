"""Importer for mini-swe-agent and SWE-agent trajectories (format name ``"swe-agent"``).

These agents have no native tool calls: each assistant turn writes a THOUGHT
and exactly one fenced ```` ```bash ```` block, and the next user message is the
shell's answer (``<returncode>..</returncode><output>..</output>``, or the final
patch). The importer makes that structure explicit so engines can prune tool
output the way they would for a native agent:

* an assistant turn with exactly one bash block becomes an assistant message
  whose content is the text around the block and a ``bash`` tool call with
  arguments ``{"command": ...}`` and id ``call_<n>`` (n counts calls from 0);
* the user message after it becomes the ``tool`` result of that call;
* a turn with no or several blocks stays plain text, as the agent rejected it
  too, and so does the user message answering it (the format error).

Shapes: mini-swe-agent ``{"trajectory_format": "mini-swe-agent-1",
"instance_id", "info", "messages"}`` and SWE-agent ``{"history": [...],
"trajectory": [...]}`` (assistant history entries carry their command in
``action``; entries with native ``tool_calls`` / ``tool`` roles are kept).
Provider payloads in ``extra`` are dropped. Metadata: ``instance_id``,
``exit_status``, ``model_stats``, ``trajectory_format``, ``bash_calls``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats._session import Session, finish
from contextengine.formats._source import describe, read_json

__all__ = ["NAME", "load", "sessions_from_document"]

NAME = "swe-agent"

# mini-swe-agent's own action regex, so we split turns exactly as the agent did.
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def load(path: Path) -> list[Session]:
    """Import one trajectory file."""
    return sessions_from_document(read_json(path), path)


def sessions_from_document(document: Any, path: Path) -> list[Session]:
    """Import an already parsed trajectory document."""
    if not isinstance(document, dict):
        raise FormatError(
            str(path),
            "",
            "a trajectory object with 'messages' or 'history'",
            found=describe(document),
        )
    key = "messages" if "messages" in document else "history"
    raw = document.get(key)
    if not isinstance(raw, list):
        raise FormatError(
            str(path),
            key,
            "a list of messages in 'messages' (mini-swe-agent) or 'history'",
            found=describe(raw),
        )
    messages = _convert(path, key, raw)
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    assert isinstance(info, dict)
    metadata: dict[str, Any] = {
        "instance_id": document.get("instance_id"),
        "trajectory_format": document.get(
            "trajectory_format", "swe-agent" if key == "history" else None
        ),
        "exit_status": info.get("exit_status"),
        "model_stats": info.get("model_stats"),
        "bash_calls": sum(len(m.get("tool_calls", ())) for m in messages),
    }
    session_id = str(
        document.get("instance_id") or path.name.removesuffix(".json").removesuffix(".traj")
    )
    return [finish(id=session_id, path=path, format=NAME, messages=messages, metadata=metadata)]


def _convert(path: Path, key: str, raw: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    pending: str | None = None  # id of the call whose observation comes next
    calls = 0
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or entry.get("role") not in _ROLES:
            raise FormatError(
                str(path),
                f"{key}[{index}]",
                "a message with a 'role' of system, user, assistant",
                found=describe(entry),
            )
        role = entry["role"]
        content = _text(entry.get("content"))
        if role == "user" and pending is not None:
            messages.append({"role": "tool", "tool_call_id": pending, "content": content})
            pending = None
            continue
        pending = None
        if role == "assistant" and not entry.get("tool_calls"):
            command, thought = _action(entry, content)
            if command is not None:
                call_id = f"call_{calls}"
                calls += 1
                messages.append(
                    {
                        "role": "assistant",
                        "content": thought,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": "bash",
                                    "arguments": json.dumps(
                                        {"command": command}, ensure_ascii=False
                                    ),
                                },
                            }
                        ],
                    }
                )
                pending = call_id
                continue
        message = {
            k: v
            for k, v in entry.items()
            if k in ("role", "content", "tool_calls", "tool_call_id", "name")
        }
        message["content"] = (
            content if content or role != "assistant" or not entry.get("tool_calls") else None
        )
        messages.append(message)
    return messages


def _action(entry: dict[str, Any], content: str) -> tuple[str | None, str]:
    """The bash command of an assistant turn and the text around it, or ``(None, content)``."""
    blocks = _BASH_BLOCK.findall(content)
    if len(blocks) == 1:
        thought = _BASH_BLOCK.sub("", content, count=1).strip()
        return blocks[0].strip(), thought
    action = entry.get("action")
    if isinstance(action, str) and action.strip() and not blocks:
        recorded = entry.get("thought")
        return action.strip(), recorded if isinstance(recorded, str) else content
    return None, content


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # SWE-agent may store content as text parts
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)
