"""``contextengine count FILE``: the token count of a transcript."""

from __future__ import annotations

from pathlib import Path

import click

from contextengine.cli._output import emit_json, json_options
from contextengine.formats import load_sessions
from contextengine.tokens import count_message_tokens, encoding_for_model

__all__ = ["count"]


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--model", default=None, help="Count with this model's encoding (default o200k_base)."
)
@click.option(
    "--format",
    "format_name",
    default=None,
    help="Transcript format (default: detected): openai, anthropic, claude-code, swe-agent, "
    "tau-bench.",
)
@json_options
def count(
    files: tuple[str, ...],
    model: str | None,
    format_name: str | None,
    as_json: bool,
    output: Path | None,
) -> None:
    """Print the token count of each transcript FILE (OpenAI messages, JSON list or JSONL).

    The count is what the messages cost as a prompt, with the per-message
    overhead providers add, counted offline with the shipped vocabulary.
    """
    rows: list[dict[str, str | int]] = []
    for file in files:
        for session in load_sessions(Path(file), format=format_name):
            rows.append(
                {
                    "file": file,
                    "session": session.id,
                    "format": session.format,
                    "messages": len(session.messages),
                    "tokens": count_message_tokens(session.messages, model=model),
                }
            )
    document = {"encoding": encoding_for_model(model), "sessions": rows}
    if emit_json(document, as_json=as_json, output=output):
        return
    if len(rows) == 1:
        click.echo(rows[0]["tokens"])
        return
    for row in rows:
        click.echo(
            f"{row['tokens']:>10}  {row['messages']:>6} msgs  {row['file']}  {row['session']}"
        )
    total = sum(int(row["tokens"]) for row in rows)
    click.echo(f"{total:>10}  total")
