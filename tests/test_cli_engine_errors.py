"""An engine name that does not load is one error line (exit 78), never a silent fallback."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from contextengine.cli import main

IMPORT_ERROR = (
    "error: context engine plugin 'nosuchmod:X (direct reference: nosuchmod:X)' failed to load: "
    "import failed: ModuleNotFoundError: No module named 'nosuchmod'\n"
)
NOT_FOUND = "error: no context engine named 'nosuch'; available: compressor, lcm\n"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("nosuchmod:X", IMPORT_ERROR, id="module-attribute"),
        pytest.param("nosuch", NOT_FOUND, id="plain-name"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["chat", "--model", "m", "--base-url", "http://127.0.0.1:9"], id="chat"),
        pytest.param(["demo"], id="demo"),
    ],
)
def test_an_engine_that_does_not_load_is_one_error_line(
    command: list[str], name: str, expected: str
) -> None:
    result = CliRunner().invoke(main, [*command, "--engine", name])
    assert result.exit_code == 78
    assert result.output == expected  # no warning, no fallback session, no traceback


def test_a_configured_engine_that_does_not_load_fails_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTENGINE_ENGINE", "nosuchmod:X")
    result = CliRunner().invoke(main, ["chat", "--model", "m"])
    assert result.exit_code == 78 and result.output == IMPORT_ERROR


def test_config_names_an_engine_that_does_not_load_and_where_it_was_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTENGINE_ENGINE", "nosuch")
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 78
    # Still shown (the column widths follow the longest setting name).
    assert re.search(r"^engine +nosuch +env CONTEXTENGINE_ENGINE$", result.stdout, re.MULTILINE)
    assert result.stderr == (
        "error: the configured engine 'nosuch' (env CONTEXTENGINE_ENGINE) cannot be loaded: "
        "no context engine named 'nosuch'; available: compressor, lcm\n"
    )
    as_json = CliRunner().invoke(main, ["config", "--json"])
    assert as_json.exit_code == 78
    engine = json.loads(as_json.stdout)["engine"]
    assert engine["value"] == "nosuch" and "no context engine named" in engine["problem"]


def test_engines_warns_about_a_configured_engine_that_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTENGINE_ENGINE", "nosuch")
    result = CliRunner().invoke(main, ["engines"])
    assert result.exit_code == 0 and "compressor" in result.stdout
    assert result.stderr.startswith("warning: the configured engine 'nosuch' (env ")


def test_a_good_configuration_has_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTENGINE_ENGINE", "lcm")
    for command in (["config"], ["engines"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0 and result.stderr == ""
