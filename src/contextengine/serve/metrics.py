"""The proxy's counters, as Prometheus text (``GET /metrics``).

No client library: a handful of counters, a gauge and the text format
(https://prometheus.io/docs/instrumenting/exposition_formats/) are a few
lines, and the proxy stays one dependency lighter. Names are prefixed
``contextengine_serve_``; labels never hold a session key or message text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from contextengine.events import CompactionEvent, Event
from contextengine.relay.actions import EngineActions

__all__ = ["Metrics"]

_P = "contextengine_serve_"


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{k}="{v.replace(chr(92), "/").replace(chr(34), chr(39))}"' for k, v in pairs)
    return "{" + inner + "}"


class Metrics:
    """Every figure ``/metrics`` shows, updated by the proxy as requests end."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[tuple[str, str], ...]] = Counter()
        self.upstream_errors: Counter[tuple[tuple[str, str], ...]] = Counter()
        self.compactions: Counter[tuple[tuple[str, str], ...]] = Counter()
        self.engine_failures: Counter[tuple[tuple[str, str], ...]] = Counter()
        self.tokens_received = 0
        self.tokens_sent = 0
        self.engine_tool_calls = 0
        self.engine_seconds = 0.0
        self.engine_requests = 0

    def observer(self) -> Callable[[Event], None]:
        """An observer for every host: counts compactions by phase and outcome."""

        def observe(event: Event) -> None:
            if isinstance(event, CompactionEvent):
                ok = event.level == "info" and not event.aborted and not event.error
                outcome = "ok" if ok else (event.reason or "failed")
                self.compactions[(("cause", event.phase), ("outcome", outcome))] += 1

        return observe

    def request(self, endpoint: str, status: int) -> None:
        self.requests[(("endpoint", endpoint), ("status", str(status)))] += 1

    def upstream_error(self, endpoint: str, kind: str) -> None:
        self.upstream_errors[(("endpoint", endpoint), ("kind", kind))] += 1

    def actions(self, actions: EngineActions) -> None:
        self.tokens_received += actions.tokens_received
        self.tokens_sent += actions.tokens_sent
        self.engine_tool_calls += actions.engine_tool_calls
        self.engine_seconds += actions.engine_seconds
        self.engine_requests += 1
        if actions.fail_open:
            self.engine_failures[(("error", actions.fail_open_reason),)] += 1

    def render(
        self, *, sessions: int, evicted: int, resumed: int | None = None, contended: int = 0
    ) -> str:
        """The Prometheus text exposition of every figure."""
        lines: list[str] = []

        def family(name: str, kind: str, text: str, rows: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {_P}{name} {text}")
            lines.append(f"# TYPE {_P}{name} {kind}")
            for suffix, value in rows:
                shown = repr(float(value)) if isinstance(value, float) else str(value)
                lines.append(f"{_P}{name}{suffix} {shown}")

        def counted(counter: Counter[tuple[tuple[str, str], ...]]) -> list[tuple[str, float]]:
            return [(_labels(key), value) for key, value in sorted(counter.items())]

        family(
            "requests_total",
            "counter",
            "Requests answered, by endpoint and status.",
            counted(self.requests),
        )
        family(
            "upstream_errors_total",
            "counter",
            "Upstream failures: error status, unreachable, malformed answer.",
            counted(self.upstream_errors),
        )
        family(
            "compactions_total",
            "counter",
            "Compactions, by cause (phase) and outcome.",
            counted(self.compactions),
        )
        family(
            "engine_failures_total",
            "counter",
            "Requests sent upstream unmodified because the engine failed (fail-open).",
            counted(self.engine_failures),
        )
        family(
            "prompt_tokens_received_total",
            "counter",
            "Prompt tokens of the histories clients sent (counted offline).",
            [("", self.tokens_received)],
        )
        family(
            "prompt_tokens_sent_total",
            "counter",
            "Prompt tokens the upstream reported for what the proxy sent.",
            [("", self.tokens_sent)],
        )
        family(
            "engine_tool_calls_total",
            "counter",
            "Engine tool calls the proxy answered itself.",
            [("", self.engine_tool_calls)],
        )
        family(
            "engine_seconds",
            "summary",
            "Time spent in the host and engine per request (the proxy's overhead).",
            [("_sum", self.engine_seconds), ("_count", self.engine_requests)],
        )
        family("sessions_live", "gauge", "Sessions held in memory.", [("", sessions)])
        family("sessions_evicted_total", "counter", "Sessions ended to make room.", [("", evicted)])
        if resumed is not None:  # a fleet (a store shared across processes)
            family(
                "sessions_resumed_total",
                "counter",
                "Sessions rebuilt from the archive because another process served them.",
                [("", resumed)],
            )
            family(
                "turn_lock_contended_total",
                "counter",
                "Requests that waited for a session's turn lock held by another process.",
                [("", contended)],
            )
        return "\n".join(lines) + "\n"
