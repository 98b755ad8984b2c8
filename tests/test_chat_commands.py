"""The chat's slash commands, end to end: ``/compress here N``, ``--keep``, ``--preview``,
``/help`` and the commands an engine adds (lcm's ``/grep``), driven through
``contextengine chat --script`` against the real scripted OpenAI-compatible server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from contextengine import ChatCommand, ChatCommandInput
from contextengine.chat.commands import CommandUsageError, parse_compress
from contextengine.cli.chat import chat
from contextengine.testing.openai_server import ScriptedOpenAIServer
from contextengine.testing.recording_engine import RecordingEngine

Message = dict[str, Any]
#: The engines a test module factory made, newest last, so a test can read their calls.
MADE: list[RecordingEngine] = []


class _CommandEngine(RecordingEngine):
    """A recording engine that offers slash commands: good ones, a clash, a bad name, a crash."""

    def chat_commands(self) -> dict[str, Any]:
        def echo(call: ChatCommandInput) -> str:
            assert call.host is not None
            name = call.host.engine_name
            return f"echo {call.text!r} over {len(call.messages)} messages via {name}"

        def boom(call: ChatCommandInput) -> str:
            raise RuntimeError("kaput\nsecond line")

        return {
            "echo": ChatCommand(help="/echo TEXT  say it back", handler=echo),
            "boom": ChatCommand(help="/boom  always fails", handler=boom),
            "status": ChatCommand(help="/status  an impostor", handler=lambda call: "IMPOSTOR"),
            "Bad Name": ChatCommand(help="", handler=echo),
        }


def make_recording() -> RecordingEngine:
    """``--engine test_chat_commands:make_recording``: records what /compress asked for."""
    engine = _CommandEngine(name="cmds")
    MADE.append(engine)
    return engine


class _OldEngine(RecordingEngine):
    """Written before keep_last: its compress does not name it."""

    def compress(  # type: ignore[override]  # the old signature, on purpose
        self, messages: list[Message], current_tokens: int | None = None, **kwargs: Any
    ) -> list[Message]:
        return super().compress(messages, current_tokens)


def make_old() -> RecordingEngine:
    """``--engine test_chat_commands:make_old``."""
    return _OldEngine(name="old")


def run_chat(server: ScriptedOpenAIServer, tmp_path: Path, *lines: str, engine: str) -> Result:
    script = tmp_path / "turns.txt"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--base-url", server.base_url, "--model", "scripted", "--api-key", "test"]
    args += ["--script", str(script), "--engine", engine, "--context-length", "8000"]
    # The server scripts the chat's replies only: the offline summariser writes the summaries.
    args += ["--summary-model", "offline"]
    return CliRunner().invoke(chat, args, catch_exceptions=False)


def contents(request: dict[str, Any]) -> list[Any]:
    return [message.get("content") for message in request["messages"]]


def said(label: str) -> str:
    """A message long enough that summarising it saves tokens, recognisable by its label."""
    return f"{label}: " + " ".join(f"detail-{label.split()[-1]}-{n} matters" for n in range(40))


# ---------------------------------------------------------------- /compress here N, --keep N

KEEP_COMMANDS = ["/compress here 2", "/compress --keep 2", "/compress --keep=2"]


@pytest.mark.parametrize("engine", ["compressor", "lcm"])
@pytest.mark.parametrize("command", KEEP_COMMANDS)
def test_compress_keeps_the_last_n_messages_and_compacts_the_rest(
    tmp_path: Path, engine: str, command: str
) -> None:
    with ScriptedOpenAIServer() as server:
        for answer in ("answer one", "answer two", "answer three", "answer four"):
            server.add_reply(said(answer))
        result = run_chat(
            server, tmp_path, said("question one"), said("question two"), said("question three"),
            command, "question four", engine=engine,
        )  # fmt: skip
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    assert "[context] Compacted the conversation" in out
    assert "kept the last 2 messages verbatim" in out
    last = contents(bodies[3])
    # The two kept messages, then the new turn; nothing older survives as a message
    # (the compressor may merge its summary ahead of the first kept user message).
    assert last[-2:] == [said("answer three"), "question four"]
    assert str(last[-3]).endswith(said("question three"))
    assert said("question one") not in last and said("answer one") not in last
    assert len(last) <= 5  # system, at most one summary message, two kept, the new question
    assert len(last) < len(contents(bodies[2])) + 2


@pytest.mark.parametrize("engine", ["compressor", "lcm"])
def test_a_cut_inside_a_tool_call_moves_back_and_says_so(tmp_path: Path, engine: str) -> None:
    with ScriptedOpenAIServer() as server:
        server.add_reply(said("first answer"))
        server.add_reply("", tool_calls=[{"name": "bash", "arguments": {"command": "ls"}}])
        server.add_reply("the listing is empty")
        server.add_reply("ok")
        result = run_chat(
            server, tmp_path, said("hello"), said("list the files"), "/compress here 2",
            "thanks", engine=engine,
        )  # fmt: skip
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    assert "kept the last 3 messages verbatim (2 asked; the cut moved back" in out
    messages = bodies[3]["messages"]
    call, tool_result = messages[-4], messages[-3]
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "bash"
    assert tool_result["role"] == "tool"
    assert tool_result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert [m.get("content") for m in messages[-2:]] == ["the listing is empty", "thanks"]
    assert said("hello") not in [m.get("content") for m in messages]


def test_keep_and_focus_reach_the_engine_and_focus_words_stay_whole(tmp_path: Path) -> None:
    MADE.clear()
    with ScriptedOpenAIServer() as server:
        for answer in ("a1", "a2", "a3"):
            server.add_reply(answer)
        result = run_chat(
            server, tmp_path, "q1", "q2", "q3", "/compress here 2 the database schema",
            "/compress --keep 1 -- here is a focus", "/compress tea --preview",
            engine="test_chat_commands:make_recording",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    engine = MADE[-1]
    calls = [(c["keep_last"], c["focus_topic"], c["force"]) for c in engine.calls_to("compress")]
    assert calls == [(2, "the database schema", True), (1, "here is a focus", True)]
    plans = engine.calls_to("plan_compression")
    assert [(p["keep_last"], p["focus_topic"]) for p in plans] == [(None, "tea")]


# ---------------------------------------------------------------- --preview


@pytest.mark.parametrize("engine", ["compressor", "lcm"])
def test_preview_shows_the_plan_and_changes_nothing(tmp_path: Path, engine: str) -> None:
    questions = [said(f"question {n}") for n in ("one", "two", "three")]
    answers = [said(f"answer {n}") for n in ("one", "two", "three")]
    with ScriptedOpenAIServer() as server:
        for answer in (*answers, "answer four"):
            server.add_reply(answer)
        result = run_chat(
            server, tmp_path, *questions, "/compress --preview here 2", "question four",
            engine=engine,
        )  # fmt: skip
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    assert "preview, nothing changed and no summariser called" in out
    assert f"the {engine} engine would summarise 4 message(s)" in out
    assert "keep the last 2 message(s) verbatim" in out
    sizes = re.search(r"context ([\d,]+) → about ([\d,]+) tokens \(saving about ([\d,]+)\)", out)
    assert sizes is not None, out
    before, after, saving = (int(group.replace(",", "")) for group in sizes.groups())
    assert after < before and saving == before - after
    listed = out.split("would be summarised, oldest first:")[1].splitlines()[1:5]
    assert [line.strip()[:20] for line in listed] == [
        "user: question one: ",
        "assistant: answer on",
        "user: question two: ",
        "assistant: answer tw",
    ]
    assert all(line.strip().endswith("…") for line in listed)  # excerpts, bounded
    assert "[context]" not in out  # no compaction event
    assert len(bodies) == 4  # no summariser request reached the server
    assert contents(bodies[3])[1:] == [
        questions[0], answers[0], questions[1], answers[1], questions[2], answers[2],
        "question four",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        pytest.param("/compress here", "here needs a whole number", id="here-without-n"),
        pytest.param("/compress here two", "here needs a whole number", id="here-not-a-number"),
        pytest.param("/compress --keep -1", "--keep needs a whole number", id="negative"),
        pytest.param("/compress --bogus", "unknown option --bogus", id="unknown-option"),
        pytest.param("/compress here 2 --keep 3", "two different numbers", id="two-numbers"),
    ],
)
def test_a_mistyped_compress_is_one_line_and_changes_nothing(
    tmp_path: Path, command: str, needle: str
) -> None:
    with ScriptedOpenAIServer() as server:
        for answer in ("a1", "a2", "a3"):
            server.add_reply(answer)
        result = run_chat(server, tmp_path, "q1", "q2", command, "q3", engine="compressor")
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0] and "usage: /compress" in errors[0]
    assert "[context]" not in out
    assert contents(bodies[2])[1:] == ["q1", "a1", "q2", "a2", "q3"]


def test_an_engine_that_cannot_keep_a_tail_says_so_and_changes_nothing(tmp_path: Path) -> None:
    with ScriptedOpenAIServer() as server:
        for answer in ("a1", "a2", "a3"):
            server.add_reply(answer)
        result = run_chat(
            server, tmp_path, "q1", "q2", "/compress --preview here 1", "/compress here 1", "q3",
            engine="test_chat_commands:make_old",
        )  # fmt: skip
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    assert "no preview: the old engine cannot preview a compaction" in out
    assert "[context warning] The old engine cannot keep a chosen number of messages" in out
    assert contents(bodies[2])[1:] == ["q1", "a1", "q2", "a2", "q3"]


def test_parse_compress_reads_every_form() -> None:
    assert parse_compress("") == parse_compress("   ")
    assert parse_compress("here 3").keep_last == 3
    assert parse_compress("HERE 3 auth flow").focus == "auth flow"
    parsed = parse_compress("auth --preview flow --keep 0")
    assert (parsed.keep_last, parsed.preview, parsed.focus) == (0, True, "auth flow")
    assert parse_compress("the word here").focus == "the word here"  # no number: a focus word
    assert parse_compress("auth here 3").keep_last == 3
    assert parse_compress("-- here 3").focus == "here 3"
    with pytest.raises(CommandUsageError):
        parse_compress("--keep")


# ---------------------------------------------------------------- engine commands


def test_lcm_grep_searches_the_archive_for_the_person(tmp_path: Path) -> None:
    with ScriptedOpenAIServer() as server:
        for answer in ("Noted: teal.", "Sure.", "ok"):
            server.add_reply(answer)
        result = run_chat(
            server, tmp_path, "my favourite colour is teal", "tell me a joke",
            "/compress here 1", "/grep teal", "/grep zzzqqq", "/grep", "/help",
            engine="lcm",
        )  # fmt: skip
    out = result.output
    assert result.exit_code == 0, out
    hits = out.split("> /grep teal")[1].split("> /grep zzzqqq")[0]
    assert "match(es) for 'teal'" in hits and "favourite colour is «teal»" in hits
    assert "in summary sum_" in hits  # the message left the view: it is found in the archive
    assert "no match for 'zzzqqq'" in out
    assert "usage: /grep WORDS" in out
    assert "from the lcm engine:" in out and "/grep WORDS" in out


def test_engine_commands_are_listed_dispatched_and_contained(tmp_path: Path) -> None:
    with ScriptedOpenAIServer() as server:
        server.add_reply("hi")
        server.add_reply("still here")
        result = run_chat(
            server, tmp_path, "hello", "/help", "/echo some words", "/boom", "/status",
            "/nope", "are you there?", engine="test_chat_commands:make_recording",
        )  # fmt: skip
        bodies = server.requests
    out = result.output
    assert result.exit_code == 0, out
    # Checked once at start: the clash and the bad name are announced, not offered.
    assert "[chat] engine cmds's command 'status' skipped: /status is a built-in command" in out
    assert "[chat] engine cmds's command 'Bad Name' skipped" in out
    help_block = out.split("> /help")[1].split("> /echo")[0]
    assert "/compress [here N | --keep N] [--preview] [focus]" in help_block
    assert "/echo TEXT  say it back" in help_block and "impostor" not in help_block
    assert "echo 'some words' over 3 messages via cmds" in out
    assert "error: /boom failed: RuntimeError: kaput second line" in out
    assert "Traceback" not in out
    assert "IMPOSTOR" not in out and "context [" in out  # the built-in /status ran
    assert "unknown command /nope; /help lists the commands" in out
    assert len(bodies) == 2 and contents(bodies[1])[-1] == "are you there?"
