"""``contextengine replay FILE...`` and ``contextengine eval recall``: engines on recordings.

``replay`` feeds recorded sessions through one or more engines and reports
what each would have sent and cost (see :mod:`contextengine.replay`);
``eval recall`` measures what survives compaction on LoCoMo question files
and on agent transcripts. Both print a table, or JSON with ``--json``; both
write the JSON to ``--output FILE`` (:mod:`contextengine.cli._output`).

Every file either command will write (``--output``, ``--report``,
``--timeline``) is checked when the command line is parsed, so a missing
folder fails in a second, not after the replay. Both report progress on
standard error in sessions and requests (:mod:`contextengine.cli._progress`;
``--quiet`` silences it). Names from the data (session ids, file names) reach
rich as plain text, never as markup.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

import click
from rich.markup import escape
from rich.text import Text

from contextengine.cli._output import emit_json, json_options, writable_path
from contextengine.cli._progress import SessionProgress
from contextengine.cli._summary import summary_options
from contextengine.formats import (
    Session,
    SessionStream,
    detect_format,
    iter_sessions,
    load_sessions,
)
from contextengine.replay.cost import PRESETS, Price, parse_price
from contextengine.replay.loop import (
    SessionComparison,
    compare_stream,
    parse_option,
    trace_stats,
)
from contextengine.replay.recall import (
    RecallResult,
    eval_locomo,
    eval_transcript,
    load_locomo,
)
from contextengine.replay.report import write_report

__all__ = ["eval_group", "recall", "replay"]

_FORMAT_HELP = (
    "Transcript format (default: detected): openai, anthropic, claude-code, swe-agent, tau-bench."
)
_DEFAULT_PRICE = "openai-gpt-4o"


def _engines(engine: str | None, compare: str | None) -> list[str]:
    names = [engine] if engine else []
    for name in (compare or "").split(","):
        if name.strip() and name.strip() not in names:
            names.append(name.strip())
    if not names:
        from contextengine.config import resolve_config

        names.append(resolve_config().engine or "compressor")
    return names


def _context_length(value: int | None) -> int:
    if value is not None:
        return value
    from contextengine.config import resolve_config

    return resolve_config().context_length


def _options(pairs: Sequence[str], engines: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``key=value`` for every engine, or ``engine.key=value`` for one of them."""
    options: dict[str, dict[str, Any]] = {name: {} for name in engines}
    for pair in pairs:
        try:
            key, value = parse_option(pair)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--option") from None
        scope, dot, name = key.partition(".")
        if dot and scope in options:
            options[scope][name] = value
        else:
            for engine_options in options.values():
                engine_options[key] = value
    return options


def _price(spec: str) -> Price:
    try:
        return parse_price(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--price") from None


def _load(files: Sequence[str], format_name: str | None) -> list[Session]:
    sessions: list[Session] = []
    for file in files:
        sessions.extend(load_sessions(Path(file), format=format_name))
    return sessions


def _streams(files: Sequence[str], format_name: str | None) -> Iterator[SessionStream]:
    """Every session of ``files``, streamed one after the other.

    Each file's format is checked first, so a file of no known format fails
    before anything is replayed, as it did when every file was loaded first.
    """
    if format_name is None:
        for file in files:
            detect_format(file)
    for file in files:
        yield from iter_sessions(Path(file), format=format_name)


def _timed(stream: SessionStream, timeline: TextIO) -> SessionStream:
    """``stream``, writing the process CPU time as each reply is taken (``--timeline``)."""
    stream.recorded_model()  # any read-ahead happens in ``stream``, which the wrapper reads

    def messages() -> Iterator[dict[str, Any]]:
        started = time.process_time()
        requests = 0
        for index, message in enumerate(stream):
            if index and message.get("role") == "assistant":
                requests += 1
                timeline.write(f"{requests} {time.process_time() - started:.6f}\n")
            yield message

    return SessionStream(
        id=stream.id,
        source=stream.source,
        format=stream.format,
        messages=messages(),
        metadata=stream.metadata,
    )


def _totals(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = {}
    keys = (
        "requests",
        "compactions",
        "summarizer_calls",
        "prompt_tokens_total",
        "baseline_prompt_tokens_total",
        "cost",
        "baseline_cost",
    )
    for row in rows:
        total = totals.setdefault(row["engine"], dict.fromkeys(keys, 0) | {"sessions": 0})
        total["sessions"] += 1
        for key in keys:
            total[key] += row[key]
        total["prompt_tokens_peak"] = max(
            total.get("prompt_tokens_peak", 0), row["prompt_tokens_peak"]
        )
    for total in totals.values():
        total["cost"] = round(total["cost"], 6)
        total["baseline_cost"] = round(total["baseline_cost"], 6)
        base = total["baseline_cost"]
        total["savings_vs_baseline"] = round(1 - total["cost"] / base, 4) if base else 0.0
    return totals


def _print_replay(
    rows: Sequence[dict[str, Any]], comparisons: Sequence[SessionComparison], price: Price
) -> None:
    from rich import box
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # a pipe or a file: no reason to squeeze the columns
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_session.setdefault(f"{row['source']}#{row['session']}", []).append(row)
    for comparison in comparisons:
        group = by_session.get(f"{comparison.source}#{comparison.session_id}", [])
        if not group:
            continue
        from rich.table import Table

        title = escape(
            f"{comparison.session_id} ({comparison.format}, {comparison.messages:,} messages)"
        )
        table = Table(
            title=title,
            box=box.SIMPLE_HEAD,
            padding=(0, 1),
        )
        for column in (
            "strategy",
            "reqs",
            "compact",
            "summ",
            "prompt tok",
            "peak",
            "cached",
            "cost",
            "vs base",
            "ms p50/p95",
        ):
            table.add_column(
                column, justify="left" if column == "strategy" else "right", no_wrap=True
            )
        refs = [("baseline", trace_stats(comparison.baseline, price))]
        if group[0]["recorded"] is not None:
            refs.append(("recorded", group[0]["recorded"]))
        for label, stats in refs:
            if stats["overflow_requests"]:
                label += f" ({stats['overflow_requests']} over)"
            table.add_row(label, *_cells(stats), "", "")
        for row in group:
            over = row["overflow_requests"]
            table.add_row(
                Text(row["engine"] + (f" ({over} over)" if over else "")),
                *_cells(row),
                f"{-row['savings_vs_baseline']:+.0%}",
                f"{row['overhead_ms_median']:.2f}/{row['overhead_ms_p95']:.2f}",
            )
        console.print(table)
    for engine, total in _totals(rows).items():
        click.echo(
            f"total {engine}: {total['sessions']} session(s), {total['requests']:,} requests, "
            f"{total['compactions']} compactions, {total['prompt_tokens_total']:,} prompt tokens "
            f"(baseline {total['baseline_prompt_tokens_total']:,}), cost ${total['cost']:.4f} "
            f"(baseline ${total['baseline_cost']:.4f}); price {price.describe()} per 1M tokens"
        )


def _cells(stats: dict[str, Any]) -> list[str]:
    return [
        f"{stats['requests']:,}",
        f"{stats['compactions']}",
        f"{stats['summarizer_calls']}",
        f"{stats['prompt_tokens_total']:,}",
        f"{stats['prompt_tokens_peak']:,}",
        f"{stats['cache_hit_rate']:.0%}",
        f"${stats['cost']:.4f}",
    ]


@contextmanager
def _quiet_library_logs() -> Iterator[None]:
    """Keep the host's warnings (counted in the figures) off the terminal during a replay.

    Without a handler, Python prints warnings of unconfigured loggers to
    stderr; a replay of a long session would print hundreds. A NullHandler on
    the package logger stops that and still lets a configured root logger see them.
    """
    logger = logging.getLogger("contextengine")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--engine", default=None, help="Engine to replay through (default: configured).")
@click.option(
    "--compare", default=None, help="Comma-separated engines to compare, e.g. compressor,lcm."
)
@click.option(
    "--context-length",
    type=click.IntRange(min=256),
    default=None,
    help="Context window in tokens (default: configured, 128000).",
)
@click.option(
    "--model",
    default=None,
    help="Model told to the engines; picks the tokenizer "
    "(default: the session's recorded model, else gpt-4o).",
)
@click.option("--format", "format_name", default=None, help=_FORMAT_HELP)
@click.option(
    "--price",
    "price_spec",
    default=_DEFAULT_PRICE,
    show_default=True,
    help="Preset (" + ", ".join(sorted(PRESETS)) + ") or "
    "input=...,cached=...,cache_write=...,output=... in USD per million tokens.",
)
@click.option(
    "--option",
    "-o",
    "option_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Engine option (repeatable); ENGINE.KEY=VALUE for one engine only.",
)
@json_options
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False),
    callback=writable_path,
    default=None,
    help="Also write a chart report: FILE.html (self-contained) or FILE.png.",
)
@click.option(
    "--timeline",
    "timeline_path",
    type=click.Path(dir_okay=False),
    callback=writable_path,
    default=None,
    help="Write one line per request: its number and the CPU seconds since its "
    "session's replay began (to see whether a long replay slows down).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress on standard error.")
@summary_options
def replay(
    files: tuple[str, ...],
    engine: str | None,
    compare: str | None,
    context_length: int | None,
    model: str | None,
    format_name: str | None,
    price_spec: str,
    option_pairs: tuple[str, ...],
    as_json: bool,
    output: Path | None,
    report_path: Path | None,
    timeline_path: Path | None,
    quiet: bool,
) -> None:
    """Replay recorded sessions FILE... through context engines, the recording as the model.

    Reports per session the requests, compactions, summariser calls, prompt
    tokens sent (total and peak) against the same session with no context
    management, the cost under a prompt-cache price model, and the engine's
    CPU overhead per request. Sessions are streamed from their files, once
    for all engines, so memory follows what the engines keep, not the file.
    """
    engines = _engines(engine, compare)
    length = _context_length(context_length)
    price = _price(price_spec)
    options = _options(option_pairs, engines)
    if report_path and report_path.suffix.lower() not in (".html", ".htm", ".png"):
        raise click.BadParameter("expected a .html or .png file name", param_hint="--report")
    comparisons: list[SessionComparison] = []
    with ExitStack() as stack:
        progress = stack.enter_context(SessionProgress("replay", enabled=not quiet))
        stack.enter_context(_quiet_library_logs())
        timeline = (
            stack.enter_context(timeline_path.open("w", encoding="utf-8"))
            if timeline_path
            else None
        )
        for stream in _streams(files, format_name):
            progress.session(f"{Path(stream.source).name}#{stream.id}")
            comparisons.append(
                compare_stream(
                    stream if timeline is None else _timed(stream, timeline),
                    engines,
                    context_length=length,
                    model=model,
                    options=options,
                    progress=progress.advance,
                )
            )
    rows = [row for comparison in comparisons for row in comparison.to_json(price)]
    if report_path:
        try:
            write_report(report_path, comparisons, price=price, context_length=length)
        except ImportError as exc:
            raise click.ClickException(str(exc)) from None
    document = {
        "engines": engines,
        "context_length": length,
        "model": model,
        "price": price.as_dict(),
        "sessions": rows,
        "totals": _totals(rows),
    }
    if emit_json(document, as_json=as_json, output=output):
        return
    _print_replay(rows, comparisons, price)
    if report_path:
        click.echo(f"report written to {report_path}")


# ---------------------------------------------------------------- eval recall


@click.group(name="eval")
def eval_group() -> None:
    """Evaluate engines without a model: what survives compaction."""


def _print_recall(results: Sequence[RecallResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    if not results:
        return
    k = results[0].k
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    table = Table(title=f"recall@{k}")
    for column in (
        "file",
        "engine",
        "category",
        "n",
        "closed-book",
        "search",
        "recoverable",
        "ceiling",
        "context tokens",
    ):
        table.add_column(
            column,
            justify="left" if column in ("file", "engine", "category") else "right",
            no_wrap=True,
        )

    def pct(value: float | None) -> str:
        return "—" if value is None else f"{value:.1%}"

    for result in results:
        for name, shares in result.rows():
            table.add_row(
                Text(Path(result.source).name),
                Text(result.engine),
                Text(name),
                f"{shares['questions']:,}",
                pct(shares["closed_book"]),
                pct(shares["search"]) if result.has_search else "no tool",
                pct(shares["recoverable"]),
                pct(shares["ceiling"]),
                f"{result.mean_context_tokens:,}",
            )
        table.add_section()
    console.print(table)


@eval_group.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--qa",
    "qa_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="LoCoMo-format question file (repeatable).",
)
@click.option("--engine", default=None, help="Engine to evaluate (default: configured).")
@click.option("--compare", default=None, help="Comma-separated engines, e.g. compressor,lcm.")
@click.option(
    "--context-length",
    type=click.IntRange(min=256),
    default=None,
    help="Context window in tokens the conversations are replayed into.",
)
@click.option(
    "-k",
    "--k",
    "k",
    type=click.IntRange(min=1, max=100),
    default=5,
    show_default=True,
    help="A search counts when an evidence turn is in its top k results.",
)
@click.option("--model", default=None, help="Model told to the engines (default gpt-4o).")
@click.option("--format", "format_name", default=None, help=_FORMAT_HELP)
@click.option(
    "--option",
    "-o",
    "option_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Engine option (repeatable); ENGINE.KEY=VALUE for one engine only.",
)
@json_options
@click.option("--quiet", "-q", is_flag=True, help="No progress on standard error.")
@summary_options
def recall(
    files: tuple[str, ...],
    qa_files: tuple[str, ...],
    engine: str | None,
    compare: str | None,
    context_length: int | None,
    k: int,
    model: str | None,
    format_name: str | None,
    option_pairs: tuple[str, ...],
    as_json: bool,
    output: Path | None,
    quiet: bool,
) -> None:
    """Recall after compaction on LoCoMo --qa files and agent transcripts FILE...

    Closed-book: the answer (or identifier) is still in the context the engine
    assembles. Search: one lcm_grep finds its source within the top k.
    Recoverable: either. Each row shows the context tokens retained.
    """
    if not files and not qa_files:
        raise click.UsageError("give agent transcripts FILE... and/or --qa FILE")
    engines = _engines(engine, compare)
    length = _context_length(context_length)
    options = _options(option_pairs, engines)
    the_model = model or "gpt-4o"
    results: list[RecallResult] = []
    qa = [(qa_file, load_locomo(qa_file)) for qa_file in qa_files]
    transcripts = _load(files, format_name)
    total = len(engines) * (sum(len(c) for _, c in qa) + len(transcripts))
    with (
        _quiet_library_logs(),
        SessionProgress("eval recall", total=total, enabled=not quiet) as progress,
    ):
        for qa_file, conversations in qa:
            for name in engines:

                def started(sample_id: str, name: str = name, qa_file: str = qa_file) -> None:
                    progress.session(f"{Path(qa_file).name}#{sample_id} ({name})")

                results.append(
                    eval_locomo(
                        qa_file,
                        engine=name,
                        context_length=length,
                        k=k,
                        model=the_model,
                        options=options[name],
                        conversations=conversations,
                        progress=progress.advance,
                        on_conversation=started,
                    )
                )
        for session in transcripts:
            for name in engines:
                progress.session(f"{Path(session.source).name}#{session.id} ({name})")
                results.append(
                    eval_transcript(
                        session,
                        engine=name,
                        context_length=length,
                        k=k,
                        model=model or str(session.metadata.get("model") or the_model),
                        options=options[name],
                        progress=progress.advance,
                    )
                )
    document = {
        "k": k,
        "context_length": length,
        "engines": engines,
        "results": [result.to_json() for result in results],
    }
    if emit_json(document, as_json=as_json, output=output):
        return
    _print_recall(results)
