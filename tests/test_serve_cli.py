"""``contextengine serve`` on the command line: the real process, its configuration, its errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from click.testing import CliRunner

from contextengine.cli import main
from contextengine.testing import ScriptedOpenAIServer
from serve_support import need


def test_without_the_extra_the_error_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what a missing package looks like
    result = CliRunner().invoke(main, ["serve", "--upstream", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "pip install 'contextengine[serve]'" in lines[0]


def test_the_upstream_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    need("uvicorn")
    monkeypatch.delenv("CONTEXTENGINE_UPSTREAM_URL", raising=False)
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 2
    assert "--upstream" in result.output


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_command_serves_with_settings_from_the_environment(tmp_path: object) -> None:
    openai = need("openai")
    need("uvicorn")
    port = _free_port()
    with ScriptedOpenAIServer(default_reply="Through the proxy.") as upstream:
        env = {
            **os.environ,
            "CONTEXTENGINE_UPSTREAM_URL": upstream.base_url,
            "CONTEXTENGINE_ENGINE": "lcm",
            "CONTEXTENGINE_SERVE_API_KEY": "proxy-secret-key",
        }
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "contextengine",
                "serve",
                "--port",
                str(port),
                "--store",
                ":memory:",
                "--context-length",
                "8000",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.1)
            with openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="proxy-secret-key", max_retries=0
            ) as client:
                answer = client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "a private remark"}]
                )
            assert answer.choices[0].message.content == "Through the proxy."
            assert {t["function"]["name"] for t in upstream.requests[-1]["tools"]} == {
                "lcm_grep",
                "lcm_describe",
                "lcm_expand",
            }
        finally:
            process.terminate()
            _out, err = process.communicate(timeout=30)
    assert "lcm engine, 8,000-token window" in err
    assert f"http://127.0.0.1:{port}" in err  # bound to loopback by default
    assert "proxy-secret-key" not in err and "private remark" not in err
