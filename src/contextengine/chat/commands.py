"""The slash commands of ``contextengine chat``: ``/compress`` parsing, previews, engine commands.

``/compress`` takes, in any order::

    here N          keep the last N messages verbatim, compact everything before them
    --keep N        the same (also --keep=N)
    --preview       show what would be summarised and the estimated saving; change nothing
    FOCUS WORDS     what the summary should prioritise (the rest of the line)
    --              ends the options: everything after it is focus, even "here" or "--keep"

``here`` followed by a number means the tail wherever it stands; as the
first word, ``here`` without a number is a usage error rather than a focus
topic, so a mistyped command never compacts anything (elsewhere it is a
focus word). A usage error prints one line and changes nothing.

Engine commands come from :meth:`ContextEngine.chat_commands` (see
:mod:`contextengine.commands` for the rules); :func:`engine_commands` checks
them once, when the chat starts, and :func:`run_engine_command` runs one,
turning any exception into one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contextengine.commands import ChatCommand, ChatCommandInput
from contextengine.compaction_plan import CompressionPlan
from contextengine.engine import ContextEngine
from contextengine.host import ContextHost
from contextengine.summary_prompt import content_text

__all__ = [
    "BUILTIN_COMMANDS",
    "CommandUsageError",
    "CompressArgs",
    "compress_command",
    "engine_commands",
    "help_text",
    "parse_compress",
    "render_plan",
    "run_engine_command",
]

Message = dict[str, Any]

#: The built-in commands and their help lines; an engine cannot take these names.
BUILTIN_COMMANDS: dict[str, str] = {
    "compress": "/compress [here N | --keep N] [--preview] [focus]  compact now",
    "status": "/status  context usage bar, threshold, compactions",
    "engine": "/engine  the active engine and its tools",
    "reset": "/reset  start a new session (the old one stays saved)",
    "help": "/help  this list",
    "quit": "/quit  save and leave (also /exit, /q, Ctrl-D)",
    "exit": "",
    "q": "",
}
COMPRESS_USAGE = "usage: /compress [here N | --keep N] [--preview] [focus words]"
_NAME = re.compile(r"[a-z][a-z0-9_-]*")
# Of a long plan, the oldest and the newest messages are listed, the rest counted.
_LIST_FIRST, _LIST_LAST = 5, 3
_EXCERPT_CHARS = 80
_ERROR_CHARS = 300


class CommandUsageError(ValueError):
    """A slash command typed wrong; its message is the one line the user sees."""


@dataclass(frozen=True, kw_only=True)
class CompressArgs:
    """``/compress`` as parsed: the tail to keep, preview or not, and the focus topic."""

    keep_last: int | None = None
    preview: bool = False
    focus: str | None = None


def _count(word: str | None, option: str) -> int:
    if word is None or not word.isdigit():
        raise CommandUsageError(f"{option} needs a whole number of messages; {COMPRESS_USAGE}")
    return int(word)


def _is_count(words: list[str], index: int) -> bool:
    return index < len(words) and words[index].isdigit()


def parse_compress(text: str) -> CompressArgs:
    """Parse what follows ``/compress``; raises :class:`CommandUsageError`."""
    words = text.split()
    keep: int | None = None
    preview = False
    focus: list[str] = []
    index = 0

    def set_keep(value: int) -> None:
        nonlocal keep
        if keep is not None and keep != value:
            raise CommandUsageError(f"two different numbers to keep; {COMPRESS_USAGE}")
        keep = value

    while index < len(words):
        word = words[index]
        if word == "--":
            focus.extend(words[index + 1 :])
            break
        if word == "--preview":
            preview = True
        elif word == "--keep":
            index += 1
            set_keep(_count(words[index] if index < len(words) else None, "--keep"))
        elif word.startswith("--keep="):
            set_keep(_count(word.partition("=")[2], "--keep"))
        elif word.startswith("--"):
            raise CommandUsageError(f"unknown option {word}; {COMPRESS_USAGE}")
        elif word.lower() == "here" and (index == 0 or _is_count(words, index + 1)):
            index += 1
            set_keep(_count(words[index] if index < len(words) else None, "here"))
        else:
            focus.append(word)
        index += 1
    return CompressArgs(keep_last=keep, preview=preview, focus=" ".join(focus) or None)


def _excerpt(message: Message) -> str:
    role = str(message.get("role") or "?")
    text = " ".join(content_text(message.get("content")).split())
    calls = [
        str((call.get("function") or {}).get("name") or "?")
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    if calls:
        text = (text + " " if text else "") + f"[calls {', '.join(calls)}]"
    if len(text) > _EXCERPT_CHARS:
        text = text[: _EXCERPT_CHARS - 1] + "…"
    return f"{role}: {text}"


def render_plan(plan: CompressionPlan | None, engine: str) -> str:
    """The preview as the chat prints it; says plainly that nothing was changed."""
    if plan is None:
        return (
            f"no preview: the {engine} engine cannot preview a compaction "
            "(or keep a chosen number of messages); nothing was changed"
        )
    count = len(plan.messages)
    kept = f"keep the last {plan.kept_messages} message(s) verbatim"
    if plan.moved:
        kept += (
            f" ({plan.keep_last} asked; the cut moves back so a tool call stays with its results)"
        )
    folded = (
        f" and fold in {plan.previous_summaries} earlier summary(ies)"
        if plan.previous_summaries
        else ""
    )
    if count:
        what = f"summarise {count} message(s) ({plan.tokens_to_summarize:,} tokens){folded}"
    else:
        what = "summarise nothing"
    lines = [
        f"preview, nothing changed and no summariser called: the {plan.engine} engine "
        f"would {what} and {kept}.",
        f"  context {plan.tokens_before:,} → about {plan.estimated_tokens_after:,} tokens "
        + (
            f"(saving about {plan.estimated_saving:,})"
            if plan.estimated_tokens_after <= plan.tokens_before
            else "(no saving: the summaries would outweigh what they replace)"
        ),
    ]
    if plan.focus_topic:
        lines.append(f"  focus: {plan.focus_topic}")
    if plan.note:
        lines.append(f"  note: {plan.note}")
    if count:
        lines.append("  would be summarised, oldest first:")
        shown = list(plan.messages)
        if count > _LIST_FIRST + _LIST_LAST + 1:
            hidden = count - _LIST_FIRST - _LIST_LAST
            lines += [f"    {_excerpt(m)}" for m in shown[:_LIST_FIRST]]
            lines.append(f"    … {hidden} more …")
            lines += [f"    {_excerpt(m)}" for m in shown[-_LIST_LAST:]]
        else:
            lines += [f"    {_excerpt(m)}" for m in shown]
    return "\n".join(lines)


def compress_command(
    host: ContextHost, history: list[Message], text: str
) -> tuple[list[Message], str]:
    """Run ``/compress TEXT``: the history to continue with and what to print.

    A compaction is reported by the host's event (printed by the chat's
    observer), so nothing more is printed; a preview or a usage error is
    returned as text and leaves the history as it is.
    """
    try:
        args = parse_compress(text)
    except CommandUsageError as exc:
        return history, f"error: {exc}"
    if args.preview:
        plan = host.plan_compression(history, keep_last=args.keep_last, focus_topic=args.focus)
        return history, render_plan(plan, host.engine_name)
    return host.compress_now(history, args.focus, keep_last=args.keep_last), ""


def engine_commands(
    engine: ContextEngine, engine_name: str, notice: Callable[[str], None]
) -> dict[str, ChatCommand]:
    """The engine's commands the chat will offer; each one skipped is named in a notice.

    Skipped: a name that is not lowercase letters, digits, ``-`` and ``_``; a
    built-in's name (the built-in wins); a value that is not a
    :class:`~contextengine.ChatCommand`. A hook that raises offers nothing.
    """
    try:
        offered = engine.chat_commands()
    except Exception as exc:
        notice(f"[chat] engine {engine_name}'s commands are unavailable: {_one_line(exc)}")
        return {}
    if not isinstance(offered, Mapping):
        notice(f"[chat] engine {engine_name}'s chat_commands() did not return a mapping")
        return {}
    accepted: dict[str, ChatCommand] = {}
    for name, command in offered.items():
        label = f"engine {engine_name}'s command {name!r}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            notice(f"[chat] {label} skipped: names are lowercase letters, digits, - and _")
        elif name in BUILTIN_COMMANDS:
            notice(f"[chat] {label} skipped: /{name} is a built-in command, which wins")
        elif not isinstance(command, ChatCommand) or not callable(command.handler):
            notice(f"[chat] {label} skipped: not a ChatCommand with a handler")
        else:
            accepted[name] = command
    return accepted


def _one_line(exc: BaseException) -> str:
    words = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {words}" if words else type(exc).__name__
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "…"


def run_engine_command(
    name: str, command: ChatCommand, text: str, host: ContextHost, history: list[Message]
) -> str:
    """Run one engine command: its output, or ``error: /NAME failed: ...`` (never a traceback)."""
    call = ChatCommandInput(text=text, messages=list(history), host=host)
    try:
        result = command.handler(call)
    except Exception as exc:
        return f"error: /{name} failed: {_one_line(exc)}"
    return "" if result is None else str(result)


def help_text(commands: Mapping[str, ChatCommand], engine_name: str) -> str:
    """``/help``: the built-in commands, then the engine's."""
    lines = ["commands:"] + [f"  {line}" for line in BUILTIN_COMMANDS.values() if line]
    if commands:
        lines.append(f"from the {engine_name} engine:")
        lines += [f"  {commands[name].help or '/' + name}" for name in sorted(commands)]
    return "\n".join(lines)
