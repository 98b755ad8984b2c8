"""The public surface: everything the issues name is importable from ``contextengine``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import contextengine

REQUIRED = {
    # foundation
    "ContextEngine", "automatic_compaction_status_message", "call_with_supported_kwargs",
    "normalize_usage", "sanitize_memory_context", "validate_messages", "sanitize_tool_pairs",
    "from_anthropic", "to_anthropic", "redact", "count_tokens", "count_message_tokens",
    "estimate_tokens_rough", "ContextEngineError", "InvalidMessagesError", "SummarizerError",
    "SummarizerAuthError", "SummarizerTransientError", "StoreError", "EngineNotFoundError",
    "EngineLoadError",
    # compressor
    "ContextCompressor", "SummaryRequest", "DeterministicSummarizer",
    "OpenAICompatibleSummarizer", "summarizer_from_env", "is_summary_message",
    # registry and host
    "load_engine", "available_engines", "ContextHost", "AsyncContextHost", "CompactionEvent",
    "is_context_overflow_error",
    # lossless engine and stores
    "LosslessEngine", "SQLiteStore", "Store", "PostgresStore",
}  # fmt: skip


def test_all_is_sorted_and_complete() -> None:
    assert contextengine.__all__ == sorted(contextengine.__all__)
    assert set(contextengine.__all__) >= REQUIRED


@pytest.mark.parametrize("name", sorted(contextengine.__all__))
def test_every_public_name_imports(name: str) -> None:
    assert getattr(contextengine, name) is not None


def test_error_hierarchy_has_one_root() -> None:
    for name in contextengine.__all__:
        value = getattr(contextengine, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, contextengine.ContextEngineError), name
    assert issubclass(contextengine.SummarizerAuthError, contextengine.SummarizerError)
    assert issubclass(contextengine.SummarizerTransientError, contextengine.SummarizerError)


def test_postgres_store_without_the_extra_names_it() -> None:
    # Simulate a machine without psycopg: the import error must say what to install.
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "import contextengine\n"
        "try:\n    contextengine.PostgresStore\n"
        "except ImportError as e:\n    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "contextengine[postgres]" in result.stdout


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        contextengine.no_such_name  # noqa: B018 - the access is the test
