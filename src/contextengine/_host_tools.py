"""The host's tool routing: the engine's own tools (``lcm_grep``...) beside the agent's.

The agent adds :meth:`_ToolRouting._op_tool_schemas` to the tools it offers
the model and hands every call to one of them to
:meth:`_ToolRouting._op_tool_call`. A tool never raises into the agent loop:
arguments that are not JSON, and an engine that fails, come back as a JSON
``{"error": ...}`` the model can read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contextengine._host_state import Message, Op, _describe, _hook, _HostState

__all__ = ["_ToolRouting", "normalize_tool_schemas"]


def _function_of(schema: Any) -> dict[str, Any] | None:
    """The ``function`` part of one schema, whichever shape the engine gave it in.

    Accepted: the OpenAI wrapper ``{"type": "function", "function": {...}}``,
    a bare function ``{"name", "description", "parameters"}``, and the
    Anthropic tool shape (``input_schema`` for ``parameters``).
    """
    if not isinstance(schema, dict):
        return None
    inner = schema.get("function")
    if isinstance(inner, dict):
        function = dict(inner)
    else:
        function = {key: value for key, value in schema.items() if key != "type"}
    if "parameters" not in function and isinstance(function.get("input_schema"), dict):
        function["parameters"] = function.pop("input_schema")
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    function["name"] = name.strip()
    return function


def normalize_tool_schemas(schemas: Any) -> list[dict[str, Any]]:
    """Engine tool schemas as the model is offered them.

    Every schema becomes ``{"type": "function", "function": {...}}``; one
    without a name is dropped (a provider rejects the whole request for it);
    of two with the same name the first is kept (a provider rejects
    duplicates too). Anything that is not a list of schemas gives [].
    """
    if not isinstance(schemas, list | tuple):
        return []
    seen: set[str] = set()
    result: list[dict[str, Any]] = []
    for schema in schemas:
        function = _function_of(schema)
        if function is None or function["name"] in seen:
            continue
        seen.add(function["name"])
        result.append({"type": "function", "function": function})
    return result


class _ToolRouting(_HostState):
    """The engine's tool schemas, and its answers to the model's calls."""

    def _op_tool_schemas(self) -> Op[list[dict[str, Any]]]:
        try:
            schemas = yield _hook(self.engine.get_tool_schemas, blocking=True)
        except Exception as exc:
            self._warn("hook_failed", f"get_tool_schemas failed: {_describe(exc)}")
            return []
        return normalize_tool_schemas(schemas)

    def _op_tool_call(self, name: str, args: Any, messages: list[Message] | None) -> Op[str]:
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                return json.dumps({"error": f"arguments are not valid JSON: {exc}"})
        if args is not None and not isinstance(args, Mapping):
            # dict() of a list or a number failed with Python's own words
            # ("'int' object is not iterable"), which tell the model nothing.
            return json.dumps(
                {"error": f"arguments must be a JSON object, got {type(args).__name__}"}
            )
        kwargs: dict[str, Any] = {}
        if messages is not None:
            kwargs["messages"] = messages
        try:
            result = yield _hook(
                self.engine.handle_tool_call, name, dict(args or {}), blocking=True, **kwargs
            )
        except Exception as exc:
            return json.dumps({"error": f"{name} failed: {_describe(exc)}"})
        if isinstance(result, str):
            return result
        try:
            return json.dumps(result, default=str)
        except (TypeError, ValueError):
            return json.dumps({"result": str(result)})
