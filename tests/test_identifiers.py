"""Identifiers survive compaction: ranked last to cut, grouped by folder, never secrets.

The notation (``src/pkg/{a.py,b.py}``) must expand back to the exact values;
the deterministic summary keeps identifiers before prose; the compressor keeps
commit hashes from the middle of a long session compacted in a small window,
and appends to a model's summary the identifiers it dropped; and on the real
Claude Code sessions (when ../shared/data is present) the summary at Claude
Code's own summary size keeps at least 80% of the identifiers of every
session, and one exact lcm_grep finds every one it dropped.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from compressor_conversations import RecordingSummarizer
from contextengine.engines.compressor import ContextCompressor, is_summary_message
from contextengine.formats import load_session
from contextengine.identifiers import (
    append_missing_identifiers,
    expand_identifiers,
    is_identifier,
    listed_identifiers,
    pack_identifiers,
)
from contextengine.messages import message_text
from contextengine.replay.identifiers import identifier_survival
from contextengine.summarizers import DeterministicSummarizer, SummaryRequest
from contextengine.tokens import count_message_tokens, count_tokens

Message = dict[str, Any]

#: The issue's target: share of a session's identifiers our summary keeps at Claude Code's size.
TARGET = 0.80


def readable(text: str) -> str:
    """``text`` plus every value its folder groups stand for: what a reader can type back."""
    return "\n".join([text, *listed_identifiers(text)])


# ---------------------------------------------------------------- the notation


@pytest.mark.parametrize(
    ("values", "lines"),
    [
        pytest.param(
            ["src/package/alpha.py", "src/package/beta.py", "README.md"],
            ["src/package/{alpha.py,beta.py}", "README.md"],
            id="one-folder",
        ),
        pytest.param(
            [
                "/home/me/project/lib/a.ex",
                "/home/me/project/test/a_test.exs",
                "/home/me/project/mix.exs",
            ],
            ["/home/me/project/{lib/a.ex,test/a_test.exs,mix.exs}"],
            id="deeper-members",
        ),
        pytest.param(
            ["https://github.com/o/r/issues/12", "https://github.com/o/r/issues/7"],
            ["https://github.com/o/r/issues/{12,7}"],
            id="urls",
        ),
        pytest.param(["src/a.py", "src/b.py"], ["src/a.py", "src/b.py"], id="short-folder-stays"),
        pytest.param(
            [
                "dataset/raw/x,y.csv",
                "dataset/raw/{z}.csv",
                "dataset/raw/p.csv",
                "dataset/raw/q.csv",
            ],
            ["dataset/raw/x,y.csv", "dataset/raw/{z}.csv", "dataset/raw/{p.csv,q.csv}"],
            id="notation-characters-stay-alone",
        ),
        pytest.param(["lib/", "lib/x/", "lib/x/y.py"], ["lib/", "lib/x/", "lib/x/y.py"], id="dirs"),
    ],
)
def test_paths_sharing_a_folder_are_grouped(values: list[str], lines: list[str]) -> None:
    assert pack_identifiers(values) == lines
    assert set(expand_identifiers("\n".join(lines))) | set(lines) >= set(values)


def test_grouping_round_trips_exactly_on_many_paths() -> None:
    rng = random.Random(13)
    folders = ["src/contextengine/", "src/contextengine/engines/lossless/", "tests/", "/tmp/x/"]
    names = ["anchors.py", "engine.py", "store.py", "test_a.py", "notes.md", "run.sh"]
    values = sorted({rng.choice(folders) + rng.choice(names) for _ in range(200)})
    rng.shuffle(values)
    lines = pack_identifiers(values)
    listed = set(expand_identifiers("\n".join(lines)))
    singles = {line for line in lines if "{" not in line}
    assert listed | singles == set(values)
    assert not listed & singles
    assert len(listed) + len(singles) == len(values)  # no value written twice
    assert count_tokens("\n".join(lines)) < count_tokens("\n".join(values))


def test_identifiers_are_names_not_lines() -> None:
    assert is_identifier("errors", "KeyError")
    assert is_identifier("errors", "ENOENT")
    assert not is_identifier("errors", "KeyError: 'user_id' while loading the profile")
    assert is_identifier("ids", "3f2a9c1") and is_identifier("files", "a/b.py")
    assert not is_identifier("commands", "pytest -q") and not is_identifier("numbers", "12 ms")


# ---------------------------------------------------------------- the deterministic summary


def many_paths_session(paths: int = 60) -> list[Message]:
    messages: list[Message] = []
    for i in range(paths):
        messages.append({"role": "user", "content": f"Please review this long request {i}. " * 8})
        messages.append(
            {"role": "assistant", "content": f"Edited src/service/handlers/handler_{i:03d}.py."}
        )
    return messages


def test_prose_is_cut_before_identifiers() -> None:
    region = many_paths_session()
    paths = [f"src/service/handlers/handler_{i:03d}.py" for i in range(60)]
    full = DeterministicSummarizer().summarize(SummaryRequest(messages=region, token_budget=20_000))
    budget = count_tokens(full) // 3
    tight = DeterministicSummarizer().summarize(
        SummaryRequest(messages=region, token_budget=budget)
    )
    assert count_tokens(tight) <= budget
    assert [p for p in paths if p not in readable(tight)] == []
    assert "src/service/handlers/{" in tight  # one folder group, not 60 lines
    assert tight.count("Please review") < full.count("Please review")


def test_a_grouped_index_merges_back_on_the_next_compaction() -> None:
    first = DeterministicSummarizer().summarize(SummaryRequest(messages=many_paths_session(12)))
    assert "src/service/handlers/{" in first
    second = DeterministicSummarizer().summarize(
        SummaryRequest(
            messages=[{"role": "user", "content": "now check src/service/handlers/handler_011.py"}],
            previous_summary=first,
        )
    )
    assert second.count("## Anchors") == 1
    for i in range(12):
        assert f"src/service/handlers/handler_{i:03d}.py" in readable(second)


# ---------------------------------------------------------------- the compressor


def hashes(count: int = 6) -> list[str]:
    """Short commit hashes; each has a letter (seven digits alone read as a number, not a hash)."""
    rng = random.Random(30)
    return [rng.choice("abcdef") + f"{rng.getrandbits(24):06x}" for _ in range(count)]


def coding_session_with_commits(turns: int = 30) -> list[list[Message]]:
    """A 30-turn coding session, one list of messages per turn; commits in turns 12-17 only."""
    commits = dict(zip(range(12, 18), hashes(), strict=True))
    out: list[list[Message]] = []
    for i in range(turns):
        turn: list[Message] = [
            {"role": "user", "content": f"Step {i}: fix the failing test in tests/test_mod_{i}.py."}
        ]
        log = "".join(f"tests/test_mod_{i}.py::test_case_{j} PASSED\n" for j in range(30))
        command = (
            f"git commit -am 'Fix mod {i}'" if i in commits else f"pytest tests/test_mod_{i}.py"
        )
        output = (
            f"[main {commits[i]}] Fix mod {i}\n 1 file changed, 3 insertions(+)"
            if i in commits
            else log + "30 passed in 0.41s"
        )
        turn.append(
            {
                "role": "assistant",
                "content": "Running it now; then I will look at the module and explain.",
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                    }
                ],
            }
        )
        turn.append({"role": "tool", "tool_call_id": f"call_{i}", "content": output})
        turn.append({"role": "assistant", "content": f"Done with step {i}. " + "Details. " * 40})
        out.append(turn)
    return out


def test_commit_hashes_from_the_middle_survive_an_8000_token_window() -> None:
    engine = ContextCompressor(context_length=8_000)
    history: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    compactions = 0
    for turn in coding_session_with_commits():
        history = [*history, *turn]
        tokens = count_message_tokens(history)
        if engine.should_compress(tokens):
            history = engine.compress(history, current_tokens=tokens)
            compactions += 1
    assert compactions >= 2  # the hashes went through more than one summary
    summary = "\n".join(message_text(m) for m in history if is_summary_message(m))
    kept = "\n".join(message_text(m) for m in history if not is_summary_message(m))
    for commit in hashes():
        assert commit not in kept  # their turns left the context...
        assert commit in readable(summary)  # ...and the summary still names them


def test_a_model_summary_gets_the_identifiers_it_dropped() -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2
    region_turns = coding_session_with_commits(20)
    history: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in region_turns:
        history.extend(turn)
    history[5]["content"] = f"export GITHUB_TOKEN={secret}\nsee src/deploy/config.py"
    summarizer = RecordingSummarizer("## Goal\nFix the tests.\n## Relevant files\nNone.")
    engine = ContextCompressor(context_length=8_000, summarizer=summarizer)
    out = engine.compress(history, force=True)
    assert engine.last_compression is not None and engine.last_compression.summary_model
    (summary_message,) = [m for m in out if is_summary_message(m)]
    text = message_text(summary_message)
    assert "## Identifiers" in text
    assert text.index("## Identifiers") < text.index("[END OF CONTEXT SUMMARY]")
    assert "src/deploy/config.py" in readable(text)
    for commit in hashes():
        assert commit in readable(text)
    assert secret not in text and "A1b2C3d4" not in text
    assert count_tokens(text) <= engine.summary_token_budget + 200  # markers and the model's text


def test_appended_identifiers_respect_their_budget() -> None:
    anchors = [f"files:src/gen/module_{i}.py" for i in range(300)] + ["ids:9fceb02"]
    out = append_missing_identifiers("## Goal\nShip.", anchors, budget_tokens=60)
    added = out.split("## Identifiers", 1)[1]
    assert count_tokens("## Identifiers" + added) <= 60
    assert "9fceb02" in added  # a hash ranks before paths
    assert append_missing_identifiers(
        "## Goal\nShip 9fceb02.", ["ids:9fceb02"], budget_tokens=60
    ) == ("## Goal\nShip 9fceb02.")


def test_identifiers_come_from_redacted_text() -> None:
    secret = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2" * 2
    region: list[Message] = [
        {"role": "user", "content": "Deploy with the key below and fix src/deploy/run.py"},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": f"OPENAI_API_KEY={secret}\nurl https://api.example.com/v1?token={secret}",
        },
    ]
    engine = ContextCompressor(context_length=8_000)
    history = [
        {"role": "system", "content": "agent"},
        *region * 15,
        {"role": "user", "content": "go"},
    ]
    history = [
        m if m["role"] != "tool" else {"role": "user", "content": m["content"]} for m in history
    ]
    out = engine.compress(history, force=True)
    text = "\n".join(message_text(m) for m in out if is_summary_message(m))
    assert "src/deploy/run.py" in readable(text)
    assert secret not in text and "Zx9Yw8Vu" not in text


# ---------------------------------------------------------------- the real sessions


def spotter_sessions(shared_data: Path) -> list[Path]:
    folder = shared_data / "spotter" / "transcripts"
    files = sorted(p for p in folder.glob("*.jsonl") if len(p.stem) == 36)
    if not files:
        pytest.skip(f"real-data test: no Claude Code sessions in {folder}")
    return files


def test_each_claude_code_session_keeps_its_identifiers_at_claude_codes_summary_size(
    shared_data: Path,
) -> None:
    shares: dict[str, float] = {}
    for path in spotter_sessions(shared_data):
        result = identifier_survival(load_session(path, "claude-code"), search="lost")
        assert result is not None, f"{path.name}: no recorded compaction"
        assert result.ours_tokens <= result.budget
        shares[path.stem[:8]] = result.ours / result.identifiers
        assert result.ours > result.recorded  # more than Claude Code's own summary
        assert result.recoverable == result.identifiers, f"{path.stem[:8]}: not all recoverable"
    assert min(shares.values()) >= TARGET, shares
