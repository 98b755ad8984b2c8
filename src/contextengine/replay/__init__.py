"""Replaying recorded sessions through engines: the project's measuring instrument.

* :mod:`.loop`: a recorded session fed turn by turn through a
  :class:`~contextengine.ContextHost`, the recorded replies standing in for
  the model, fed from a list or a stream; :func:`compare_stream` replays one
  streamed session through every engine in one pass.
* :mod:`.reference`: the unmanaged baseline and Claude Code's recorded
  compaction as reference traces, built one message at a time.
* :mod:`.trace`: :class:`RequestRecord` and :class:`Trace`, what a replay records.
* :mod:`.cost`: the prompt-cache price model (a cached prefix is what is
  byte-identical to the previous request) and provider presets.
* :mod:`.recall`: what survives compaction, closed-book and through
  ``lcm_grep``, on LoCoMo question files and agent transcripts.
* :mod:`.report`: the self-contained HTML (or PNG) chart report.

The ``contextengine replay`` and ``contextengine eval recall`` commands are
thin layers over these (``contextengine.cli.replay``)::

    from contextengine.formats import iter_sessions, load_sessions
    from contextengine.replay import compare_sessions, parse_price

    comparisons = compare_sessions(load_sessions("run.jsonl"), ["compressor", "lcm"],
                                   context_length=32_000)
    # or, for a long file, streamed in memory that does not grow with it:
    comparisons = compare_sessions(iter_sessions("run.jsonl"), ["compressor", "lcm"],
                                   context_length=32_000)
    rows = [row for c in comparisons for row in c.to_json(parse_price("openai-gpt-4o"))]
"""

from __future__ import annotations

from contextengine.replay.cost import (
    PRESETS,
    CostTotals,
    PrefixCache,
    Price,
    cached_prefix_tokens,
    message_fingerprint,
    parse_price,
    request_cost,
)
from contextengine.replay.identifiers import IdentifierSurvival, identifier_survival
from contextengine.replay.loop import (
    Replayer,
    RequestRecord,
    SessionComparison,
    Trace,
    baseline_trace,
    compare_sessions,
    compare_stream,
    recorded_trace,
    replay_session,
    trace_stats,
)
from contextengine.replay.recall import (
    RecallResult,
    Tally,
    eval_locomo,
    eval_transcript,
    load_locomo,
    normalize_answer,
)
from contextengine.replay.report import render_html, write_report

__all__ = [
    "PRESETS",
    "CostTotals",
    "IdentifierSurvival",
    "PrefixCache",
    "Price",
    "RecallResult",
    "Replayer",
    "RequestRecord",
    "SessionComparison",
    "Tally",
    "Trace",
    "baseline_trace",
    "cached_prefix_tokens",
    "compare_sessions",
    "compare_stream",
    "eval_locomo",
    "eval_transcript",
    "identifier_survival",
    "load_locomo",
    "message_fingerprint",
    "normalize_answer",
    "parse_price",
    "recorded_trace",
    "render_html",
    "replay_session",
    "request_cost",
    "trace_stats",
    "write_report",
]
