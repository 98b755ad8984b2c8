"""``RecordingEngine``: a context engine that records every hook call, for testing hosts.

Use it to check that your own agent loop (or :class:`~contextengine.ContextHost`)
calls the contract's hooks in the right order and with the right arguments::

    engine = RecordingEngine(should_compress=[False, True])
    host = ContextHost(engine, model="m", context_length=1_000)
    ...
    assert engine.hook_names() == ["update_model", "on_session_start", ...]

Every hook appends ``(hook_name, arguments)`` to :attr:`RecordingEngine.calls`
(arguments by parameter name; message lists are recorded as shallow copies, so
later changes by the caller do not rewrite history). Behaviour is
configurable per hook; the defaults are harmless: never compress on its own,
and when asked to compress, keep the system prompt and the last
``keep_last`` messages (starting at a user message, so tool pairs stay
whole) behind one summary note. A manual compaction's ``keep_last`` is
honoured exactly (:func:`~contextengine.compaction_plan.keep_last_cut`), and
:meth:`RecordingEngine.plan_compression` previews it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from contextengine.compaction_plan import CompressionPlan, keep_last_cut
from contextengine.engine import ContextEngine
from contextengine.tokens import count_message_tokens

__all__ = ["RecordingEngine"]

Message = dict[str, Any]
Answer = bool | Sequence[bool] | Callable[[int | None], bool]


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _default_compress(messages: list[Message], keep_last: int) -> list[Message]:
    """System prompt + note + the tail from the latest user message at least keep_last back."""
    head = [m for m in messages[:1] if m.get("role") == "system"]
    body = messages[len(head) :]
    cut = max(0, len(body) - keep_last)
    while cut > 0 and body[cut].get("role") != "user":
        cut -= 1
    if cut == 0:
        return list(messages)
    note = {"role": "user", "content": f"[{cut} earlier messages were compacted]"}
    return [*head, note, *body[cut:]]


def _keep_compress(messages: list[Message], keep_last: int) -> list[Message]:
    """The system prompts, one note, and exactly the last ``keep_last`` messages (cut made safe)."""
    cut = keep_last_cut(messages, keep_last)
    folded = cut.index - cut.system_end
    if folded <= 0:
        return list(messages)
    note = {"role": "user", "content": f"[{folded} earlier messages were compacted]"}
    return [*messages[: cut.system_end], note, *messages[cut.index :]]


class RecordingEngine(ContextEngine):
    """Records every hook call; answers as configured.

    ``should_compress`` is a bool, a sequence of answers consumed one per call
    (the last one repeats), or a function of ``prompt_tokens``.
    ``compress_result`` is a list to return, a function of the messages, or
    None for the default compaction. ``select_result`` is what
    ``select_context`` returns (default None: the request is unchanged).
    ``tools`` maps a tool name to a function of the arguments; the schemas
    offered to the model are derived from the names.
    """

    def __init__(
        self,
        *,
        name: str = "recording",
        should_compress: Answer = False,
        preflight: bool = False,
        compress_result: list[Message] | Callable[[list[Message]], list[Message]] | None = None,
        select_result: Any = None,
        has_content: bool = True,
        keep_last: int = 4,
        tools: dict[str, Callable[[dict[str, Any]], Any]] | None = None,
        quiet: bool = False,
    ) -> None:
        self._name = name
        self._answers = should_compress
        self._answer_index = 0
        self._preflight = preflight
        self._compress_result = compress_result
        self.select_result = select_result
        self._has_content = has_content
        self.keep_last = keep_last
        self._tools = dict(tools or {})
        self.emit_automatic_compaction_status = not quiet
        #: Every hook call in order: (hook name, arguments by parameter name).
        self.calls: list[tuple[str, dict[str, Any]]] = []

    # ------------------------------------------------------------------ inspection

    def hook_names(self, *, skip: Iterable[str] = ()) -> list[str]:
        """The names of the recorded calls, in order, leaving out those in ``skip``."""
        skipped = set(skip)
        return [name for name, _ in self.calls if name not in skipped]

    def calls_to(self, hook: str) -> list[dict[str, Any]]:
        """The arguments of every call to ``hook``, in order."""
        return [args for name, args in self.calls if name == hook]

    def _record(self, hook: str, **arguments: Any) -> None:
        self.calls.append((hook, {k: _copy(v) for k, v in arguments.items()}))

    # ------------------------------------------------------------------ contract

    @property
    def name(self) -> str:
        return self._name

    def update_from_response(self, usage: dict[str, Any]) -> None:
        self._record("update_from_response", usage=usage)
        self.last_prompt_tokens = int(usage.get("prompt_tokens", 0) or 0)
        self.last_completion_tokens = int(usage.get("completion_tokens", 0) or 0)
        self.last_total_tokens = int(usage.get("total_tokens", 0) or 0)

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        self._record("should_compress", prompt_tokens=prompt_tokens)
        answers = self._answers
        if callable(answers):
            return bool(answers(prompt_tokens))
        if isinstance(answers, bool):
            return answers
        if not answers:
            return False
        index = min(self._answer_index, len(answers) - 1)
        self._answer_index += 1
        return bool(answers[index])

    def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        memory_context: str = "",
        *,
        keep_last: int | None = None,
    ) -> list[Message]:
        self._record(
            "compress",
            messages=messages,
            current_tokens=current_tokens,
            focus_topic=focus_topic,
            force=force,
            memory_context=memory_context,
            keep_last=keep_last,
        )
        result = self._compress_result
        if callable(result):
            out = result(messages)
        elif result is not None:
            out = list(result)
        elif keep_last is not None:
            out = _keep_compress(messages, keep_last)
        else:
            out = _default_compress(messages, self.keep_last)
        self.compression_count += 1
        self.last_prompt_tokens = -1
        return out

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        self._record("should_compress_preflight", messages=messages)
        return self._preflight

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        self._record("should_defer_preflight_to_real_usage", rough_tokens=rough_tokens)
        return False

    def has_content_to_compress(
        self, messages: list[Message], *, keep_last: int | None = None
    ) -> bool:
        self._record("has_content_to_compress", messages=messages, keep_last=keep_last)
        return self._has_content

    def plan_compression(
        self,
        messages: list[Message],
        *,
        keep_last: int | None = None,
        focus_topic: str | None = None,
    ) -> CompressionPlan:
        """What the default compaction would fold into its note (a one-message "summary")."""
        self._record(
            "plan_compression", messages=messages, keep_last=keep_last, focus_topic=focus_topic
        )
        after = (
            _keep_compress(messages, keep_last)
            if keep_last is not None
            else _default_compress(messages, self.keep_last)
        )
        head = 1 if messages and messages[0].get("role") == "system" else 0
        if keep_last is not None:
            head = keep_last_cut(messages, keep_last).system_end
        # The compaction is head + one note + the kept tail, or the input unchanged.
        folded = head if after == messages else len(messages) - (len(after) - head - 1)
        summarized = messages[head:folded]
        return CompressionPlan(
            engine=self.name,
            messages=tuple(summarized),
            tokens_to_summarize=count_message_tokens(summarized) if summarized else 0,
            kept_messages=len(messages) - folded,
            keep_last=keep_last,
            tokens_before=count_message_tokens(messages),
            estimated_tokens_after=count_message_tokens(after),
            focus_topic=focus_topic,
        )

    def prune_tool_results_only(
        self, messages: list[Message], current_tokens: int | None = None
    ) -> tuple[list[Message], int]:
        self._record("prune_tool_results_only", messages=messages, current_tokens=current_tokens)
        return messages, 0

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        self._record(
            "select_context",
            request_messages=request_messages,
            incoming_message=incoming_message,
            budget_tokens=budget_tokens,
        )
        result = self.select_result
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]  # deliberately anything, to test hosts

    def on_turn_complete(
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        self._record("on_turn_complete", messages=messages, usage=usage, **kwargs)

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        self._record("on_session_start", session_id=session_id, **kwargs)

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        self._record("on_session_end", session_id=session_id, messages=messages)

    def on_session_reset(self) -> None:
        self._record("on_session_reset")
        super().on_session_reset()

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        self._record("update_model", model=model, context_length=context_length)
        super().update_model(model, context_length, base_url, api_key, provider, api_mode)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": tool,
                    "description": f"Recording engine tool {tool}.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
            for tool in self._tools
        ]

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        self._record("handle_tool_call", name=name, args=args, **kwargs)
        tool = self._tools.get(name)
        if tool is None:
            return super().handle_tool_call(name, args, **kwargs)
        result = tool(args)
        return result if isinstance(result, str) else json.dumps(result)
