"""``contextengine demo``: the main job, offline, on the embedded defaults.

Every text that comes from the session or the engine (message contents,
event messages, tool results) reaches rich escaped or as plain ``Text``:
``[tool output pruned: ...]`` is a message, not markup.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from contextengine.cli._output import emit_json, json_options
from contextengine.cli._summary import summary_options
from contextengine.demo import DEMO_FACT, DemoRequest, DemoResult, run_demo
from contextengine.events import CompactionEvent
from contextengine.messages import message_text

__all__ = ["demo"]


@click.command()
@click.option("--engine", default="compressor", show_default=True, help="Context engine to run.")
@click.option(
    "--context-length",
    type=click.IntRange(min=1_000),
    default=8_000,
    show_default=True,
    help="The pretend model's context window, small so compaction happens several times.",
)
@json_options
@summary_options
def demo(engine: str, context_length: int, as_json: bool, output: Path | None) -> None:
    """Replay a bundled coding-agent session through a context engine, offline.

    Shows the context sent with every request, each compaction (before -> after,
    what was pruned and summarised), and the final context and status. With
    `--engine lcm`, the agent then finds a fact that left the view with
    lcm_grep and reopens it with lcm_expand.
    """
    console = Console(highlight=False)
    if as_json:
        result = run_demo(engine=engine, context_length=context_length)
        emit_json(_as_json(result), as_json=True, output=output)
        return

    def on_request(step: DemoRequest) -> None:
        # The header waits for the first request: an engine that fails to load
        # is then one error line, not a header and an error.
        if step.index == 1:
            console.print(
                f"[bold]contextengine demo[/]: engine [cyan]{escape(engine)}[/], "
                f"context length {context_length:,} tokens\n"
            )
        _print_request(console, step, context_length)

    result = run_demo(engine=engine, context_length=context_length, on_request=on_request)
    _print_summary(console, result)
    emit_json(_as_json(result), as_json=False, output=output)


def _bar(tokens: int, context_length: int, width: int = 30) -> str:
    filled = min(width, round(width * tokens / max(1, context_length)))
    return "█" * filled + "·" * (width - filled)


def _print_request(console: Console, step: DemoRequest, context_length: int) -> None:
    for event in step.compactions:
        _print_compaction(console, event)
    console.print(
        f"  request {step.index:>2}  turn {step.turn:>2}  "
        f"{_bar(step.context_tokens, context_length)} "
        f"{step.context_tokens:>6,} tokens  {step.context_messages:>3} messages"
    )


def _print_compaction(console: Console, event: CompactionEvent) -> None:
    style = "yellow" if event.aborted or event.fallback_used else "green"
    what = event.trigger or ("aborted" if event.aborted else "compacted")
    if event.reason:
        what += f"; {event.reason}"
    console.print(
        f"[{style}]⟳ compaction ({escape(event.phase)}, {escape(what)}): "
        f"{event.tokens_before:,} → {event.tokens_after:,} tokens, "
        f"{event.messages_before} → {event.messages_after} messages, "
        f"{event.summarizer_calls} summariser call(s)[/]"
    )
    if event.message:
        console.print(Text("  " + event.message, style="dim"))


def _print_summary(console: Console, result: DemoResult) -> None:
    console.print()
    table = Table(title="Final context sent to the model", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("role")
    table.add_column("content", overflow="fold")
    for index, message in enumerate(result.final_context):
        text = " ".join(message_text(message).split())
        # Text, not str: a str cell is markup, and "[tool output pruned: ...]" would vanish.
        table.add_row(
            str(index),
            Text(str(message.get("role", "?"))),
            Text(text[:160] + ("…" if len(text) > 160 else "")),
        )
    console.print(table)
    status = result.status
    console.print(
        f"\n[bold]Status[/]: {status.get('compression_count', 0)} compactions, "
        f"threshold {result.threshold_tokens:,} of {result.context_length:,} tokens, "
        f"last prompt {status.get('last_prompt_tokens', 0):,} tokens "
        f"({status.get('usage_percent', 0.0):.0f}%), {len(result.requests)} requests "
        f"in {result.duration_s:.2f} s"
    )
    where = "still in the context" if result.fact_in_context else "no longer in the context"
    console.print(f"The staging database port ({DEMO_FACT}) from the first turn is {where}.")
    for step in result.recall:
        console.print(
            f"\n[bold cyan]model calls {escape(step.tool)}[/]({escape(json.dumps(step.args))})"
        )
        console.print(Text(_short_json(step.result)))
    if result.recall:
        recovered = any(DEMO_FACT in json.dumps(step.result) for step in result.recall)
        verdict = "recovered" if recovered else "NOT recovered"
        console.print(f"\n[bold]The fact was {verdict} from the lossless archive.[/]")


def _short_json(value: dict[str, Any], limit: int = 900) -> str:
    text = json.dumps(value, indent=1, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "\n…"


def _as_json(result: DemoResult) -> dict[str, Any]:
    return {
        "engine": result.engine,
        "context_length": result.context_length,
        "threshold_tokens": result.threshold_tokens,
        "requests": [
            {
                "index": step.index,
                "turn": step.turn,
                "context_tokens": step.context_tokens,
                "context_messages": step.context_messages,
            }
            for step in result.requests
        ],
        "compactions": [asdict(event) for event in result.compactions],
        "final_context": result.final_context,
        "status": result.status,
        "fact_in_context": result.fact_in_context,
        "recall": [asdict(step) for step in result.recall],
        "duration_s": result.duration_s,
    }
