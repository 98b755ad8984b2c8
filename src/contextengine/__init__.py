"""contextengine: conversation context management for LLM agents.

Every public name is importable from here; the modules behind them are
implementation detail. See the README for the architecture and
``contextengine/engine.py`` for the engine lifecycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contextengine.async_host import AsyncContextHost
from contextengine.commands import ChatCommand, ChatCommandInput
from contextengine.compaction_plan import CompressionPlan, KeepCut, keep_last_cut
from contextengine.engine import (
    CompactionGate,
    ContextEngine,
    automatic_compaction_status_message,
    call_with_supported_kwargs,
    compaction_threshold,
    sanitize_memory_context,
)
from contextengine.engines.compressor import (
    CompressionReport,
    ContextCompressor,
    is_summary_message,
)
from contextengine.engines.lossless import LosslessEngine
from contextengine.errors import (
    ConfigError,
    ContextEngineError,
    ContextOverflowError,
    EngineLoadError,
    EngineNotFoundError,
    FormatError,
    HermesUnavailableError,
    InvalidMessagesError,
    StoreConflictError,
    StoreError,
    SummarizerAuthError,
    SummarizerError,
    SummarizerTransientError,
    VocabularyError,
)
from contextengine.events import CompactionEvent, HostEvent, Observer
from contextengine.formats import (
    Session,
    SessionStream,
    iter_sessions,
    load_session,
    load_sessions,
    stream_session,
)
from contextengine.hermes import HermesEngine, load_hermes_plugin_dir
from contextengine.host import ContextHost
from contextengine.identifiers import (
    append_missing_identifiers,
    expand_identifiers,
    is_identifier,
    listed_identifiers,
    pack_identifiers,
)
from contextengine.messages import (
    from_anthropic,
    sanitize_tool_pairs,
    to_anthropic,
    validate_messages,
)
from contextengine.overflow import is_context_overflow_error
from contextengine.redact import redact
from contextengine.registry import available_engines, load_engine
from contextengine.store import SQLiteStore, Store, open_store
from contextengine.summarizer_config import MainModel, SummarizerSetup, configured_summarizers
from contextengine.summarizers import (
    DeterministicSummarizer,
    OpenAICompatibleSummarizer,
    Summarizer,
    SummaryRequest,
    summarizer_from_env,
)
from contextengine.tokens import count_message_tokens, count_tokens, estimate_tokens_rough
from contextengine.usage import normalize_usage

if TYPE_CHECKING:
    from contextengine.integrations.clients import wrap
    from contextengine.store.postgres import PostgresStore

__version__ = "0.1.0"

__all__ = [
    "AsyncContextHost",
    "ChatCommand",
    "ChatCommandInput",
    "CompactionEvent",
    "CompactionGate",
    "CompressionPlan",
    "CompressionReport",
    "ConfigError",
    "ContextCompressor",
    "ContextEngine",
    "ContextEngineError",
    "ContextHost",
    "ContextOverflowError",
    "DeterministicSummarizer",
    "EngineLoadError",
    "EngineNotFoundError",
    "FormatError",
    "HermesEngine",
    "HermesUnavailableError",
    "HostEvent",
    "InvalidMessagesError",
    "KeepCut",
    "LosslessEngine",
    "MainModel",
    "Observer",
    "OpenAICompatibleSummarizer",
    "PostgresStore",
    "SQLiteStore",
    "Session",
    "SessionStream",
    "Store",
    "StoreConflictError",
    "StoreError",
    "Summarizer",
    "SummarizerAuthError",
    "SummarizerError",
    "SummarizerSetup",
    "SummarizerTransientError",
    "SummaryRequest",
    "VocabularyError",
    "append_missing_identifiers",
    "automatic_compaction_status_message",
    "available_engines",
    "call_with_supported_kwargs",
    "compaction_threshold",
    "configured_summarizers",
    "count_message_tokens",
    "count_tokens",
    "estimate_tokens_rough",
    "expand_identifiers",
    "from_anthropic",
    "is_context_overflow_error",
    "is_identifier",
    "is_summary_message",
    "iter_sessions",
    "keep_last_cut",
    "listed_identifiers",
    "load_engine",
    "load_hermes_plugin_dir",
    "load_session",
    "load_sessions",
    "normalize_usage",
    "open_store",
    "pack_identifiers",
    "redact",
    "sanitize_memory_context",
    "sanitize_tool_pairs",
    "stream_session",
    "summarizer_from_env",
    "to_anthropic",
    "validate_messages",
    "wrap",
]


def __getattr__(name: str) -> Any:
    # PostgresStore needs the optional psycopg driver: import it only when asked,
    # and say which extra to install when it is missing.
    if name == "PostgresStore":
        try:
            from contextengine.store.postgres import PostgresStore
        except ImportError as exc:
            raise ImportError(
                "PostgresStore needs the PostgreSQL extra: pip install 'contextengine[postgres]'"
                f" ({exc})"
            ) from exc
        return PostgresStore
    if name == "wrap":
        # contextengine.wrap(client, ...): imported when asked, so that importing
        # contextengine never loads the relay (and it never imports an SDK itself).
        from contextengine.integrations.clients import wrap

        return wrap
    raise AttributeError(f"module 'contextengine' has no attribute {name!r}")
