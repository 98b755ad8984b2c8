"""The lossless engine's slash commands for ``contextengine chat``: ``/grep``.

``/grep WORDS`` runs ``lcm_grep`` for the person at the terminal: the same
search the model has, over everything archived in this conversation
(messages and summaries, including what left the view), shown as one line
per hit. It is the reference example of :meth:`ContextEngine.chat_commands`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from contextengine.commands import ChatCommand, ChatCommandInput

if TYPE_CHECKING:
    from contextengine.engines.lossless.engine import LosslessEngine

__all__ = ["GREP_LIMIT", "lcm_chat_commands"]

#: Hits shown by one ``/grep``.
GREP_LIMIT = 10
_SNIPPET_CHARS = 120


def lcm_chat_commands(engine: LosslessEngine) -> dict[str, ChatCommand]:
    """The commands of ``engine``, bound to it."""

    def grep(call: ChatCommandInput) -> str:
        query = call.text.strip()
        if not query:
            return "usage: /grep WORDS  (searches everything archived in this conversation)"
        answer = json.loads(
            engine.handle_tool_call(
                "lcm_grep", {"query": query, "limit": GREP_LIMIT}, messages=call.messages
            )
        )
        if "error" in answer:
            raise ValueError(str(answer["error"]))
        results = answer.get("results") or []
        if not results:
            return f"no match for {query!r} in this conversation's archive"
        more = ", more exist" if answer.get("next_cursor") else ""
        lines = [f"{len(results)} match(es) for {query!r}{more}:"]
        for hit in results:
            where = f"in summary {hit['summary_id']}" if hit.get("summary_id") else "in view"
            snippet = " ".join(str(hit.get("snippet") or "").split())[:_SNIPPET_CHARS]
            seq = "" if hit.get("seq") is None else f" seq {hit['seq']}"
            role = f" {hit['role']}" if hit.get("role") else ""
            lines.append(f"  {hit['id']} ·{seq}{role} · {where}: {snippet}")
        lines.append("lcm_expand reopens an id in full (ask the model).")
        return "\n".join(lines)

    return {
        "grep": ChatCommand(
            help="/grep WORDS  search everything archived in this conversation (lcm_grep)",
            handler=grep,
        )
    }
