"""The ``ContextEngine`` contract and the helpers every host needs to drive it.

A context engine decides when a conversation is compacted and what the model
sees. Exactly one engine is active per agent; the host
(:class:`contextengine.ContextHost`, or any agent loop that follows the same
order) calls its hooks in this lifecycle::

    update_model(...)                      at construction and on every model switch
    on_session_start(session_id, **kw)     once, at a real session boundary
    ┌ per request ──────────────────────────────────────────────────────────────┐
    │ should_defer_preflight_to_real_usage / should_compress(_info)             │
    │ should_compress_preflight → compress(...)        (preflight, rare)        │
    │ select_context(...)          request-only view, never persisted           │
    │ update_from_response(usage)  after every provider response                │
    │ should_compress → compress   or prune_tool_results_only (after tool calls)│
    └ on_turn_complete(messages, usage)  observation, once per finished turn ──┘
    on_session_end(session_id, messages)   once, at a real session boundary
    on_session_reset()                     when the user starts over, then
    on_session_start(new_id, old_session_id=..., boundary_reason="reset", **kw)
    carry_over_new_session_context(old_id, new_id, messages=...)   optional

    A host that gives the conversation a new session id after a compaction
    calls ``on_session_start(new_id, old_session_id=..., boundary_reason="compression")``
    alone: the same conversation goes on under another id.

    on demand: has_content_to_compress → compress(force=True, keep_last=...)  (manual)
               plan_compression(...)       a preview: no summariser, nothing changed
               chat_commands()             slash commands for the person (contextengine chat)

The method names and signatures are public API: engines written against this
contract must keep working, so new information reaches hooks as new keyword
arguments that :func:`call_with_supported_kwargs` filters for old engines.

Token state lives in plain integer attributes that hosts read directly;
``last_prompt_tokens == -1`` means "compaction just ran, waiting for real
usage". Every default below is a class attribute, so an engine that never calls
``super().__init__()`` still satisfies the contract.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from contextengine.redact import redact

if TYPE_CHECKING:
    from contextengine.commands import ChatCommand
    from contextengine.compaction_plan import CompressionPlan

__all__ = [
    "CompactionGate",
    "ContextEngine",
    "automatic_compaction_status_message",
    "call_with_supported_kwargs",
    "compaction_threshold",
    "sanitize_memory_context",
]

Message = dict[str, Any]
T = TypeVar("T")

#: The threshold's floor (see :func:`compaction_threshold`): a cap or an output
#: reservation never brings it under this many tokens, nor under half the window.
MIN_THRESHOLD_TOKENS = 4_096

#: Bounds of :func:`sanitize_memory_context`.
MEMORY_CONTEXT_MAX_CHARS = 6_000
MEMORY_CONTEXT_HEAD_CHARS = 4_000
MEMORY_CONTEXT_TAIL_CHARS = 1_500


class ContextEngine(ABC):
    """A strategy that manages one agent's conversation context.

    Subclasses implement :attr:`name`, :meth:`update_from_response`,
    :meth:`should_compress` and :meth:`compress`; every other hook has a safe
    default that leaves the conversation untouched. Hooks say in their
    docstring whether they *observe* (no effect on what is sent), *transform*
    (return a new message list) or *recover* (run after a failure).
    """

    # Token state: engines keep it current, hosts read it directly.
    last_prompt_tokens: int = 0
    last_completion_tokens: int = 0
    last_total_tokens: int = 0
    threshold_tokens: int = 0
    context_length: int = 0
    compression_count: int = 0

    # Configuration defaults.
    model: str = ""
    threshold_percent: float = 0.75
    #: Non-system head messages kept verbatim, besides the always-kept system prompt.
    protect_first_n: int = 3
    protect_last_n: int = 6
    #: False makes the host's one-line notice for a successful automatic
    #: compaction silent; warnings, errors and manual results are never silenced.
    emit_automatic_compaction_status: bool = True
    #: Per-model threshold overrides: the longest key that is a substring of the
    #: model name wins. Never mutated in place; assign a new dict per instance.
    model_thresholds: dict[str, float] = {}  # noqa: RUF012 - read-only default, see above
    #: An absolute cap on ``threshold_tokens`` beside the percentage (None: no cap).
    max_threshold_tokens: int | None = None
    #: Output space reserved for the reply (the request's ``max_tokens``, which
    #: the host sets here before calling :meth:`update_model`): the threshold
    #: stays this far below the context length.
    reserved_output_tokens: int = 0
    #: Optional report of the last compress call, read by hosts for their events:
    #: any object or mapping with ``summarizer_calls`` and ``fallback_used``;
    #: a ``warning`` there (the engine went on after a failure of its own)
    #: becomes an ``engine_warning`` :class:`~contextengine.HostEvent`.
    last_compression: Any = None
    #: Set by :meth:`select_context` when the view it returned starts with the
    #: previous view it returned: how many leading messages are those, unchanged
    #: (the same objects). The host then sanitises and validates only the rest,
    #: so an engine that grows its view by appending costs what was appended.
    #: 0 (the default) means "check it all".
    last_view_reused: int = 0
    # The threshold_percent configured before any per-model override applied;
    # snapshotted on the first update_model so that switching back restores it.
    _configured_threshold_percent: float | None = None

    # ------------------------------------------------------------------ required

    @property
    @abstractmethod
    def name(self) -> str:
        """Short identifier of the engine, such as ``"compressor"`` or ``"lcm"``."""

    @abstractmethod
    def update_from_response(self, usage: dict[str, Any]) -> None:
        """Observe the usage of a provider response.

        Called by the host after every response, with the provider's usage (the
        host passes it through :func:`~contextengine.normalize_usage` first).
        Engines update ``last_prompt_tokens`` and friends here.
        """

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the conversation must be compacted now.

        Called by the host after tool calls and before a request (preflight).
        ``prompt_tokens`` is a fresh count when the host has one; otherwise the
        engine decides from ``last_prompt_tokens``.
        """

    @abstractmethod
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
        """Transform: return a valid OpenAI-format message list that fits the budget.

        Called by the host when :meth:`should_compress` says so, on provider
        overflow, and for a manual ``/compress`` (``force=True``, with the
        user's ``focus_topic``). ``force`` bypasses engine-owned cooldowns;
        ``memory_context`` is text from a memory provider for the summary
        prompt. The input list must not be mutated.

        ``keep_last`` (manual compaction only; None otherwise) replaces the
        engine's own tail: keep the last ``keep_last`` messages verbatim, cut
        at :func:`~contextengine.compaction_plan.keep_last_cut` (moved back so
        a tool call stays with its results), and compact everything between
        the system prompt and the cut. The host passes it only to engines
        whose ``compress`` names it; an engine that does not is told nothing
        and the user is told it cannot.
        """

    # ------------------------------------------------------------------ decisions

    def should_compress_info(self, prompt_tokens: int | None = None) -> tuple[bool, str | None]:
        """Like :meth:`should_compress`, plus the reason when it says no.

        Engines with block reasons (a cooldown, anti-thrashing) override this
        so hosts can warn instead of silently skipping. Default:
        ``(should_compress(prompt_tokens), None)``.
        """
        return self.should_compress(prompt_tokens), None

    def should_compress_preflight(self, messages: list[Message]) -> bool:
        """Whether to compact before sending, judged on the messages themselves.

        Called by the host before a request when no real usage is available
        yet (a resumed session, a big pasted input). Default: False.
        """
        return False

    def should_defer_preflight_to_real_usage(self, rough_tokens: int) -> bool:
        """Whether to skip the preflight check and wait for the provider's real count.

        Called by the host before a request with the rough estimate of the
        request. Default: False (preflight decides on the estimate).
        """
        return False

    def has_content_to_compress(
        self, messages: list[Message], *, keep_last: int | None = None
    ) -> bool:
        """Whether :meth:`compress` could free anything; False skips a manual compress.

        Called by the host on a manual ``/compress`` before calling
        :meth:`compress`, with the ``keep_last`` the user asked for (if any,
        and if this signature names it). Default: True.
        """
        return True

    def plan_compression(
        self,
        messages: list[Message],
        *,
        keep_last: int | None = None,
        focus_topic: str | None = None,
    ) -> CompressionPlan | None:
        """Decide: what a manual :meth:`compress` would summarise, without doing it.

        Called by the host for a preview (``/compress --preview``,
        ``host.plan_compression``). Must not call a summariser nor change the
        conversation; an engine that archives messages may store the ones it
        has not seen, as on any hook. Default: None ("this engine cannot
        preview"), which the host reports as such.
        """
        return None

    # ------------------------------------------------------------------ transforms

    def prune_tool_results_only(
        self, messages: list[Message], current_tokens: int | None = None
    ) -> tuple[list[Message], int]:
        """Transform without a model: trim old tool-result payloads.

        Called by the host after tool calls when :meth:`should_compress` says
        no, on the engine's own low, cost-oriented trigger. Returns the new
        list and the tokens reclaimed. Default: the very same list object and 0,
        which tells the host that nothing changed.
        """
        return messages, 0

    def select_context(
        self,
        request_messages: list[Message],
        *,
        conversation_messages: list[Message] | None = None,
        incoming_message: Message | None = None,
        budget_tokens: int = 0,
    ) -> list[Message] | None:
        """Transform this one request before generation (retrieval, topic routing).

        Called by the host for every request, after preflight compaction. The
        result is sent instead of ``request_messages`` for this request only and
        is never persisted. Default: None, which leaves the request
        byte-identical.
        """
        return None

    # ------------------------------------------------------------------ observation

    def on_turn_complete(  # noqa: B027 - an optional hook: doing nothing is its default
        self, messages: list[Message], usage: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """Observe a finished turn.

        Called by the host once per turn with a read-only copy of the
        conversation. ``usage`` is None when no response was reached; kwargs may
        carry ``turn_id``, ``interrupted`` and ``failed``. Default: nothing.
        """

    def get_automatic_compaction_status_message(
        self, *, phase: str, default_message: str, **context: Any
    ) -> str | None:
        """Customise the one-line notice of a successful automatic compaction.

        Called through :func:`automatic_compaction_status_message`. Return None
        to use ``default_message``; return an empty string to stay silent.
        Default: None.
        """
        return None

    # ------------------------------------------------------------------ session

    def on_session_start(  # noqa: B027 - an optional hook: doing nothing is its default
        self, session_id: str, **kwargs: Any
    ) -> None:
        """Observe the start (or resumption) of a session: a real boundary only.

        Called by the host once per session, never per turn. ``kwargs`` carry
        the host caller's keyword arguments and, at a transition,
        ``old_session_id`` with ``boundary_reason``: ``"reset"`` after
        :meth:`on_session_reset` (the user started over), ``"compression"``
        when the host gave the same conversation a new id after a compaction
        (a continuation, not a new conversation: no reset precedes it).
        Default: nothing.
        """

    def carry_over_new_session_context(  # noqa: B027 - an optional hook: doing nothing is its default
        self, old_session_id: str, new_session_id: str, messages: list[Message] | None = None
    ) -> None:
        """Carry state from the session the user left into the one just started.

        Called by the host on a reset, after ``on_session_start(new_session_id)``,
        with a copy of the old session's last history as ``messages`` (None
        when the host had none). An engine may make the old conversation
        reachable from the new one (lcm links them so the model can still
        search it). Default: nothing.
        """

    def on_session_end(  # noqa: B027 - an optional hook: doing nothing is its default
        self, session_id: str, messages: list[Message]
    ) -> None:
        """Observe the end of a session: a real boundary only, never per turn.

        Called by the host when the user quits or the session is replaced.
        Default: nothing.
        """

    def on_session_reset(self) -> None:
        """Recover: forget the per-conversation token state when the user starts over.

        Called by the host between :meth:`on_session_end` and the next
        :meth:`on_session_start`. Default: zeroes the ``last_*`` token fields
        and ``compression_count``.
        """
        self.last_prompt_tokens = 0
        self.last_completion_tokens = 0
        self.last_total_tokens = 0
        self.compression_count = 0

    # ------------------------------------------------------------------ tools

    def is_own_message(self, message: Message) -> bool:
        """Whether ``message`` is one this engine put into the context, not a participant's.

        A summary or a block of reference material, for example. The host asks
        it to find the *latest user message*, which the window guarantee never
        shortens (:mod:`contextengine.window`). Default: False.
        """
        return False

    def recovery_hint(self, message: Message) -> str | None:
        """How the model can get back the full text of ``message`` once it was shortened.

        Called by the host when a request cannot fit the window and it cuts a
        message to an excerpt (:mod:`contextengine.window`): the answer goes
        into the excerpt's marker, e.g. ``"lcm_expand msg_3f2a…"``. Default:
        None (the marker then only says that text was cut).
        """
        return None

    def chat_commands(self) -> Mapping[str, ChatCommand]:
        """Slash commands this engine adds to ``contextengine chat``, by name (no slash).

        Called once by the chat when it starts; see :mod:`contextengine.commands`
        for the rules (names, clashes with built-ins, what a handler gets and
        how its errors are shown). The handlers are for the person at the
        terminal, as :meth:`get_tool_schemas` is for the model. Default: {}.
        """
        return {}

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """Tools this engine offers the model, as OpenAI function schemas. Default: []."""
        return []

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run one of this engine's tools; the result is always a JSON string.

        Called by the host when the model calls a tool named in
        :meth:`get_tool_schemas`. Default: a JSON error for any name.
        """
        return json.dumps({"error": f"Unknown context engine tool: {name}"})

    # ------------------------------------------------------------------ status and model

    def get_status(self) -> dict[str, Any]:
        """A snapshot for status lines: tokens, threshold, usage percent, compactions."""
        prompt = max(0, self.last_prompt_tokens)
        percent = 0.0
        if self.context_length > 0:
            percent = min(100.0, max(0.0, 100.0 * prompt / self.context_length))
        return {
            "last_prompt_tokens": prompt,
            "threshold_tokens": self.threshold_tokens,
            "context_length": self.context_length,
            "usage_percent": percent,
            "compression_count": self.compression_count,
        }

    def update_model(
        self,
        model: str,
        context_length: int,
        base_url: str = "",
        api_key: str = "",
        provider: str = "",
        api_mode: str = "",
    ) -> None:
        """Adopt a model and its context length; recompute ``threshold_tokens``.

        Called by the host at construction, on every model switch, and when
        the request's ``max_tokens`` changes (the host sets
        :attr:`reserved_output_tokens` first). ``threshold_tokens`` is
        :func:`compaction_threshold` of the context length and percent, where
        percent is the per-model override from :attr:`model_thresholds`
        (longest substring match of the model name) or else the percent
        configured before any override, so switching back to an unmatched
        model restores it. Another model (a different name) also forgets the
        last real usage: it was counted by the old model's tokenizer, and a
        count from the new one arrives with its first response.
        """
        if model != self.model:
            self.last_prompt_tokens = 0
            self.last_completion_tokens = 0
            self.last_total_tokens = 0
        if self._configured_threshold_percent is None:
            self._configured_threshold_percent = self.threshold_percent
        percent = self._configured_threshold_percent
        matches = [key for key in self.model_thresholds if key and key in model]
        if matches:
            percent = self.model_thresholds[max(matches, key=len)]
        self.model = model
        self.context_length = int(context_length)
        self.threshold_percent = percent
        self.threshold_tokens = compaction_threshold(
            self.context_length,
            percent,
            cap=self.max_threshold_tokens,
            reserved_output=self.reserved_output_tokens,
        )


def compaction_threshold(
    context_length: int, percent: float, *, cap: int | None = None, reserved_output: int = 0
) -> int:
    """The prompt size, in tokens, at which automatic compaction starts.

    The rule, in order:

    1. ``context_length * percent``, the configured share of the window;
    2. no more than ``cap`` (an absolute limit, when one is configured);
    3. no more than ``context_length - reserved_output``, so that the reply
       (the request's ``max_tokens``) still fits after the prompt;
    4. never under the floor: the smallest of step 1, :data:`MIN_THRESHOLD_TOKENS`
       (4,096) and half the window. Steps 2 and 3 can otherwise leave a
       threshold that the system prompt and the summary alone exceed (a
       16k-token ``max_tokens`` on a 16k window), and compaction would run on
       every request to no effect. The percentage alone is trusted as
       configured: a deliberately low one is not raised.
    """
    context_length = max(0, int(context_length))
    share = int(context_length * percent)
    threshold = share
    if cap is not None and cap > 0:
        threshold = min(threshold, int(cap))
    if reserved_output > 0:
        threshold = min(threshold, context_length - int(reserved_output))
    floor = min(share, MIN_THRESHOLD_TOKENS, context_length // 2)
    return max(threshold, floor)


class CompactionGate:
    """One compaction at a time per engine, for hosts that call from several threads.

    Engines run their ``compress`` through :meth:`run`. A second caller waits
    for the first; when it asked to compact the very list the first one just
    compacted (two threads reacting to the same overflow), it gets the first
    one's result instead of compacting the result again. Any other caller
    then compacts its own list. The gate is reentrant, so a compress that
    calls compress again (a retry) does not deadlock.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._last_input: list[Any] | None = None
        self._last_key: Any = None
        self._last_output: list[Any] | None = None

    def run(
        self, messages: list[Any], compact: Callable[[], list[Any]], *, key: Any = None
    ) -> list[Any]:
        """``compact()`` under the gate, or the result just made for ``messages``.

        ``key`` holds the call's other arguments that change the result (a
        manual ``keep_last``, a focus): a waiting caller reuses the first one's
        result only when they are equal too.
        """
        waited = not self._lock.acquire(blocking=False)
        if waited:
            self._lock.acquire()
        try:
            if (
                waited
                and messages is self._last_input
                and key == self._last_key
                and self._last_output is not None
            ):
                return list(self._last_output)
            result = compact()
            self._last_input, self._last_key, self._last_output = messages, key, result
            return result
        finally:
            self._lock.release()


def automatic_compaction_status_message(
    engine: ContextEngine, *, phase: str, default_message: str, **context: Any
) -> str | None:
    """The user-visible line for a successful automatic compaction, or None for silence.

    None when the engine sets ``emit_automatic_compaction_status = False``;
    otherwise the engine's :meth:`~ContextEngine.get_automatic_compaction_status_message`
    result when it gives one, else ``default_message``. An empty or blank
    result means None. Hosts use this only for automatic successes: warnings,
    errors and manual compress results are always shown.
    """
    if not getattr(engine, "emit_automatic_compaction_status", True):
        return None
    custom_hook = getattr(engine, "get_automatic_compaction_status_message", None)
    message: str | None = None
    if callable(custom_hook):
        message = custom_hook(phase=phase, default_message=default_message, **context)
    if message is None:
        message = default_message
    return message if message and message.strip() else None


_SIGNATURES: dict[Any, tuple[bool, frozenset[str]] | None] = {}


def _accepted_keywords(fn: Callable[..., Any]) -> tuple[bool, frozenset[str]] | None:
    """(accepts **kwargs, names accepted by keyword), or None when not introspectable."""
    key = getattr(fn, "__func__", fn)
    try:
        return _SIGNATURES[key]
    except (KeyError, TypeError):
        pass
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        found = None
    else:
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        names = frozenset(
            p.name
            for p in params
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        )
        found = (var_kw, names)
    with contextlib.suppress(TypeError):  # an unhashable callable is just not cached
        _SIGNATURES[key] = found
    return found


def call_with_supported_kwargs(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn`` with only the keyword arguments its signature accepts.

    A callee with ``**kwargs`` accepts all of them; one whose signature cannot
    be inspected gets them all too. This keeps engines written against an older
    contract (say ``compress(messages, current_tokens=None)``) working when the
    host passes newer arguments. ``fn`` is called exactly once, and an exception
    raised inside it propagates unchanged: nothing is retried.
    """
    accepted = _accepted_keywords(fn)
    if accepted is not None:
        var_kw, names = accepted
        if not var_kw:
            kwargs = {k: v for k, v in kwargs.items() if k in names}
    return fn(*args, **kwargs)


def sanitize_memory_context(text: str) -> str:
    """Prepare memory-provider text for a summary prompt.

    Strips surrounding whitespace, redacts secrets, and bounds the result to
    6,000 characters by keeping the first 4,000 and the last 1,500 around a
    truncation marker (the start usually holds the durable facts, the end the
    most recent ones).
    """
    cleaned = redact((text or "").strip())
    if len(cleaned) <= MEMORY_CONTEXT_MAX_CHARS:
        return cleaned
    dropped = len(cleaned) - MEMORY_CONTEXT_HEAD_CHARS - MEMORY_CONTEXT_TAIL_CHARS
    marker = f"\n[... {dropped} characters of memory context truncated ...]\n"
    return cleaned[:MEMORY_CONTEXT_HEAD_CHARS] + marker + cleaned[-MEMORY_CONTEXT_TAIL_CHARS:]
