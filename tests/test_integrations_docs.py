"""The examples of docs/integrations.md run as printed (offline, against the scripted server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


def _examples(heading: str) -> list[str]:
    """The python blocks of the section whose title starts with ``heading``."""
    sections = re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)
    section = next(s for s in sections if s.startswith(heading))
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize(
    ("heading", "module", "expected"),
    [
        pytest.param("LangChain", "langchain.agents", "messages archived", id="langchain"),
        pytest.param("OpenAI Agents SDK", "agents", "items in the session", id="openai-agents"),
    ],
)
def test_the_example_runs(heading: str, module: str, expected: str, tmp_path: Path) -> None:
    pytest.importorskip(module, reason=f"the {heading} example needs its extra")
    (example,) = _examples(heading)
    env = {
        **os.environ,
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "CONTEXTENGINE_HOME": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", example],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert expected in out.stdout
