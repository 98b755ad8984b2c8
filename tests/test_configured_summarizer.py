"""The configured summariser: what the configuration asks for is what writes the summaries.

Every test talks to :class:`~contextengine.testing.ScriptedOpenAIServer`, a
real HTTP server on 127.0.0.1: one plays the summary model, another the main
(chat) model, and the requests each received are the evidence.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextengine import ContextHost, load_engine
from contextengine.config import config_overrides, resolve_config
from contextengine.engine import ContextEngine
from contextengine.events import CompactionEvent, Event
from contextengine.openai_summarizer import OpenAICompatibleSummarizer
from contextengine.summarizer_config import MainModel, configured_summarizers
from contextengine.summary_chain import OFFLINE_SUMMARY_MODEL, SummaryChain
from contextengine.summary_prompt import SUMMARY_SYSTEM_PROMPT
from contextengine.testing import ScriptedOpenAIServer

Message = dict[str, Any]
ENGINES = [pytest.param("compressor", id="compressor"), pytest.param("lcm", id="lcm")]
SUMMARY = "## Goal\nFix the bugs."
REPLAY_AGENT = str(Path(__file__).parent / "fixtures" / "replay" / "agent_session.json")


def conversation(turns: int = 8) -> list[Message]:
    """A coding session with big tool outputs: enough for both engines to summarise."""
    messages: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        # Long enough that every lcm leaf is bigger than a model's short summary.
        details = " ".join(f"It fails on input {turn * 10 + n} with a KeyError." for n in range(8))
        messages.append(
            {"role": "user", "content": f"Task {turn}: fix bug #{100 + turn}. {details}"}
        )
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{turn}.py"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        # Under the lcm engine's large-content size: the view starts as the messages.
        output = "\n".join(f"line {n} of f{turn}.py: value = {n * turn}" for n in range(60))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        messages.append({"role": "assistant", "content": f"Fixed bug #{100 + turn} in f{turn}.py."})
    return messages


def is_summary_request(body: Any) -> bool:
    messages = body.get("messages") if isinstance(body, dict) else None
    return bool(messages) and messages[0].get("content") == SUMMARY_SYSTEM_PROMPT


@pytest.fixture
def summary_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(model="summary-model") as server:
        yield server


@pytest.fixture
def main_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(model="main-model") as server:
        yield server


def build(
    name: str,
    *,
    env: dict[str, str],
    main: MainModel | None = None,
    tmp_path: Path,
    **options: Any,
) -> ContextEngine:
    config = resolve_config(cwd=tmp_path, environ=env)
    if name == "lcm":
        options.setdefault("store", ":memory:")
    engine = load_engine(
        name,
        strict=True,
        config=config,
        main_model=main,
        context_length=4_000,
        model="gpt-4o",
        **options,
    )
    engine.on_session_start("summ-test")
    return engine


def summary_env(server: ScriptedOpenAIServer) -> dict[str, str]:
    return {
        "CONTEXTENGINE_SUMMARY_MODEL": "summary-model",
        "CONTEXTENGINE_SUMMARY_BASE_URL": server.base_url,
    }


def main_of(server: ScriptedOpenAIServer) -> MainModel:
    return MainModel(model="main-model", base_url=server.base_url, api_key="main-key")


def report(engine: ContextEngine) -> Any:
    last = getattr(engine, "last_compression", None)
    assert last is not None
    return last


# ---------------------------------------------------------------- which summariser


@pytest.mark.parametrize(
    ("env", "main", "kind", "words"),
    [
        pytest.param({}, None, "offline", "no summary model is configured", id="nothing"),
        pytest.param(
            {"CONTEXTENGINE_SUMMARY_MODEL": "offline"},
            MainModel(model="big", base_url="http://127.0.0.1:8/v1"),
            "offline",
            "summary_model is 'offline'",
            id="offline-by-name-even-with-a-chat-model",
        ),
        pytest.param(
            {"OPENAI_API_KEY": "sk-other-tool"},
            None,
            "offline",
            "no summary model is configured",
            id="an-openai-key-alone-starts-nothing",
        ),
        pytest.param(
            {"CONTEXTENGINE_SUMMARY_MODEL": "cheap"},
            None,
            "offline",
            "has no endpoint",
            id="a-model-with-nowhere-to-send-it",
        ),
        pytest.param(
            {
                "CONTEXTENGINE_SUMMARY_MODEL": "cheap",
                "CONTEXTENGINE_SUMMARY_BASE_URL": "http://127.0.0.1:9/v1",
            },
            None,
            "summary_model",
            "summary model 'cheap' at http://127.0.0.1:9/v1 (summary_model from env",
            id="summary-model",
        ),
        pytest.param(
            {"CONTEXTENGINE_SUMMARY_MODEL": "cheap"},
            MainModel(model="big", base_url="http://127.0.0.1:8/v1"),
            "summary_model",
            "the main model 'big' once, then the offline fallback",
            id="summary-model-on-the-chat-endpoint",
        ),
        pytest.param(
            {},
            MainModel(model="big", base_url="http://127.0.0.1:8/v1"),
            "main_model",
            "the chat's own model 'big'",
            id="chat-model",
        ),
        pytest.param(
            {"CONTEXTENGINE_SUMMARY_BASE_URL": "http://127.0.0.1:9/v1"},
            MainModel(model="big", base_url="http://127.0.0.1:8/v1"),
            "main_model",
            "is ignored without summary_model",
            id="a-base-url-without-a-model",
        ),
    ],
)
def test_the_configuration_says_which_summariser_and_why(
    tmp_path: Path, env: dict[str, str], main: MainModel | None, kind: str, words: str
) -> None:
    setup = configured_summarizers(resolve_config(cwd=tmp_path, environ=env), main=main)
    assert setup.kind == kind
    assert words in setup.description
    assert (setup.summarizer is None) == (kind == "offline")


def test_the_summary_model_on_the_chat_endpoint_uses_the_chat_key(tmp_path: Path) -> None:
    main = MainModel(model="big", base_url="http://127.0.0.1:8/v1", api_key="chat-key")
    config = resolve_config(cwd=tmp_path, environ={"CONTEXTENGINE_SUMMARY_MODEL": "cheap"})
    summarizer = configured_summarizers(config, main=main).summarizer
    assert isinstance(summarizer, OpenAICompatibleSummarizer)
    assert (summarizer.base_url, summarizer.api_key) == ("http://127.0.0.1:8/v1", "chat-key")


def test_files_environment_and_arguments_in_that_order(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.contextengine]\nsummary_model = "from-pyproject"\n'
        'summary_base_url = "http://127.0.0.1:7/v1"\nabort_on_summary_failure = true\n'
    )
    config = resolve_config(cwd=tmp_path, environ={})
    assert config.get("summary_model") == "from-pyproject" and config.abort_on_summary_failure
    (tmp_path / "contextengine.toml").write_text('summary_model = "from-toml"\n')
    env = {"CONTEXTENGINE_ABORT_ON_SUMMARY_FAILURE": "no"}
    config = resolve_config(cwd=tmp_path, environ=env)
    assert config.get("summary_model") == "from-toml" and not config.abort_on_summary_failure
    env["CONTEXTENGINE_SUMMARY_MODEL"] = "from-env"
    assert resolve_config(cwd=tmp_path, environ=env).get("summary_model") == "from-env"
    with config_overrides(summary_model="from-option", summary_base_url=None):
        config = resolve_config(cwd=tmp_path, environ=env)
        assert (config.get("summary_model"), config.source("summary_model")) == (
            "from-option",
            "argument",
        )
        assert config.get("summary_base_url") == "http://127.0.0.1:7/v1"  # None: not given
    assert resolve_config(cwd=tmp_path, environ=env).get("summary_model") == "from-env"


def test_a_misspelt_abort_value_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    from contextengine.errors import ConfigError

    with pytest.raises(ConfigError, match="CONTEXTENGINE_ABORT_ON_SUMMARY_FAILURE"):
        resolve_config(cwd=tmp_path, environ={"CONTEXTENGINE_ABORT_ON_SUMMARY_FAILURE": "maybe"})


# ---------------------------------------------------------------- load_engine


@pytest.mark.parametrize("name", ENGINES)
def test_load_engine_summarises_with_the_configured_model(
    name: str, tmp_path: Path, summary_server: ScriptedOpenAIServer
) -> None:
    summary_server.default_reply = SUMMARY
    engine = build(name, env=summary_env(summary_server), tmp_path=tmp_path)
    engine.compress(conversation(), force=True)
    last = report(engine)
    assert summary_server.requests, "the configured model was asked"
    assert {body["model"] for body in summary_server.requests} == {"summary-model"}
    assert last.summary_model == "summary-model"
    assert last.summarizer_calls == len(summary_server.requests)
    assert not last.fallback_used and last.summary_error is None


@pytest.mark.parametrize("name", ENGINES)
def test_with_nothing_configured_the_summary_is_offline(name: str, tmp_path: Path) -> None:
    engine = build(name, env={}, tmp_path=tmp_path)
    engine.compress(conversation(), force=True)
    assert report(engine).summary_model == OFFLINE_SUMMARY_MODEL


def test_the_working_directory_configuration_reaches_load_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summary_server: ScriptedOpenAIServer
) -> None:
    summary_server.default_reply = SUMMARY
    (tmp_path / "contextengine.toml").write_text(
        f'summary_model = "summary-model"\nsummary_base_url = "{summary_server.base_url}"\n'
    )
    monkeypatch.chdir(tmp_path)
    engine = load_engine("compressor", context_length=4_000)
    engine.compress(conversation(), force=True)
    assert report(engine).summary_model == "summary-model"
    assert summary_server.requests


# ---------------------------------------------------------------- the main-model retry


@pytest.mark.parametrize("name", ENGINES)
def test_a_failed_summary_model_is_retried_once_on_the_main_model(
    name: str,
    tmp_path: Path,
    summary_server: ScriptedOpenAIServer,
    main_server: ScriptedOpenAIServer,
) -> None:
    summary_server.add_error(400, {"error": {"message": "context too long for this model"}})
    main_server.default_reply = SUMMARY
    engine = build(
        name, env=summary_env(summary_server), main=main_of(main_server), tmp_path=tmp_path
    )
    events: list[Event] = []
    host = ContextHost(engine, model="gpt-4o", context_length=4_000, observers=[events.append])
    host.compress_now(conversation())
    last = report(engine)
    assert len(summary_server.requests) == 1
    assert main_server.requests and {b["model"] for b in main_server.requests} == {"main-model"}
    assert main_server.recorded[0].headers["authorization"] == "Bearer main-key"
    assert last.summary_model == "main-model" and not last.fallback_used
    assert last.summary_failed_model == "summary-model"
    assert "context too long for this model" in (last.summary_error or "")
    (event,) = [e for e in events if isinstance(e, CompactionEvent)]
    assert event.summary_model == "main-model"
    assert event.summary_failed_model == "summary-model"
    assert "context too long" in (event.summary_error or "")


def test_while_the_summary_model_cools_down_the_main_model_is_asked_directly(
    tmp_path: Path, summary_server: ScriptedOpenAIServer, main_server: ScriptedOpenAIServer
) -> None:
    summary_server.add_malformed()
    main_server.default_reply = SUMMARY
    engine = build(
        "compressor", env=summary_env(summary_server), main=main_of(main_server), tmp_path=tmp_path
    )
    engine.compress(conversation(), force=True)
    engine.compress(conversation(12), force=True)
    assert len(summary_server.requests) == 1, "the failing model is not asked again at once"
    assert len(main_server.requests) == 2
    last = report(engine)
    assert last.summary_model == "main-model" and last.summarizer_calls == 1
    assert "cooling down" in (last.summary_error or "")
    # The engine's own policy saw a working summariser: automatic compaction is on.
    assert engine.get_status()["automatic_compaction"] == "on"


@pytest.mark.parametrize("name", ENGINES)
def test_an_auth_error_is_not_retried_on_the_main_model(
    name: str,
    tmp_path: Path,
    summary_server: ScriptedOpenAIServer,
    main_server: ScriptedOpenAIServer,
) -> None:
    summary_server.add_error(401)
    engine = build(
        name, env=summary_env(summary_server), main=main_of(main_server), tmp_path=tmp_path
    )
    before = conversation()
    engine.compress(before, force=True)
    last = report(engine)
    assert main_server.requests == []
    assert last.aborted and last.cause == "auth"
    assert last.summary_failed_model == "summary-model"


@pytest.mark.parametrize("name", ENGINES)
def test_when_both_models_fail_the_offline_summary_is_used_and_both_are_named(
    name: str,
    tmp_path: Path,
    summary_server: ScriptedOpenAIServer,
    main_server: ScriptedOpenAIServer,
) -> None:
    summary_server.add_error(400, {"error": {"message": "summary says no"}})
    main_server.add_error(404, {"error": {"message": "main says no"}})
    engine = build(
        name, env=summary_env(summary_server), main=main_of(main_server), tmp_path=tmp_path
    )
    engine.compress(conversation(), force=True)
    last = report(engine)
    assert (len(summary_server.requests), len(main_server.requests)) == (1, 1)
    assert last.fallback_used and OFFLINE_SUMMARY_MODEL in (last.summary_model or "")
    assert last.summary_failed_model == "summary-model, main-model"
    assert "summary says no" in last.summary_error and "main says no" in last.summary_error
    # One failure of the whole chain: one step of the cooldown ladder, not two.
    assert engine.failure_policy.failures == 1


def test_no_retry_when_the_main_model_is_the_summary_model(
    tmp_path: Path, summary_server: ScriptedOpenAIServer
) -> None:
    summary_server.add_error(400)
    same = MainModel(model="summary-model", base_url=summary_server.base_url + "/")
    engine = build("compressor", env=summary_env(summary_server), main=same, tmp_path=tmp_path)
    assert isinstance(engine.summary_chain, SummaryChain) and engine.summary_chain.main is None
    engine.compress(conversation(), force=True)
    assert len(summary_server.requests) == 1
    assert report(engine).summary_model == OFFLINE_SUMMARY_MODEL


def test_the_retry_keeps_to_the_wait_cap(
    tmp_path: Path, summary_server: ScriptedOpenAIServer, main_server: ScriptedOpenAIServer
) -> None:
    summary_server.add_delay(2.0)
    summary_server.default_reply = SUMMARY
    main_server.default_reply = SUMMARY
    engine = build(
        "compressor",
        env=summary_env(summary_server),
        main=main_of(main_server),
        tmp_path=tmp_path,
        max_summary_wait_s=0.5,
    )
    engine.compress(conversation(), force=True)
    last = report(engine)
    assert main_server.requests == [], "no time was left for the main model"
    assert last.fallback_used and last.summary_model == OFFLINE_SUMMARY_MODEL
    assert "no time left" in (last.summary_error or "")


# ---------------------------------------------------------------- abort_on_summary_failure


@pytest.mark.parametrize("name", ENGINES)
def test_abort_on_summary_failure_leaves_the_messages_as_they_were(
    name: str, tmp_path: Path, summary_server: ScriptedOpenAIServer
) -> None:
    summary_server.add_error(400, {"error": {"message": "no summary today"}})
    env = {**summary_env(summary_server), "CONTEXTENGINE_ABORT_ON_SUMMARY_FAILURE": "true"}
    engine = build(name, env=env, tmp_path=tmp_path)
    messages = conversation()
    events: list[Event] = []
    host = ContextHost(engine, model="gpt-4o", context_length=4_000, observers=[events.append])
    result = host.compress_now(messages)
    last = report(engine)
    if name == "compressor":
        assert result == messages
    else:
        # The lossless engine's view always fits (older items are left out of it);
        # what must not change is its context: no summary replaced anything.
        assert not last.written and engine.get_status()["context_summaries"] == 0
    assert last.aborted and not last.fallback_used
    (event,) = [e for e in events if isinstance(e, CompactionEvent)]
    assert "fallback" not in (event.message or "") and event.reason == "bad_response"
    assert last.cause == "bad_response" and "no summary today" in (last.summary_error or "")
    assert last.summary_model is None


def test_abort_on_summary_failure_as_an_engine_option(
    tmp_path: Path, summary_server: ScriptedOpenAIServer
) -> None:
    summary_server.add_malformed()
    engine = build(
        "compressor",
        env=summary_env(summary_server),
        tmp_path=tmp_path,
        abort_on_summary_failure=True,
    )
    messages = conversation()
    assert engine.compress(messages, force=True) is messages
    assert report(engine).aborted


# ---------------------------------------------------------------- commands


def test_config_says_which_summariser_is_in_effect_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextengine.cli import main

    runner = CliRunner()
    data = json.loads(runner.invoke(main, ["config", "--json"]).stdout)
    assert data["summarizer"]["value"] == "offline"
    monkeypatch.setenv("CONTEXTENGINE_SUMMARY_MODEL", "cheap")
    monkeypatch.setenv("CONTEXTENGINE_SUMMARY_BASE_URL", "http://127.0.0.1:9/v1")
    data = json.loads(runner.invoke(main, ["config", "--json"]).stdout)
    assert data["summarizer"]["value"] == "summary_model"
    assert "env CONTEXTENGINE_SUMMARY_MODEL" in data["summarizer"]["source"]


def test_chat_compacts_with_its_own_model_and_says_so(tmp_path: Path) -> None:
    from contextengine.cli.chat import chat

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if is_summary_request(body):
            return {"content": SUMMARY}
        return {"content": "Noted. " + "detail " * 120}

    script = tmp_path / "turns.txt"
    turns = [f"Step {n}: " + "context " * 300 for n in range(8)]
    script.write_text("\n".join([*turns, "/status"]) + "\n", encoding="utf-8")
    with ScriptedOpenAIServer(responder=answer) as server:
        args = ["--base-url", server.base_url, "--model", "chat-model", "--api-key", "k"]
        args += ["--engine", "compressor", "--context-length", "3000", "--script", str(script)]
        result = CliRunner().invoke(chat, args, catch_exceptions=False)
        bodies = server.requests
    assert result.exit_code == 0, result.output
    summaries = [body for body in bodies if is_summary_request(body)]
    assert summaries, result.output
    assert {body["model"] for body in summaries} == {"chat-model"}
    assert "summaries: the chat's own model 'chat-model'" in result.output


def test_replay_with_a_summary_endpoint_makes_exactly_the_calls_it_reports() -> None:
    from contextengine.cli.replay import replay

    with ScriptedOpenAIServer(default_reply=SUMMARY) as server:
        args = [REPLAY_AGENT, "--engine", "compressor", "--context-length", "2048", "--json"]
        args += ["--summary-model", "replay-summary", "--summary-base-url", server.base_url]
        result = CliRunner().invoke(replay, args)
        bodies = server.requests
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["sessions"]
    assert row["summarizer_calls"] > 0
    assert row["summarizer_calls"] == len(bodies)
    assert {body["model"] for body in bodies} == {"replay-summary"}
    assert all(is_summary_request(body) for body in bodies)


def test_demo_summarises_with_a_summary_model_only_when_given_one() -> None:
    from contextengine.cli.demo import demo

    offline = json.loads(CliRunner().invoke(demo, ["--json"]).stdout)
    with ScriptedOpenAIServer(default_reply=SUMMARY) as server:
        args = ["--json", "--summary-model", "demo-summary", "--summary-base-url", server.base_url]
        result = CliRunner().invoke(demo, args)
        bodies = server.requests
    assert result.exit_code == 0, result.output
    assert bodies and {body["model"] for body in bodies} == {"demo-summary"}
    assert json.loads(result.stdout) != offline
