"""The host's state and plumbing: what every part of the host shares.

The host is split by concern, each a class that adds to the one before:

* :class:`_HostState` (here): the engine, the history and what is known about
  it (:class:`_Prefix`), observers and events, and the generator plumbing
  (:class:`HookCall`, :data:`Op`) that lets one implementation serve the sync
  and the async host.
* :class:`~contextengine._host_compaction._CompactionPolicy`: when to compact,
  how many passes, and the event that tells the user what happened.
* :class:`~contextengine._host_requests._RequestPipeline`: what happens to a
  message on its way to the provider (preflight, ``select_context``,
  sanitising and validation, cache breakpoints) and after the response.
* :class:`~contextengine._host_tools._ToolRouting`: the engine's own tools.
* :class:`~contextengine._host_core._HostCore`: the sessions, and the whole.

Every operation is a generator that yields the :class:`HookCall` it wants
made and receives its result; ``host.py`` and ``async_host.py`` drive them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contextengine.engine import ContextEngine, call_with_supported_kwargs
from contextengine.events import Event, HostEvent, Observer, notify
from contextengine.tokens import REPLY_PRIMING_TOKENS, estimate_tokens_rough, message_tokens

__all__ = [
    "HookCall",
    "Message",
    "Op",
    "_HostState",
    "_Prefix",
    "_copy_value",
    "_describe",
    "_hook",
]

logger = logging.getLogger("contextengine.host")

Message = dict[str, Any]
T = TypeVar("T")


@dataclass(slots=True)
class HookCall:
    """One engine hook an operation wants called; drivers execute it and send back the result.

    ``blocking`` marks hooks that may do real work (a summariser call, a
    database write); the async driver runs those of a sync engine in a thread.
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    blocking: bool = False


Op = Generator[HookCall, Any, T]


def _hook(fn: Callable[..., Any], *args: Any, blocking: bool = False, **kwargs: Any) -> HookCall:
    return HookCall(fn, args, kwargs, blocking)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _rough_one(msg: Message, model: str | None = None) -> int:
    # Exact, not chars/4: the tokens cache makes this one encoding per new
    # message, and chars/4 underestimates code and logs by a third, which let
    # requests pass preflight that were over the window.
    return message_tokens(msg, model)


class _Prefix:
    """What the host knows about the longest prefix of a list it has seen.

    ``rough`` is the rough estimate of ``count`` messages (priming excluded);
    ``clean`` is how many leading messages are known to pass sanitising and
    validation unchanged and to hold no unanswered tool call.
    """

    __slots__ = ("clean", "count", "first", "last", "mid", "mid_index", "model", "rough")

    def __init__(self, model: str | None = None) -> None:
        #: The model whose tokenizer counts (its encoding: o200k_base, cl100k_base).
        self.model = model
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.rough = 0
        self.clean = 0
        self.first: Message | None = None
        self.last: Message | None = None
        self.mid: Message | None = None
        self.mid_index = 0

    def sync(self, messages: Sequence[Message]) -> None:
        """Forget everything unless ``messages`` still starts with the known prefix."""
        count = self.count
        if count and (
            len(messages) < count
            or messages[count - 1] is not self.last
            or messages[0] is not self.first
            or messages[self.mid_index] is not self.mid
        ):
            self.reset()

    def extend(self, messages: Sequence[Message], *, estimate: bool = True) -> int:
        """Account for the messages appended since; returns the rough estimate of all.

        With ``estimate=False`` only the identity of the prefix is tracked (the
        rough estimate is not kept up to date): for lists that are validated
        incrementally but never estimated, such as an engine's views.
        """
        self.sync(messages)
        total = len(messages)
        if total > self.count:
            if estimate:
                rough = self.rough
                for msg in messages[self.count :]:
                    rough += _rough_one(msg, self.model)
                self.rough = rough
            self.count = total
            self.first = messages[0]
            self.last = messages[-1]
            self.mid_index = total // 2
            self.mid = messages[self.mid_index]
        return self.rough + REPLY_PRIMING_TOKENS


def _copy_value(value: Any) -> Any:
    """A copy of the containers of ``value`` (dicts, lists); strings and numbers are shared."""
    if isinstance(value, dict):
        return {key: _copy_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_value(item) for item in value]
    return value


class _HistoryCopy:
    """Deep copies of the history's messages, made once per message.

    ``select_context`` gets these instead of the history: an engine that edits
    what it is given (a probe set the system prompt to "HACK") edits a copy,
    never the conversation the agent persists. Like :class:`_Prefix`, the
    known prefix is recognised by identity, so only appended messages are
    copied, and the same list is handed over each time, extended: copying
    even the list of pointers would make every request grow with the history.
    An engine that edits a copy, or replaces an item of the list, sees its
    own edit next time, which changes nothing that is persisted or, unless it
    returns it, sent; one that adds or removes items gets a fresh list.
    """

    __slots__ = ("_copies", "_length", "_tracker")

    def __init__(self) -> None:
        self._tracker = _Prefix()
        self._copies: list[Message] = []
        #: How long ``_copies`` was when handed over: another length means the engine changed it.
        self._length = 0

    def reset(self) -> None:
        self._tracker.reset()
        self._copies = []
        self._length = 0

    def of(self, messages: Sequence[Message]) -> list[Message]:
        """Copies of ``messages``, in the list handed over last time when it still fits."""
        tracker = self._tracker
        tracker.sync(messages)
        if tracker.count == 0 or len(self._copies) != self._length:
            tracker.reset()
            self._copies = []
        if len(messages) > len(self._copies):
            self._copies.extend(_copy_value(msg) for msg in messages[len(self._copies) :])
        tracker.extend(messages, estimate=False)
        self._length = len(self._copies)
        return self._copies


class _HostState:
    """The state every part of the host reads, and the plumbing they share."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        model: str,
        context_length: int,
        observers: Iterable[Observer] = (),
        max_compactions_per_turn: int = 3,
        cache_control: bool = False,
        rotate_session_on_compaction: Callable[[str], str] | None = None,
    ) -> None:
        if not isinstance(engine, ContextEngine):
            raise TypeError(f"engine must be a ContextEngine, got {type(engine).__qualname__}")
        self.engine = engine
        self.model = model
        self.context_length = int(context_length)
        self.observers: list[Observer] = list(observers)
        self.max_compactions_per_turn = max(1, int(max_compactions_per_turn))
        self.cache_control = cache_control
        #: Gives the session id a conversation continues under after each
        #: successful compaction (from the old one), or None to keep it.
        self.rotate_session_on_compaction = rotate_session_on_compaction
        #: Text from a memory provider, passed to compress when non-empty.
        self.memory_context = ""
        #: Provider hint for normalize_usage ("openai", "anthropic"...).
        self.provider = ""
        self.session_id: str | None = None
        #: Successful compactions since construction (all phases).
        self.compactions = 0
        self._history: list[Message] = []
        self._prefix = _Prefix(model or None)
        # The last view select_context returned, validated: an engine that extends
        # its view between requests (lcm) gets only the appended messages checked.
        self._view_prefix = _Prefix(model or None)
        # What select_context is given: copies, so that it cannot edit the history.
        self._history_copy = _HistoryCopy()
        self._turn_passes = 0
        self._turn_notes: set[str] = set()
        # Repairs already reported this session: a broken pair in the history
        # would otherwise be reported again on every request.
        self._repairs_reported: set[str] = set()
        self._rough_at_response = 0
        self._last_rough = 0
        # The tool schemas of the last request and their tokens (counted once per list).
        self._tools_seen: object = None
        self._tools_tokens = 0
        # The last request max_tokens told to the engine (the output it reserves).
        self._max_tokens: int | None = None
        self._update_model(model, self.context_length)

    @property
    def history(self) -> list[Message]:
        """The conversation to persist: the last history seen, compacted if the host did so."""
        return self._history

    @property
    def engine_name(self) -> str:
        try:
            return str(self.engine.name)
        except Exception:
            return type(self.engine).__name__

    def status(self) -> dict[str, Any]:
        """The engine's ``get_status()`` plus the host's compaction count and rough estimate."""
        try:
            status = dict(self.engine.get_status())
        except Exception as exc:
            status = {"error": _describe(exc)}
        status.setdefault("compression_count", self.compactions)
        status["host_compactions"] = self.compactions
        status["rough_tokens"] = self._last_rough
        return status

    def add_observer(self, observer: Observer) -> None:
        """Attach one more observer; observers are stackable and isolated."""
        self.observers.append(observer)

    def forget_cache(self) -> None:
        """Drop the per-prefix estimates: call after editing old history messages in place."""
        self._prefix.reset()
        self._view_prefix.reset()
        self._history_copy.reset()

    def _emit(self, event: Event) -> None:
        notify(self.observers, event)

    def _warn(self, kind: str, message: str, *, error: str | None = None, **details: Any) -> None:
        logger.warning("%s", message)
        self._emit(
            HostEvent(
                kind=kind,
                message=message,
                level="warning",
                engine=self.engine_name,
                session_id=self.session_id,
                error=error,
                details=details,
            )
        )

    def _note_once(self, kind: str, message: str, **details: Any) -> None:
        """A warning that would otherwise repeat on every request of the turn."""
        if message not in self._turn_notes:
            self._turn_notes.add(message)
            self._warn(kind, message, **details)

    def _update_model(self, model: str, context_length: int, **kwargs: Any) -> None:
        for prefix in (self._prefix, self._view_prefix):
            if prefix.model != (model or None):  # counts are per tokenizer: count again
                prefix.model = model or None
                prefix.reset()
        try:
            call_with_supported_kwargs(self.engine.update_model, model, context_length, **kwargs)
        except Exception as exc:
            self._warn(
                "hook_failed", f"update_model failed: {_describe(exc)}", error=_describe(exc)
            )

    def _reserve_output(self, max_tokens: int | None) -> None:
        """Tell the engine the request's ``max_tokens`` when it differs from the last one."""
        if max_tokens is None or max_tokens == self._max_tokens:
            return
        self._max_tokens = max_tokens
        try:
            # An attribute, not an update_model argument: engines that override
            # update_model with the contract's signature keep type-checking.
            self.engine.reserved_output_tokens = max(0, int(max_tokens))
        except Exception as exc:
            self._warn("hook_failed", f"reserving max_tokens failed: {_describe(exc)}")
            return
        self._update_model(self.model, self.context_length)

    def _rough(self, messages: list[Message]) -> int:
        """Rough estimate, incremental for the tracked history, full for other lists."""
        if messages is self._history:
            return self._prefix.extend(messages)
        return estimate_tokens_rough(messages)

    def _adopt(self, messages: list[Message], *, clean: bool = False) -> None:
        """Make ``messages`` the tracked history (a compacted one is already clean)."""
        if messages is not self._history:
            self._history = messages
            self._prefix.sync(messages)
        if clean:
            self._prefix.reset()
            self._prefix.extend(messages)
            self._prefix.clean = len(messages)
            # The engine compacted or pruned: the view it extends next is the one
            # it built then, not the one the host tracked, and may share that
            # one's first, middle and last messages while its size differs.
            self._view_prefix.reset()

    def _observe(self, name: str, call: HookCall) -> Op[Any]:
        """Run an observation hook; an exception is logged, reported and swallowed."""
        try:
            return (yield call)
        except Exception as exc:
            logger.exception("context engine hook %s raised", name)
            self._warn("hook_failed", f"{name} failed: {_describe(exc)}", error=_describe(exc))
            return None

    def _op_decide(self, call: HookCall, default: Any) -> Op[Any]:
        """Run a decision hook; an exception means "no" (the default), with a warning."""
        try:
            return (yield call)
        except Exception as exc:
            name = getattr(call.fn, "__name__", "hook")
            self._note_once("hook_failed", f"{name} failed: {_describe(exc)}", error=_describe(exc))
            return default
