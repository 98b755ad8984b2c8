"""Hermes's engines on our host: its ContextCompressor through ContextHost, a plugin directory.

The engine contract suite (tests/test_engine_contract.py) runs against
``load_engine("hermes")`` too, in the same environment; this file covers what
is particular to Hermes.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from contextengine import ContextHost, DeterministicSummarizer, load_engine, validate_messages
from contextengine.hermes import HermesEngine
from contextengine.summary_request import SummaryRequest


class CountingSummarizer:
    """Our summariser, counting what Hermes's compressor asks of it."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return DeterministicSummarizer().summarize(request)


def _history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"task {i}: fix src/mod{i}.py " + "x " * 900})
        messages.append({"role": "assistant", "content": f"fixed src/mod{i}.py " + "y " * 900})
    return messages


def test_hermes_compressor_runs_on_our_host_and_summarises_with_ours() -> None:
    summarizer = CountingSummarizer()
    engine = load_engine("hermes", context_length=65_536, model="m", summarizer=summarizer)
    assert isinstance(engine, HermesEngine)
    host = ContextHost(engine, model="m", context_length=65_536)
    host.start_session("s1")
    history = _history(40)  # ~73K tokens: over Hermes's 64K-floored threshold
    host.record_response({"prompt_tokens": 70_000, "completion_tokens": 10})
    sent = host.prepare_request(history)
    validate_messages(sent)
    assert engine.compression_count == 1
    assert len(sent) < len(history)
    # Hermes chose the turns; our summariser wrote the summary, within Hermes's budget.
    assert len(summarizer.requests) == 1
    request = summarizer.requests[0]
    assert request.metadata == {"engine": "hermes"}
    assert any("src/mod1.py" in str(m.get("content")) for m in request.messages)
    assert "src/mod1.py" in json.dumps(sent)
    assert engine.last_compression is not None
    assert engine.last_compression.summarizer_calls == 1


def test_a_plugin_directory_subclassing_hermes_abc_loads_by_path(tmp_path: Path) -> None:
    folder = tmp_path / "tail_only"
    folder.mkdir()
    (folder / "__init__.py").write_text(
        textwrap.dedent(
            """
            from agent.context_engine import ContextEngine

            class TailOnly(ContextEngine):
                @property
                def name(self):
                    return "tail-only"

                def update_from_response(self, usage):
                    self.last_prompt_tokens = usage.get("prompt_tokens", 0)

                def should_compress(self, prompt_tokens=None):
                    return (prompt_tokens or self.last_prompt_tokens) >= self.threshold_tokens

                def compress(self, messages, current_tokens=None, focus_topic=None,
                             force=False, memory_context=""):
                    self.compression_count += 1
                    return messages[:1] + messages[-2:]
            """
        )
    )
    engine = HermesEngine(plugin_dir=str(folder), context_length=100_000)
    assert type(engine.hermes).__name__ == "TailOnly"
    # Hermes's ABC defaults answer the hooks the plugin does not override.
    assert engine.get_tool_schemas() == []
    out = engine.compress(_history(5), force=True)
    validate_messages(out)
    assert len(out) == 3 and engine.compression_count == 1


# ------------------------------------------------------------ the CLI comparisons

FIXTURES = Path(__file__).parent.parent / "fixtures" / "replay"


def test_replay_compares_hermes_beside_our_engines() -> None:
    from click.testing import CliRunner

    from contextengine.cli.replay import replay

    result = CliRunner().invoke(
        replay,
        [
            str(FIXTURES / "agent_session.json"),
            "--compare",
            "compressor,lcm,hermes",
            "--context-length",
            "2048",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    totals = json.loads(result.stdout)["totals"]
    assert set(totals) == {"compressor", "lcm", "hermes"}
    hermes = totals["hermes"]
    assert hermes["requests"] == totals["lcm"]["requests"] == 24
    assert hermes["compactions"] >= 1
    assert hermes["prompt_tokens_total"] < hermes["baseline_prompt_tokens_total"]


def test_eval_recall_compares_hermes_beside_our_engines() -> None:
    from click.testing import CliRunner

    from contextengine.cli.replay import eval_group

    result = CliRunner().invoke(
        eval_group,
        [
            "recall",
            "--qa",
            str(FIXTURES / "locomo_tiny.json"),
            "--compare",
            "compressor,lcm,hermes",
            "--context-length",
            "1024",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = {r["engine"]: r for r in json.loads(result.stdout)["results"]}
    assert set(rows) == {"compressor", "lcm", "hermes"}
    # Hermes's compressor has no search tool; lcm does.
    assert rows["hermes"]["has_search"] is False
    assert rows["lcm"]["has_search"] is True
