"""The visual replay report: one self-contained HTML file (inline SVG), or a PNG.

``contextengine replay --report FILE.html`` writes, for each session, a chart
of the prompt tokens of every request for each engine compared (the
unmanaged baseline dashed, Claude Code's recorded compaction dotted when the
session has one, the context length as a red line, each compaction a
marked point), the cumulative cost of the same requests below it, a legend,
and the summary table, so the file reads on its own without the terminal
output. No script, no external stylesheet or font: it opens offline and can
be attached to an issue.

``FILE.png`` draws the same charts with matplotlib (the ``plot`` extra);
without it, :func:`write_report` raises ImportError naming the extra.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contextengine.replay.cost import CostTotals, Price
from contextengine.replay.loop import SessionComparison, Trace, trace_stats

__all__ = ["MAX_CHARTS", "render_html", "write_png", "write_report"]

#: Sessions drawn as charts; the table lists every session.
MAX_CHARTS = 24

_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
_BASELINE = "#7f7f7f"
_RECORDED = "#000000"
_LIMIT = "#d62728"
_WIDTH, _TOKENS_H, _COST_H = 880, 260, 150
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 14, 28

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0 20px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th:first-child,td:first-child,td.l{text-align:left}
th{background:#f3f3f3}.legend span{margin-right:18px;white-space:nowrap}
.sw{display:inline-block;width:22px;height:0;border-top:3px solid;vertical-align:middle;
margin-right:5px}.note{color:#555}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _series(comparison: SessionComparison) -> list[tuple[str, Trace, str, str]]:
    """(label, trace, colour, dash pattern) for every line of a session's charts."""
    lines = [("baseline (no management)", comparison.baseline, _BASELINE, "6 4")]
    if comparison.recorded is not None:
        lines.append(("recorded (Claude Code)", comparison.recorded, _RECORDED, "2 3"))
    for n, (engine, trace) in enumerate(comparison.traces.items()):
        lines.append((engine, trace, _PALETTE[n % len(_PALETTE)], ""))
    return lines


def _nice_ticks(top: float, count: int = 4) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) from 0 up to ``top``."""
    if top <= 0:
        return [0.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [step * i for i in range(int(top / step) + 1)]


def _fmt_tokens(value: float) -> str:
    return f"{value / 1000:g}k" if value >= 1000 else f"{value:g}"


def _fmt_cost(value: float) -> str:
    return f"${value:.2f}" if value >= 1 else f"${value:.3g}"


def _chart(
    series: Sequence[tuple[str, Sequence[float], str, str, Sequence[int]]],
    *,
    height: int,
    title: str,
    fmt: Any,
    limit: float | None = None,
) -> str:
    """An SVG line chart: x is the request number, one polyline per series, circles at marks."""
    n = max((len(values) for _, values, _, _, _ in series), default=0)
    top = max([max(values, default=0.0) for _, values, _, _, _ in series] + [limit or 0.0])
    top = top * 1.05 or 1.0
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, height - _TOP - _BOTTOM

    def x(i: int) -> float:
        return _LEFT + (plot_w * (i / max(1, n - 1)) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="{_esc(title)}">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="#fff" '
        'stroke="#bbb"/>',
    ]
    for tick in _nice_ticks(top / 1.05):
        ty = y(tick)
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#eee"/>'
            f'<text x="{_LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">{_esc(fmt(tick))}</text>'
        )
    for tick in _nice_ticks(float(n), 6)[1:] if n > 1 else []:
        tx = x(int(tick) - 1)
        parts.append(
            f'<text x="{tx:.1f}" y="{height - 10}" text-anchor="middle">{int(tick)}</text>'
        )
    parts.append(
        f'<text x="{_LEFT}" y="{height - 10}" text-anchor="start">request</text>'
        f'<text x="{_LEFT + 6}" y="{_TOP + 14}">{_esc(title)}</text>'
    )
    if limit:
        ly = y(limit)
        parts.append(
            f'<line class="context-length" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{ly:.1f}" '
            f'y2="{ly:.1f}" stroke="{_LIMIT}" stroke-width="1"/>'
            f'<text x="{_LEFT + plot_w - 4}" y="{ly - 4:.1f}" text-anchor="end" '
            f'style="fill:{_LIMIT}">context length {_esc(fmt(limit))}</text>'
        )
    for label, values, colour, dash, marks in series:
        if not values:
            continue
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<polyline class="series" data-label="{_esc(label)}" fill="none" '
            f'stroke="{colour}" stroke-width="1.8"{dash_attr} points="{points}"/>'
        )
        for i in marks:
            if 0 <= i < len(values):
                parts.append(
                    f'<circle class="compaction" data-label="{_esc(label)}" cx="{x(i):.1f}" '
                    f'cy="{y(values[i]):.1f}" r="4" fill="#fff" stroke="{colour}" '
                    f'stroke-width="2"><title>{_esc(label)}: compaction before request '
                    f"{i + 1}</title></circle>"
                )
    parts.append("</svg>")
    return "".join(parts)


def _legend(series: Sequence[tuple[str, Trace, str, str]]) -> str:
    items = [
        f'<span><i class="sw" style="border-top-color:{colour};'
        f'border-top-style:{"dashed" if dash else "solid"}"></i>{_esc(label)}</span>'
        for label, _trace, colour, dash in series
    ]
    items.append(f'<span><i class="sw" style="border-top-color:{_LIMIT}"></i>context length</span>')
    items.append("<span>○ compaction</span>")
    return f'<p class="legend">{"".join(items)}</p>'


_COLUMNS = (
    ("requests", "requests"),
    ("compactions", "compactions"),
    ("summarizer_calls", "summariser calls"),
    ("prompt_tokens_total", "prompt tokens"),
    ("prompt_tokens_peak", "peak prompt"),
    ("cache_hit_rate", "cache hits"),
    ("cost", "cost"),
    ("overhead_ms_median", "overhead median ms"),
    ("overhead_ms_p95", "overhead p95 ms"),
)


def _cell(key: str, value: Any) -> str:
    if key == "cost":
        return _fmt_cost(float(value))
    if key == "cache_hit_rate":
        return f"{float(value):.0%}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return _esc(value)


def _table(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    head = "".join(f"<th>{_esc(title)}</th>" for _, title in _COLUMNS)
    body = []
    for session, label, stats in rows:
        cells = "".join(f"<td>{_cell(key, stats.get(key, ''))}</td>" for key, _ in _COLUMNS)
        body.append(
            f'<tr><td class="l">{_esc(session)}</td><td class="l">{_esc(label)}</td>{cells}</tr>'
        )
    return f"<table><tr><th>session</th><th>strategy</th>{head}</tr>{''.join(body)}</table>"


def _stats_rows(
    comparison: SessionComparison, price: Price
) -> list[tuple[str, str, dict[str, Any]]]:
    rows = [
        (comparison.session_id, label, trace_stats(trace, price))
        for label, trace, _, _ in _series(comparison)
    ]
    return rows


def render_html(
    comparisons: Sequence[SessionComparison],
    *,
    price: Price,
    context_length: int,
    title: str = "contextengine replay",
) -> str:
    """The whole report as one HTML string."""
    engines = list(dict.fromkeys(e for c in comparisons for e in c.traces))
    totals: dict[str, dict[str, float]] = {}
    for comparison in comparisons:
        for _session, label, stats in _stats_rows(comparison, price):
            row = totals.setdefault(
                label,
                {
                    "requests": 0,
                    "compactions": 0,
                    "summarizer_calls": 0,
                    "prompt_tokens_total": 0,
                    "cost": 0.0,
                },
            )
            for key in row:
                row[key] += stats[key]
    total_rows = "".join(
        f'<tr><td class="l">{_esc(label)}</td><td>{int(t["requests"]):,}</td>'
        f"<td>{int(t['compactions']):,}</td><td>{int(t['summarizer_calls']):,}</td>"
        f"<td>{int(t['prompt_tokens_total']):,}</td><td>{_fmt_cost(t['cost'])}</td></tr>"
        for label, t in totals.items()
    )
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f'<p class="note">{len(comparisons)} session(s); engines: {_esc(", ".join(engines))}; '
        f"context length {context_length:,} tokens; price per million tokens: "
        f"{_esc(price.describe())}; generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        "Prompt tokens are counted offline from what each engine sends; the recorded replies "
        "stand in for the model. The cached prefix of a request is what is byte-identical to "
        "the previous request.</p>",
        "<h2>Totals</h2><table><tr><th>strategy</th><th>requests</th><th>compactions</th>"
        f"<th>summariser calls</th><th>prompt tokens</th><th>cost</th></tr>{total_rows}</table>",
    ]
    for comparison in comparisons[:MAX_CHARTS]:
        series = _series(comparison)
        token_series = []
        cost_series = []
        for label, trace, colour, dash in series:
            marks = [i for i, r in enumerate(trace.requests) if r.compactions]
            token_series.append(
                (label, [float(r.prompt_tokens) for r in trace.requests], colour, dash, marks)
            )
            totals_run = CostTotals(price)
            for r in trace.requests:
                totals_run.add(r.prompt_tokens, r.cached_tokens, r.completion_tokens)
            cost_series.append((label, totals_run.cumulative or [], colour, dash, marks))
        parts.append(
            f'<h2>{_esc(comparison.session_id)} <small class="note">{_esc(comparison.format)}, '
            f"{comparison.messages:,} messages, {_esc(comparison.source)}</small></h2>"
        )
        parts.append(_legend(series))
        parts.append(
            _chart(
                token_series,
                height=_TOKENS_H,
                title="prompt tokens per request",
                fmt=_fmt_tokens,
                limit=float(context_length),
            )
        )
        parts.append("<br>")
        parts.append(_chart(cost_series, height=_COST_H, title="cumulative cost", fmt=_fmt_cost))
    if len(comparisons) > MAX_CHARTS:
        parts.append(
            f'<p class="note">{len(comparisons) - MAX_CHARTS} more session(s) in the table '
            "below, not charted.</p>"
        )
    rows = [row for comparison in comparisons for row in _stats_rows(comparison, price)]
    parts.append("<h2>Per session</h2>")
    parts.append(_table(rows))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_png(
    path: Path, comparisons: Sequence[SessionComparison], *, price: Price, context_length: int
) -> None:
    """The same charts as a PNG, drawn with matplotlib (the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "a PNG report needs matplotlib: pip install 'contextengine[plot]' "
            "(or write an .html report, which needs nothing)"
        ) from exc
    shown = list(comparisons[:MAX_CHARTS])
    fig, axes = plt.subplots(
        2 * len(shown),
        1,
        figsize=(10, 5.5 * len(shown)),
        squeeze=False,
        gridspec_kw={"height_ratios": [2, 1] * len(shown)},
    )
    for n, comparison in enumerate(shown):
        tokens_ax, cost_ax = axes[2 * n][0], axes[2 * n + 1][0]
        for label, trace, colour, dash in _series(comparison):
            style = "--" if dash == "6 4" else (":" if dash else "-")
            xs = list(range(1, len(trace.requests) + 1))
            ys = [r.prompt_tokens for r in trace.requests]
            tokens_ax.plot(xs, ys, style, color=colour, label=label, linewidth=1.5)
            marks = [i for i, r in enumerate(trace.requests) if r.compactions]
            tokens_ax.plot(
                [xs[i] for i in marks],
                [ys[i] for i in marks],
                "o",
                color=colour,
                markerfacecolor="white",
            )
            running = CostTotals(price)
            for r in trace.requests:
                running.add(r.prompt_tokens, r.cached_tokens, r.completion_tokens)
            cost_ax.plot(xs, running.cumulative or [], style, color=colour, label=label)
        tokens_ax.axhline(context_length, color=_LIMIT, linewidth=1, label="context length")
        tokens_ax.set_title(f"{comparison.session_id}: prompt tokens per request")
        tokens_ax.legend(loc="upper left", fontsize=8)
        cost_ax.set_title("cumulative cost (USD)")
        cost_ax.set_xlabel("request")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    path: str | Path,
    comparisons: Sequence[SessionComparison],
    *,
    price: Price,
    context_length: int,
) -> Path:
    """Write ``.html`` (self-contained) or ``.png`` (matplotlib) by the file's suffix."""
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix == ".png":
        write_png(file, comparisons, price=price, context_length=context_length)
    elif suffix in (".html", ".htm"):
        file.write_text(
            render_html(comparisons, price=price, context_length=context_length), encoding="utf-8"
        )
    else:
        raise ValueError(f"report file {file}: expected a .html or .png name")
    return file
