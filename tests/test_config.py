"""Configuration precedence: defaults < pyproject < contextengine.toml < environment < arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from contextengine.cli.engines_cmd import config as config_command
from contextengine.config import resolve_config
from contextengine.errors import ConfigError

PYPROJECT = """
[project]
name = "someone-elses-agent"

[tool.contextengine]
engine = "lcm"
context_length = 64_000
model = "gpt-4o-mini"

[tool.contextengine.options]
threshold_percent = 0.6
"""


def test_defaults_when_nothing_is_configured(tmp_path: Path) -> None:
    config = resolve_config(cwd=tmp_path, environ={})
    assert (config.engine, config.context_length, config.model) == ("compressor", 128_000, "")
    assert all(source == "default" for _, _, source in config.display_items())


def test_pyproject_table_overrides_defaults(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    config = resolve_config(cwd=tmp_path, environ={})
    assert (config.engine, config.context_length, config.model) == ("lcm", 64_000, "gpt-4o-mini")
    assert config.source("engine") == "pyproject.toml [tool.contextengine]"
    assert config.engine_options == {"threshold_percent": 0.6}
    assert config.source("store_url") == "default"


def test_contextengine_toml_overrides_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "contextengine.toml").write_text('engine = "compressor"\n')
    config = resolve_config(cwd=tmp_path, environ={})
    assert (config.engine, config.source("engine")) == ("compressor", "contextengine.toml")
    assert config.source("context_length") == "pyproject.toml [tool.contextengine]"


def test_environment_overrides_files_and_arguments_override_environment(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    env = {"CONTEXTENGINE_ENGINE": "compressor", "CONTEXTENGINE_CONTEXT_LENGTH": "32000"}
    config = resolve_config(cwd=tmp_path, environ=env, context_length=8_000, model=None)
    assert (config.engine, config.source("engine")) == ("compressor", "env CONTEXTENGINE_ENGINE")
    assert (config.context_length, config.source("context_length")) == (8_000, "argument")
    assert config.source("model") == "pyproject.toml [tool.contextengine]"  # None = not given


def test_summariser_key_falls_back_to_openai_and_is_masked(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": "sk-secret-value-123456", "CONTEXTENGINE_SUMMARY_MODEL": "small"}
    config = resolve_config(cwd=tmp_path, environ=env)
    assert config.get("summary_api_key") == "sk-secret-value-123456"
    assert config.source("summary_api_key") == "env OPENAI_API_KEY"
    shown = {key: value for key, value, _ in config.display_items()}
    assert "secret" not in shown["summary_api_key"]
    assert shown["summary_model"] == "small"


@pytest.mark.parametrize(
    ("files", "env", "needle"),
    [
        pytest.param({"contextengine.toml": "engien = 'lcm'\n"}, {}, "'engien'", id="unknown-key"),
        pytest.param(
            {"contextengine.toml": "context_length = 'big'\n"}, {}, "context_length", id="bad-type"
        ),
        pytest.param(
            {},
            {"CONTEXTENGINE_CONTEXT_LENGTH": "lots"},
            "CONTEXTENGINE_CONTEXT_LENGTH",
            id="bad-env-integer",
        ),
        pytest.param(
            {"pyproject.toml": "[tool.contextengine\n"}, {}, "invalid TOML", id="bad-toml"
        ),
    ],
)
def test_configuration_mistakes_name_their_place(
    tmp_path: Path, files: dict[str, str], env: dict[str, str], needle: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=needle):
        resolve_config(cwd=tmp_path, environ=env)


def test_config_command_shows_values_and_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTEXTENGINE_MODEL", "gpt-4o")
    result = CliRunner().invoke(config_command, [])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()[2:]}
    assert "lcm" in lines["engine"] and "pyproject.toml" in lines["engine"]
    assert "gpt-4o" in lines["model"] and "env CONTEXTENGINE_MODEL" in lines["model"]
    assert "default" in lines["store_url"]
