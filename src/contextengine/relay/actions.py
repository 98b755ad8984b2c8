"""What the engine did for one request: shown to the client as ``X-Context-*`` headers,
counted in the proxy's metrics, and kept by a wrapped client as ``last_actions``."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineActions"]


@dataclass
class EngineActions:
    """The engine's part in one request (all rounds), filled in by the relay as it goes."""

    engine: str = ""
    #: Compactions the host ran for this request (preflight and after engine rounds).
    compactions: int = 0
    #: Calls to the engine's tools the relay answered itself.
    engine_tool_calls: int = 0
    #: Upstream requests made for engine-tool rounds, beyond the first.
    engine_rounds: int = 0
    #: The engine failed and the client's request went upstream unmodified.
    fail_open: bool = False
    fail_open_reason: str = ""
    #: Prompt tokens of the history the client sent (counted offline).
    tokens_received: int = 0
    #: Prompt tokens the upstream reported for the requests it got (all rounds).
    tokens_sent: int = 0
    #: Seconds spent in the host and engine (ingest, compaction, selection, tools).
    engine_seconds: float = 0.0

    def headers(self) -> dict[str, str]:
        """The ``X-Context-*`` response headers (no message text, no session key)."""
        headers = {
            "x-context-engine": self.engine,
            "x-context-compactions": str(self.compactions),
            "x-context-engine-tool-calls": str(self.engine_tool_calls),
            "x-context-tokens-received": str(self.tokens_received),
        }
        if self.fail_open:
            headers["x-context-fail-open"] = self.fail_open_reason or "engine error"
        return headers
