"""Importer for tau-bench historical trajectories (format name ``"tau-bench"``).

A file is a JSON list of runs ``{task_id, trial, reward, info, traj}``; each
``traj`` is already OpenAI chat format with native ``tool_calls``, so every run
becomes one :class:`Session` with id ``task<task_id>-trial<trial>``.

Metadata: ``task_id``, ``trial``, ``reward``, and from ``info.task`` when
present the simulated user's ``instruction``, ``user_id`` and the gold
write-actions ``gold_actions`` (``[{"name", "kwargs"}]``): facts a good context
strategy must keep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contextengine.errors import FormatError
from contextengine.formats._session import Session, finish
from contextengine.formats._source import describe, read_json
from contextengine.formats.openai_chat import check_messages

__all__ = ["NAME", "load", "sessions_from_document"]

NAME = "tau-bench"


def load(path: Path) -> list[Session]:
    """Import every run of a tau-bench trajectory file."""
    return sessions_from_document(read_json(path), path)


def sessions_from_document(document: Any, path: Path) -> list[Session]:
    """Import an already parsed list of runs."""
    if not isinstance(document, list):
        raise FormatError(str(path), "", "a JSON list of tau-bench runs", found=describe(document))
    sessions: list[Session] = []
    for index, run in enumerate(document):
        where = f"record {index}"
        if not isinstance(run, dict) or "traj" not in run:
            raise FormatError(
                str(path),
                where,
                "a run object with 'task_id', 'trial' and 'traj'",
                found=describe(run),
            )
        messages = check_messages(path, f"{where} traj ", run["traj"])
        for message in messages:
            # Runs record content null beside tool_calls; a turn with neither gets "".
            is_assistant = message.get("role") == "assistant"
            if is_assistant and message.get("content") is None and not message.get("tool_calls"):
                message["content"] = ""
        task_id = run.get("task_id", index)
        trial = run.get("trial", 0)
        info = run.get("info") if isinstance(run.get("info"), dict) else {}
        assert isinstance(info, dict)
        task = info.get("task") if isinstance(info.get("task"), dict) else {}
        assert isinstance(task, dict)
        metadata: dict[str, Any] = {"task_id": task_id, "trial": trial, "reward": run.get("reward")}
        if "actions" in task:
            metadata["gold_actions"] = task["actions"]
        for key in ("instruction", "user_id"):
            if key in task:
                metadata[key] = task[key]
        sessions.append(
            finish(
                id=f"task{task_id}-trial{trial}",
                path=path,
                format=NAME,
                messages=messages,
                metadata=metadata,
                location=where,
            )
        )
    return sessions
