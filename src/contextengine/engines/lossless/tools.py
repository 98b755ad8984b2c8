"""The model-facing tools of the lossless engine: ``lcm_grep``, ``lcm_describe``, ``lcm_expand``.

Each tool is one typed function decorated with :func:`tool`: its signature
(``Literal`` for enums, defaults for optional arguments, :class:`Param` for
descriptions and bounds) and docstring are the single source of both the JSON
schema handed to the model (:meth:`ToolDef.schema`) and the argument checking
of the dispatcher (:func:`call_tool`), so the two cannot drift apart.

Rules every tool keeps:

* It sees one conversation only (:class:`ToolContext`); an id from another
  conversation is reported exactly like an unknown id.
* Its result is a JSON string bounded in size (:data:`MAX_CONTENT_CHARS` of
  content per call, snippets and id lists cut), paginated with
  ``next_cursor`` / ``next_offset``.
* Errors come back as ``{"error": "..."}`` naming the problem (unknown tool,
  unknown id, bad argument), never as a traceback.

The engine calls :func:`tool_schemas` from ``get_tool_schemas`` and
:func:`call_tool` from ``handle_tool_call``.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from contextengine.engines.lossless.large_content import digest
from contextengine.errors import StoreError
from contextengine.store.protocol import SearchHit, Store, StoredMessage, SummaryRecord
from contextengine.store.search import compile_regex
from contextengine.summary_prompt import content_text

__all__ = [
    "MAX_CONTENT_CHARS",
    "TOOLS",
    "Param",
    "ToolContext",
    "ToolDef",
    "call_tool",
    "message_full_text",
    "tool",
    "tool_schemas",
]

#: Most characters of content one ``lcm_expand`` call returns (about 8k tokens).
MAX_CONTENT_CHARS = 24_000
#: Most characters of one item inside a summary's expansion.
MAX_ITEM_CHARS = 6_000
MAX_SNIPPET_CHARS = 300
MAX_GREP_LIMIT = 50
MAX_EXPAND_ITEMS = 50
MAX_LISTED_IDS = 50


@dataclass(frozen=True)
class Param:
    """Description and bounds of one tool argument (values above ``maximum`` are capped)."""

    description: str
    minimum: int | None = None
    maximum: int | None = None


@dataclass(frozen=True, kw_only=True)
class ToolContext:
    """What a tool may see: one conversation of one store, and the ones it continues.

    ``in_view`` tells whether an item is in the active context;
    ``large_content_of`` gives the large-content id of a message, if any.
    ``lineage`` is ``conversation_id`` and the earlier conversations it
    continues (the store's ``conversation_lineage``, nearest first): search
    reaches them after the current one, and their ids can be reopened. It
    never holds any other conversation; empty means the current one alone.
    """

    store: Store
    conversation_id: str
    in_view: Callable[[str], bool] = lambda _id: False
    large_content_of: Callable[[str], str | None] = lambda _id: None
    lineage: tuple[str, ...] = ()

    def earlier(self) -> tuple[str, ...]:
        """The earlier conversations of the lineage, nearest first."""
        return tuple(c for c in self.lineage if c != self.conversation_id)


class _ArgumentError(Exception):
    """Internal: a bad tool argument, reported to the model as a JSON error."""


#: Most characters of a model's value quoted back in an error.
MAX_ECHO_CHARS = 100


def _shown(value: Any) -> str:
    """``repr(value)`` for an error message, cut: a 1 MB argument must not come back whole."""
    text = repr(value)
    return text if len(text) <= MAX_ECHO_CHARS else text[: MAX_ECHO_CHARS - 1] + "…"


@dataclass(frozen=True, kw_only=True)
class _Arg:
    name: str
    kind: type
    choices: tuple[str, ...] = ()
    nullable: bool = False
    required: bool = True
    default: Any = None
    param: Param = field(default_factory=lambda: Param(""))


@dataclass(frozen=True, kw_only=True)
class ToolDef:
    """A model-facing tool built from one typed function by :func:`tool`."""

    name: str
    description: str
    args: tuple[_Arg, ...]
    fn: Callable[..., dict[str, Any]]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema of this tool."""
        properties: dict[str, Any] = {}
        for arg in self.args:
            prop: dict[str, Any] = {"type": "integer" if arg.kind is int else "string"}
            if arg.choices:
                prop["enum"] = list(arg.choices)
            if arg.param.minimum is not None:
                prop["minimum"] = arg.param.minimum
            if arg.param.maximum is not None:
                prop["maximum"] = arg.param.maximum
            description = arg.param.description
            if not arg.required and arg.default is not None:
                description = f"{description} Default: {arg.default}.".strip()
            if description:
                prop["description"] = description
            properties[arg.name] = prop
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "required": [arg.name for arg in self.args if arg.required],
                    "additionalProperties": False,
                },
            },
        }

    def bind(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Check ``raw`` arguments against the signature; fill defaults; cap maxima."""
        known = {arg.name for arg in self.args}
        unknown = sorted(str(key) for key in set(raw) - known)
        if unknown:
            raise _ArgumentError(
                f"unknown argument(s) {_bounded(', '.join(unknown), MAX_ECHO_CHARS)} for "
                f"{self.name}; "
                f"expected: {', '.join(arg.name for arg in self.args)}"
            )
        bound: dict[str, Any] = {}
        for arg in self.args:
            if arg.name not in raw or (raw[arg.name] is None and arg.nullable):
                if arg.required:
                    raise _ArgumentError(f"{self.name} needs the argument {arg.name!r}")
                bound[arg.name] = arg.default
                continue
            value = raw[arg.name]
            if arg.kind is int:
                # Models sometimes send numbers as strings; "3" is unambiguous.
                if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
                    value = int(value)
                if isinstance(value, bool) or not isinstance(value, int):
                    raise _ArgumentError(f"{arg.name} must be an integer, got {_shown(value)}")
                if arg.param.minimum is not None and value < arg.param.minimum:
                    raise _ArgumentError(f"{arg.name} must be >= {arg.param.minimum}")
                if arg.param.maximum is not None:
                    value = min(value, arg.param.maximum)
            elif not isinstance(value, str):
                raise _ArgumentError(f"{arg.name} must be a string, got {type(value).__name__}")
            elif "\x00" in value:
                # No id, query or cursor holds NUL, and PostgreSQL refuses it with an
                # error naming the archive: one answer for every store.
                raise _ArgumentError(f"{arg.name} must not contain NUL (0x00) characters")
            if arg.choices and value not in arg.choices:
                raise _ArgumentError(
                    f"{arg.name} must be one of {', '.join(arg.choices)}, got {_shown(value)}"
                )
            bound[arg.name] = value
        return bound


def _arg_from(name: str, hint: Any, default: Any, param: Param) -> _Arg:
    nullable = False
    args = typing.get_args(hint)
    if type(None) in args:
        nullable = True
        hint = next(arg for arg in args if arg is not type(None))
    choices: tuple[str, ...] = ()
    if typing.get_origin(hint) is Literal:
        choices = tuple(str(choice) for choice in typing.get_args(hint))
        kind: type = str
    elif hint in (int, str):
        kind = hint
    else:
        raise TypeError(f"tool argument {name!r}: unsupported type {hint!r}")
    required = default is inspect.Parameter.empty
    return _Arg(
        name=name,
        kind=kind,
        choices=choices,
        nullable=nullable,
        required=required,
        default=None if required else default,
        param=param,
    )


def tool(**params: Param) -> Callable[[Callable[..., dict[str, Any]]], ToolDef]:
    """Make a :class:`ToolDef` from a function ``fn(ctx, arg: type = default, ...)``.

    The first line block of the docstring is the description the model
    reads; ``params`` describe the arguments. The first parameter (the
    :class:`ToolContext`) is not part of the schema.
    """

    def decorate(fn: Callable[..., dict[str, Any]]) -> ToolDef:
        hints = typing.get_type_hints(fn)
        signature = inspect.signature(fn)
        args = tuple(
            _arg_from(name, hints[name], parameter.default, params.get(name, Param("")))
            for name, parameter in list(signature.parameters.items())[1:]
        )
        description = inspect.cleandoc(fn.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        return ToolDef(name=fn.__name__, description=description, args=args, fn=fn)

    return decorate


# ---------------------------------------------------------------- helpers


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ids(ids: tuple[str, ...] | list[str]) -> dict[str, Any]:
    listed = list(ids)[:MAX_LISTED_IDS]
    return {"source_ids": listed, "source_count": len(ids)}


def message_full_text(message: dict[str, Any]) -> str:
    """The text ``lcm_expand`` shows for a message: its content, then its tool calls."""
    text = content_text(message.get("content"))
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        text += f"\n[tool_call {call.get('id', '')}] {function.get('name', 'tool')}({arguments})"
    return text


def _find_summary(ctx: ToolContext, item_id: str) -> SummaryRecord | None:
    return ctx.store.get_summary(ctx.conversation_id, item_id)


def _holds(ctx: ToolContext, conversation_id: str, item_id: str) -> bool:
    store = ctx.store
    return (
        store.get_summary(conversation_id, item_id) is not None
        or store.get_message(conversation_id, item_id) is not None
        or store.get_large_content(conversation_id, item_id) is not None
    )


def _scope_for(ctx: ToolContext, item_id: str) -> ToolContext:
    """The context to reopen ``item_id`` in: the current conversation's, or the
    earlier one of the lineage that holds it (nothing there is in view)."""
    earlier = ctx.earlier()
    if not earlier or _holds(ctx, ctx.conversation_id, item_id):
        return ctx
    for conversation_id in earlier:
        if _holds(ctx, conversation_id, item_id):
            return ToolContext(store=ctx.store, conversation_id=conversation_id)
    return ctx


def _unknown(item_id: str) -> dict[str, Any]:
    return {
        "error": f"unknown id {_shown(item_id)}: no message, summary or large content with "
        "this id in this conversation"
    }


def _message_meta(ctx: ToolContext, stored: StoredMessage) -> dict[str, Any]:
    message = stored.message
    meta: dict[str, Any] = {
        "id": stored.id,
        "kind": "message",
        "role": stored.role,
        "seq": stored.seq,
        "time": _iso(stored.created_at),
        "token_count": stored.token_count,
        "chars": len(message_full_text(message)),
        "parent_summary": ctx.store.parent_summary(ctx.conversation_id, stored.id),
        "in_view": ctx.in_view(stored.id),
    }
    calls = [
        (call.get("function") or {}).get("name")
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    if calls:
        meta["tool_calls"] = calls
    if message.get("tool_call_id"):
        meta["tool_call_id"] = message["tool_call_id"]
    large = ctx.large_content_of(stored.id)
    if large:
        meta["large_content_id"] = large
    return meta


def _page(text: str, offset: int, limit: int | None) -> dict[str, Any]:
    size = min(limit or MAX_CONTENT_CHARS, MAX_CONTENT_CHARS)
    chunk = text[offset : offset + size]
    end = offset + len(chunk)
    return {
        "offset": offset,
        "content": chunk,
        "total_chars": len(text),
        "next_offset": end if end < len(text) else None,
    }


# ---------------------------------------------------------------- the tools


@tool(
    query=Param("Words or a quoted phrase (mode text), or a regular expression (mode regex)."),
    mode=Param('"text": ranked full-text search; "regex": regular expression.'),
    scope=Param("Search raw messages, summaries, or both."),
    limit=Param("Results per page.", minimum=1, maximum=MAX_GREP_LIMIT),
    cursor=Param("next_cursor of the previous page, to continue."),
)
def lcm_grep(
    ctx: ToolContext,
    query: str,
    mode: Literal["text", "regex"] = "text",
    scope: Literal["messages", "summaries", "all"] = "all",
    limit: int = 20,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Search everything said earlier in this conversation, including what left your context.

    Returns results with the id, kind, seq, role, a snippet of the match and
    summary_id (the summary that now stands for it, or null while it is still
    in view). A result found only through the message just before it says
    matched_in "context" and quotes that message's matching words in context.
    Reopen any id with lcm_expand. When this session continues
    earlier ones, they are searched after it and their results say
    earlier_session.
    """
    if not query.strip():
        return {"error": "query must not be empty"}
    if mode == "regex":
        # The stores' own check: bounded length first (a huge pattern made
        # ``re.compile`` recurse past Python's limit), then the engine they match with.
        try:
            compile_regex(query)
        except StoreError as exc:
            return {"error": str(exc)}
    lineage = (ctx.conversation_id, *ctx.earlier())
    if len(lineage) == 1:
        page = ctx.store.search(
            ctx.conversation_id, query, mode=mode, scope=scope, limit=limit, cursor=cursor
        )
        return {
            "results": [_hit(hit) for hit in page.results[:limit]],
            "next_cursor": page.next_cursor,
        }
    return _grep_lineage(ctx, lineage, query, mode, scope, limit, cursor)


def _hit(hit: SearchHit, *, earlier: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": hit.id,
        "kind": hit.kind,
        "seq": hit.seq,
        "role": hit.role,
        "snippet": _bounded(hit.snippet, MAX_SNIPPET_CHARS),
        "summary_id": hit.summary_id,
    }
    if hit.context is not None:
        # Found only through the message before it: say so, and show why.
        result["matched_in"] = "context"
        result["context"] = _bounded(hit.context, MAX_SNIPPET_CHARS)
    if earlier:
        result["earlier_session"] = True
    return result


def _grep_lineage(
    ctx: ToolContext,
    lineage: tuple[str, ...],
    query: str,
    mode: Literal["text", "regex"],
    scope: Literal["messages", "summaries", "all"],
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """Search the current conversation, then each earlier one of its lineage in turn.

    The cursor says where to go on: ``L<index>:<the store's cursor>``.
    """
    index, inner = 0, cursor
    if cursor:
        head, sep, rest = cursor.partition(":")
        if not (sep and head.startswith("L") and head[1:].isdigit()):
            return {"error": "invalid cursor: pass next_cursor of the previous page"}
        index, inner = int(head[1:]), rest or None
    results: list[dict[str, Any]] = []
    while index < len(lineage) and len(results) < limit:
        page = ctx.store.search(
            lineage[index], query, mode=mode, scope=scope, limit=limit - len(results), cursor=inner
        )
        results.extend(_hit(hit, earlier=index > 0) for hit in page.results[: limit - len(results)])
        if page.next_cursor:
            return {"results": results, "next_cursor": f"L{index}:{page.next_cursor}"}
        index, inner = index + 1, None
    return {"results": results, "next_cursor": f"L{index}:" if index < len(lineage) else None}


@tool(id=Param("A message id, a summary id (sum_…) or a large-content id."))
def lcm_describe(ctx: ToolContext, id: str) -> dict[str, Any]:  # "id" is the name the model sees
    """Show the metadata of a message, summary or large content without its full text.

    For a summary: kind, depth, seq and time range, token counts, source ids
    and parent summary. For a message: role, seq, time, tokens and the summary
    that covers it.
    """
    ctx = _scope_for(ctx, id)
    record = _find_summary(ctx, id)
    if record is not None:
        return {
            "id": record.id,
            "kind": "summary",
            "summary_kind": record.kind,
            "depth": record.depth,
            "seq_range": [record.seq_start, record.seq_end],
            "time_range": [_iso(record.time_start), _iso(record.time_end)],
            "token_count": record.token_count,
            "descendant_count": record.descendant_count,
            "fallback": record.fallback,
            "parent_summary": ctx.store.parent_summary(ctx.conversation_id, record.id),
            "in_view": ctx.in_view(record.id),
            **_ids(record.source_ids),
        }
    stored = ctx.store.get_message(ctx.conversation_id, id)
    if stored is not None:
        return _message_meta(ctx, stored)
    large = ctx.store.get_large_content(ctx.conversation_id, id)
    if large is not None:
        owner = ctx.store.get_message(ctx.conversation_id, large.message_id)
        return {
            "id": large.id,
            "kind": "large_content",
            "message_id": large.message_id,
            "seq": owner.seq if owner else None,
            "token_count": large.token_count,
            "chars": len(large.content),
            "lines": large.content.count("\n") + 1,
            "time": _iso(large.created_at),
            "digest": digest(large.content),
        }
    return _unknown(id)


@tool(
    id=Param("A summary id (sum_…), a message id or a large-content id."),
    offset=Param(
        "Where to start: an item index for a summary, a character offset otherwise.", minimum=0
    ),
    limit=Param(
        "Most items (summary) or characters (message, large content) to return.",
        minimum=1,
        maximum=MAX_CONTENT_CHARS,
    ),
)
def lcm_expand(
    ctx: ToolContext,
    id: str,  # the name the model sees
    offset: int = 0,
    limit: int | None = None,
) -> dict[str, Any]:
    """Reopen an id: a summary's sources in order, or the full text of a message or large content.

    Long results are paginated: call again with next_offset until it is null.
    """
    ctx = _scope_for(ctx, id)
    record = _find_summary(ctx, id)
    if record is not None:
        return _expand_summary(ctx, record, offset, limit)
    stored = ctx.store.get_message(ctx.conversation_id, id)
    if stored is not None:
        return {
            "id": stored.id,
            "kind": "message",
            "role": stored.role,
            "seq": stored.seq,
            **_page(message_full_text(stored.message), offset, limit),
        }
    large = ctx.store.get_large_content(ctx.conversation_id, id)
    if large is not None:
        return {
            "id": large.id,
            "kind": "large_content",
            "message_id": large.message_id,
            **_page(large.content, offset, limit),
        }
    return _unknown(id)


def _expand_summary(
    ctx: ToolContext, record: SummaryRecord, offset: int, limit: int | None
) -> dict[str, Any]:
    sources = list(record.source_ids)
    most = min(limit or MAX_EXPAND_ITEMS, MAX_EXPAND_ITEMS)
    budget = MAX_CONTENT_CHARS
    items: list[dict[str, Any]] = []
    index = offset
    while index < len(sources) and len(items) < most and budget > 0:
        source_id = sources[index]
        entry: dict[str, Any]
        if record.kind == "condensed":
            child = ctx.store.get_summary(ctx.conversation_id, source_id)
            text = child.content if child else ""
            entry = {"id": source_id, "kind": "summary"}
            if child is not None:
                entry["seq_range"] = [child.seq_start, child.seq_end]
                entry["depth"] = child.depth
        else:
            stored = ctx.store.get_message(ctx.conversation_id, source_id)
            text = message_full_text(stored.message) if stored else ""
            entry = {"id": source_id, "kind": "message"}
            if stored is not None:
                entry["seq"] = stored.seq
                entry["role"] = stored.role
        cap = min(MAX_ITEM_CHARS, budget)
        if len(text) > cap:
            # Always return at least part of one item, so paging makes progress.
            if items and cap < MAX_ITEM_CHARS:
                break
            entry["content"] = text[:cap]
            entry["truncated"] = True
            entry["total_chars"] = len(text)
        else:
            entry["content"] = text
        budget -= len(entry["content"])
        items.append(entry)
        index += 1
    return {
        "id": record.id,
        "kind": "summary",
        "summary_kind": record.kind,
        "depth": record.depth,
        "offset": offset,
        "items": items,
        "total_items": len(sources),
        "next_offset": index if index < len(sources) else None,
        "note": "items marked truncated: lcm_expand their id (with offset) for the full text",
    }


TOOLS: dict[str, ToolDef] = {spec.name: spec for spec in (lcm_grep, lcm_describe, lcm_expand)}


def tool_schemas() -> list[dict[str, Any]]:
    """The OpenAI function schemas of the three tools."""
    return [spec.schema() for spec in TOOLS.values()]


def call_tool(name: str, args: dict[str, Any] | str | None, ctx: ToolContext) -> str:
    """Run one tool and return its JSON result; every failure becomes ``{"error": ...}``."""
    spec = TOOLS.get(name) if isinstance(name, str) else None
    if spec is None:
        return json.dumps({"error": f"Unknown context engine tool: {_bounded(str(name), 100)}"})
    try:
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise _ArgumentError("arguments must be a JSON object")
        result = spec.fn(ctx, **spec.bind(args))
    except _ArgumentError as exc:
        result = {"error": str(exc)}
    except ValueError as exc:
        result = {"error": f"{name}: bad arguments: {exc}"}
    except Exception as exc:  # the model gets a JSON error, never a traceback
        result = {"error": f"{name} failed: {type(exc).__name__}: {_bounded(str(exc), 300)}"}
    return json.dumps(result, ensure_ascii=False)
