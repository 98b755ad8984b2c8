"""The Hermes adapters without Hermes: lazy import, clear errors, value mapping, plugin directories.

What needs a real ``hermes-agent`` (Hermes's loop running our engines, its
compressor on our host) is in ``tests/hermes``, run by ``.ci/run`` in an
environment of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from contextengine import (
    ContextHost,
    EngineLoadError,
    HermesEngine,
    HermesUnavailableError,
    available_engines,
    load_engine,
    load_hermes_plugin_dir,
    normalize_usage,
    validate_messages,
)
from contextengine.hermes import (
    bare_tool_schema,
    hermes_engine_class,
    hermes_version,
    usage_from_hermes,
    wrapped_tool_schema,
)

without_hermes = pytest.mark.skipif(
    hermes_version() is not None, reason="hermes-agent is installed here"
)


def test_importing_contextengine_never_imports_hermes() -> None:
    code = (
        "import sys, contextengine, contextengine.hermes, contextengine.hermes.plugin\n"
        "loaded = [m for m in ('agent', 'run_agent', 'hermes_cli', 'hermes_constants')"
        " if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


@without_hermes
def test_the_adapter_without_hermes_names_the_package_and_the_extra() -> None:
    with pytest.raises(HermesUnavailableError) as caught:
        hermes_engine_class()
    assert "hermes-agent" in str(caught.value)
    assert "contextengine[hermes]" in str(caught.value)
    assert isinstance(caught.value, ImportError)


@without_hermes
def test_engine_hermes_is_unlisted_and_says_what_to_install_without_hermes() -> None:
    assert "hermes" not in {info.name for info in available_engines()}
    with pytest.raises(EngineLoadError, match=r"hermes-agent.*contextengine\[hermes\]"):
        load_engine("hermes", context_length=65_536)


@without_hermes
def test_engines_command_lists_no_hermes_row_without_hermes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "contextengine", "engines"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "hermes" not in result.stdout


# ------------------------------------------------------------ values crossing over


def test_hermes_usage_buckets_reach_our_normalised_usage() -> None:
    hermes = {
        "prompt_tokens": 1_000,
        "completion_tokens": 50,
        "total_tokens": 1_050,
        "input_tokens": 200,
        "output_tokens": 50,
        "cache_read_tokens": 700,
        "cache_write_tokens": 100,
        "reasoning_tokens": 20,
    }
    normal = normalize_usage(usage_from_hermes(hermes))
    assert normal["prompt_tokens"] == 1_000
    assert normal["cache_read_tokens"] == 700
    assert normal["cache_write_tokens"] == 100
    assert normal["input_tokens"] == 200
    assert normal["reasoning_tokens"] == 20
    assert normal["total_tokens"] == 1_050


def test_empty_hermes_usage_maps_to_nothing() -> None:
    assert usage_from_hermes({}) == {}
    assert usage_from_hermes(None) == {}


def test_tool_schemas_unwrap_for_hermes_and_wrap_for_us() -> None:
    bare = {"name": "lookup", "description": "Look up.", "parameters": {"type": "object"}}
    wrapped = wrapped_tool_schema(bare)
    assert wrapped == {"type": "function", "function": bare}
    assert bare_tool_schema(wrapped) == bare
    assert wrapped_tool_schema(wrapped) == wrapped
    with pytest.raises(ValueError, match="no name"):
        wrapped_tool_schema({"description": "nameless"})


# ------------------------------------------------------------ Hermes plugin directories

PLUGIN = '''
import json
from .notes import NOTE

class KeepEnds:
    """A Hermes-style engine: keeps the system prompt and the last four messages."""
    name = "keep-ends"
    last_prompt_tokens = 0
    last_completion_tokens = 0
    last_total_tokens = 0
    threshold_tokens = 0
    context_length = 0
    compression_count = 0
    threshold_percent = 0.5

    def update_from_response(self, usage):
        self.last_prompt_tokens = usage.get("prompt_tokens", 0)

    def should_compress(self, prompt_tokens=None):
        return (prompt_tokens or self.last_prompt_tokens) >= self.threshold_tokens

    def compress(self, messages, current_tokens=None):
        self.compression_count += 1
        head = [m for m in messages[:1] if m.get("role") == "system"]
        return head + [{"role": "user", "content": NOTE}] + messages[-4:]

    def update_model(self, model, context_length, base_url="", api_key="",
                     provider="", api_mode=""):
        self.context_length = context_length
        self.threshold_tokens = int(context_length * self.threshold_percent)

    def get_tool_schemas(self):
        return [{"name": "note_lookup", "description": "The note.",
                 "parameters": {"type": "object", "properties": {}}}]

    def handle_tool_call(self, name, args, **kwargs):
        return json.dumps({"note": NOTE, "seen": len(kwargs.get("messages") or [])})

def register(ctx):
    ctx.register_command("keep", lambda raw: "ok", description="ignored on our host")
    ctx.register_context_engine(KeepEnds())
'''


def _plugin_dir(root: Path, body: str) -> Path:
    folder = root / "keep_ends"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(body))
    (folder / "notes.py").write_text('NOTE = "[earlier turns dropped by keep-ends]"\n')
    (folder / "plugin.yaml").write_text("name: keep-ends\ndescription: test engine\n")
    return folder


def _history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i} " + "word " * 60})
        messages.append({"role": "assistant", "content": f"answer {i} " + "text " * 60})
    return messages


def test_a_hermes_plugin_directory_runs_on_our_host(tmp_path: Path) -> None:
    engine = HermesEngine(plugin_dir=str(_plugin_dir(tmp_path, PLUGIN)), context_length=2_000)
    assert engine.name == "hermes:keep_ends"
    # Hooks the plugin lacks keep our defaults, and the engine says which.
    assert "select_context" in engine.unavailable
    host = ContextHost(engine, model="test-model", context_length=2_000)
    host.start_session("s1")
    history = _history(12)
    host.record_response({"prompt_tokens": 1_900, "completion_tokens": 10})
    sent = host.prepare_request(history)
    validate_messages(sent)
    assert engine.compression_count == 1
    assert sent[0] == history[0] and sent[-1] == history[-1]
    assert "[earlier turns dropped by keep-ends]" in json.dumps(sent)
    # The bare schema came back wrapped; the call reaches the plugin with the history.
    assert host.tool_schemas() == [
        {
            "type": "function",
            "function": {
                "name": "note_lookup",
                "description": "The note.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    answer = json.loads(host.handle_tool_call("note_lookup", {}, messages=history))
    assert answer == {"note": "[earlier turns dropped by keep-ends]", "seen": len(history)}


def test_a_plugin_directory_without_register_is_scanned_for_a_subclass(tmp_path: Path) -> None:
    body = PLUGIN.replace("class KeepEnds:", "class KeepEnds(Base):").split("def register")[0]
    body = "from contextengine.testing import RecordingEngine as Base\n" + body
    engine = load_hermes_plugin_dir(_plugin_dir(tmp_path, body), abc=_recording_base())
    assert type(engine).__name__ == "KeepEnds"


def _recording_base() -> type:
    from contextengine.testing import RecordingEngine

    return RecordingEngine


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        pytest.param({}, "no __init__.py", id="empty"),
        pytest.param({"__init__.py": "raise RuntimeError('boom')"}, "import failed", id="broken"),
        pytest.param(
            {"__init__.py": "def register(ctx):\n    raise KeyError('x')\n"},
            "register",
            id="register-fails",
        ),
    ],
)
def test_a_bad_plugin_directory_is_an_error_naming_it(
    tmp_path: Path, files: dict[str, str], problem: str
) -> None:
    folder = tmp_path / "bad_plugin"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(EngineLoadError, match=problem) as caught:
        load_hermes_plugin_dir(folder, abc=_recording_base())
    assert "bad_plugin" in str(caught.value)
