"""What the installed ``hermes-agent`` offers, found without importing it.

Hermes's ``ContextEngine`` contract and ours share their method names, but a
given Hermes release calls only some of our hooks: ``hermes-agent`` 0.19.0
predates ``select_context``, ``on_turn_complete`` and
``prune_tool_results_only``. Which hooks a release calls is read from its
source (the call sites in its agent loop, gateway and CLI), so ``contextengine
engines`` can say what is unavailable without importing Hermes, whose import
pulls in its whole runtime.

A hook counts as *called* when a Hermes module other than the two that define
engines (``agent/context_engine.py``, ``agent/context_compressor.py``) calls it
as a method (``.name(``) or looks it up by name (``"name"`` in ``getattr`` /
``hasattr``). Two of our hooks reach Hermes under another name: our
``on_turn_complete`` runs from Hermes's ``post_llm_call`` plugin hook, and the
cooldown of ``should_compress_info`` answers Hermes's
``get_active_compression_failure_cooldown``.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HERMES_DISTRIBUTION",
    "OUR_HOOKS",
    "HookRoute",
    "compressor_missing_hooks",
    "hermes_root",
    "hermes_version",
    "hook_routes",
    "unavailable_hooks",
]

#: The distribution name on the package index.
HERMES_DISTRIBUTION = "hermes-agent"

# Our hook -> the name Hermes calls it by, when that differs.
_HERMES_NAME = {
    "on_turn_complete": "post_llm_call",
    "should_compress_info": "get_active_compression_failure_cooldown",
}

#: Our hooks, in the order of the lifecycle in :mod:`contextengine.engine`.
OUR_HOOKS = (
    "update_model",
    "on_session_start",
    "should_defer_preflight_to_real_usage",
    "should_compress",
    "should_compress_info",
    "should_compress_preflight",
    "compress",
    "select_context",
    "update_from_response",
    "prune_tool_results_only",
    "on_turn_complete",
    "on_session_end",
    "on_session_reset",
    "carry_over_new_session_context",
    "has_content_to_compress",
    "plan_compression",
    "get_tool_schemas",
    "handle_tool_call",
    "get_status",
    "is_own_message",
    "recovery_hint",
    "chat_commands",
    "get_automatic_compaction_status_message",
)

# Files that define engines rather than drive them: a name found there is a
# definition, not a call.
_DEFINITIONS = ("agent/context_engine.py", "agent/context_compressor.py")
_DRIVERS = ("agent/", "gateway/", "hermes_cli/", "tui_gateway/", "run_agent.py", "cli.py")


# A call on the engine: Hermes names it ``context_compressor``, ``_compressor``,
# ``compressor``, ``engine`` or ``cc``; ``compress_fn = ....compress`` counts.
_ENGINE_CALL = (
    r"(?:compressor|engine|\bcc)\s*\.\s*{name}\b"
    r"|(?:hasattr|getattr)\(\s*[\w.]*(?:compressor|engine|\bcc)\w*\s*,\s*[\"']{name}[\"']"
)
# Hooks reached through Hermes's plugin system rather than on the engine.
_EVIDENCE = {
    "on_turn_complete": r"invoke_hook\(\s*[\"']post_llm_call[\"']",
}


@dataclass(frozen=True)
class HookRoute:
    """How one of our hooks is reached from the installed Hermes."""

    hook: str
    #: The name Hermes calls (usually the same as ``hook``).
    hermes_name: str
    #: True when the installed Hermes calls it somewhere.
    called: bool
    #: The first Hermes file that calls it, relative to the install root ("" when none).
    where: str = ""


def hermes_version() -> str | None:
    """The installed ``hermes-agent`` version, or None when it is not installed."""
    try:
        return metadata.version(HERMES_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def hermes_root() -> Path | None:
    """The directory holding Hermes's top-level modules (``run_agent.py``, ``agent/``)."""
    try:
        dist = metadata.distribution(HERMES_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file("")))
    return root if (root / "agent" / "context_engine.py").is_file() else None


def _driver_files(root: Path) -> list[Path]:
    try:
        files = metadata.distribution(HERMES_DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        return []
    found = []
    for entry in files:
        name = str(entry).replace("\\", "/")
        if not name.endswith(".py") or name in _DEFINITIONS or "/tests/" in name:
            continue
        if any(name == d or (d.endswith("/") and name.startswith(d)) for d in _DRIVERS):
            found.append(root / name)
    return sorted(found)


@functools.cache
def hook_routes() -> tuple[HookRoute, ...]:
    """Every hook of ours and whether the installed Hermes calls it (empty: no Hermes).

    Read from Hermes's source once per process; nothing of Hermes is imported.
    """
    root = hermes_root()
    if root is None:
        return ()
    texts: list[tuple[str, str]] = []
    for path in _driver_files(root):
        try:
            texts.append((path.relative_to(root).as_posix(), path.read_text("utf-8", "replace")))
        except OSError:
            continue  # an unreadable file proves nothing either way
    routes = []
    for hook in OUR_HOOKS:
        name = _HERMES_NAME.get(hook, hook)
        pattern = re.compile(_EVIDENCE.get(hook, _ENGINE_CALL.format(name=name)))
        # The substring test first: the regex alone over Hermes's ~400 modules is slow.
        where = next((rel for rel, text in texts if name in text and pattern.search(text)), "")
        routes.append(HookRoute(hook, name, bool(where), where))
    return tuple(routes)


def unavailable_hooks() -> list[str]:
    """Our hooks the installed Hermes never calls (all of them when it is absent)."""
    routes = hook_routes()
    if not routes:
        return list(OUR_HOOKS)
    return [route.hook for route in routes if not route.called]


@functools.cache
def compressor_missing_hooks() -> tuple[str, ...]:
    """Our hooks that Hermes's ABC and its ContextCompressor do not define (engine ``hermes``).

    Read from ``agent/context_engine.py`` and ``agent/context_compressor.py``;
    empty when Hermes is absent.
    """
    root = hermes_root()
    if root is None:
        return ()
    text = ""
    for name in _DEFINITIONS:
        try:
            text += (root / name).read_text("utf-8", "replace")
        except OSError:
            continue
    defined = set(re.findall(r"^\s+def (\w+)\(", text, re.MULTILINE))
    # Hermes's name for our should_compress_info's cooldown reason.
    if "get_active_compression_failure_cooldown" in defined:
        defined.add("should_compress_info")
    return tuple(hook for hook in OUR_HOOKS if hook not in defined)
