"""The ``hermes`` command itself, as a Hermes user runs it, with our lcm selected in its config.

One non-interactive ``hermes chat -q`` in a subprocess, its provider the
scripted server: Hermes offers our tools to the model, runs the model's
``lcm_grep`` through our engine, and the archive in the Hermes home holds the
turn when the command exits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from contextengine.store import open_store
from contextengine.testing import ScriptedOpenAIServer


def test_hermes_chat_runs_lcm_from_its_config(tmp_path: Path) -> None:
    hermes = Path(sys.executable).parent / "hermes"
    home = tmp_path / "hermes-home"
    home.mkdir()
    with ScriptedOpenAIServer() as server:
        (home / "config.yaml").write_text(
            "model:\n  default: scripted-model\n  provider: custom\n"
            f"  base_url: {server.base_url}\n  context_length: 65536\n"
            "plugins:\n  enabled: [contextengine]\n"
            "context:\n  engine: contextengine-lcm\n"
        )
        server.add_reply("", tool_calls=[{"name": "lcm_grep", "arguments": {"query": "sunflower"}}])
        server.add_reply("You said the sunflower.")
        env = {**os.environ, "HERMES_HOME": str(home), "OPENAI_API_KEY": "test-key"}
        result = subprocess.run(
            [str(hermes), "chat", "-Q", "-t", "context_engine", "-q", "My flower: sunflower."],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        bodies = server.requests
    assert result.returncode == 0, result.stderr
    assert "You said the sunflower." in result.stdout
    tools = {tool["function"]["name"] for tool in bodies[0]["tools"]}
    assert {"lcm_grep", "lcm_describe", "lcm_expand"} <= tools
    grep_answer = json.loads(bodies[1]["messages"][-1]["content"])
    assert grep_answer["results"][0]["role"] == "user"
    store = open_store(str(home / "contextengine" / "lcm.sqlite"))
    try:
        (conversation,) = store.list_conversations()
        roles = [record.role for record in store.get_messages(conversation.id)]
    finally:
        store.close()
    assert roles == ["user", "assistant", "tool", "assistant"]
