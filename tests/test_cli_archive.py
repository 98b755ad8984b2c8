"""``contextengine archive`` on a temp archive: list, grep, describe, expand, prune..."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from contextengine.cli.archive import archive
from contextengine.errors import StoreError
from contextengine.store import ContextRef, NewSummary, SQLiteStore


@pytest.fixture
def archive_path(tmp_path: Path) -> Path:
    path = tmp_path / "archive.db"
    with SQLiteStore(path) as store:
        cid = store.open_conversation("session-one")
        msgs = store.append_messages(
            cid,
            [
                {"role": "user", "content": "Where is the deploy script?"},
                {"role": "assistant", "content": "It is tools/deploy.sh, run it with --staging."},
                {"role": "user", "content": "Thanks!"},
            ],
        )
        store.commit_compaction(
            cid,
            [
                NewSummary(
                    kind="leaf",
                    depth=0,
                    content="Asked about the deploy script.",
                    token_count=5,
                    source_ids=[m.id for m in msgs[:2]],
                    seq_start=0,
                    seq_end=1,
                    time_start=0.0,
                    time_end=0.0,
                    descendant_count=2,
                )
            ],
            [ContextRef(kind="summary", id="new:0"), ContextRef(kind="message", id=msgs[2].id)],
        )
        store.put_large_content(cid, msgs[1].id, "LARGE OUTPUT", 3)
        other = store.open_conversation("session-two")
        store.append_messages(other, [{"role": "user", "content": "unrelated chat about lunch"}])
    return path


def invoke(path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(archive, ["--store", str(path), *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_list_shows_every_conversation(archive_path: Path) -> None:
    code, out = invoke(archive_path, "list")
    assert code == 0 and "session-one" in out and "session-two" in out
    code, out = invoke(archive_path, "list", "--json")
    assert {c["session_key"] for c in json.loads(out)} == {"session-one", "session-two"}


def test_grep_searches_all_conversations_or_one(archive_path: Path) -> None:
    code, out = invoke(archive_path, "grep", "deploy script")
    assert code == 0 and "«deploy»" in out
    code, out = invoke(archive_path, "grep", "lunch", "--conversation", "session-one", "--json")
    assert json.loads(out) == []
    code, out = invoke(archive_path, "grep", r"deploy\.sh", "--regex", "--json")
    assert [h["seq"] for h in json.loads(out)] == [1]


def test_grep_shows_why_a_reply_matched(archive_path: Path) -> None:
    # "Thanks!" holds no query word: it matched through the message before it.
    code, out = invoke(archive_path, "grep", "staging", "--scope", "messages")
    assert code == 0
    reply = next(line for line in out.splitlines() if "seq 2" in line)
    assert "Thanks! [matched in the message before: " in reply and "«staging»" in reply
    _, out = invoke(archive_path, "grep", "staging", "--scope", "messages", "--json")
    (reply_hit,) = [h for h in json.loads(out) if h["seq"] == 2]
    assert reply_hit["snippet"] == "Thanks!" and "«staging»" in reply_hit["context"]


def test_describe_and_expand_a_summary_and_a_message(archive_path: Path) -> None:
    _, out = invoke(archive_path, "grep", "Asked", "--scope", "summaries", "--json")
    summary_id = json.loads(out)[0]["id"]
    code, out = invoke(archive_path, "describe", summary_id)
    described = json.loads(out)
    assert code == 0 and described["kind"] == "leaf" and len(described["source_ids"]) == 2
    code, out = invoke(archive_path, "expand", summary_id)
    assert "Where is the deploy script?" in out and "tools/deploy.sh" in out
    code, out = invoke(archive_path, "expand", described["source_ids"][1])
    assert json.loads(out)["role"] == "assistant"


def test_stats_counts_rows(archive_path: Path) -> None:
    code, out = invoke(archive_path, "stats")
    stats = json.loads(out)
    assert code == 0 and stats["messages"] == 4 and stats["summaries"] == 1


def test_prune_dry_run_deletes_nothing_then_prune_does(archive_path: Path) -> None:
    code, out = invoke(archive_path, "prune", "--max-size", "0", "--dry-run")
    assert code == 0 and "2 conversation(s) would be deleted" in out
    assert json.loads(invoke(archive_path, "stats")[1])["conversations"] == 2
    code, out = invoke(archive_path, "prune", "--older-than", "30d")
    assert "deleted 0" in out
    code, out = invoke(archive_path, "prune", "--max-size", "0")
    assert "deleted 2" in out
    code, out = invoke(archive_path, "vacuum")
    assert code == 0 and "vacuumed" in out


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["prune"], id="prune-without-limits"),
        pytest.param(["prune", "--older-than", "soon"], id="bad-duration"),
        pytest.param(["describe", "msg_0000000000000000"], id="unknown-id"),
        pytest.param(["grep", "x", "--conversation", "nope"], id="unknown-conversation"),
    ],
)
def test_mistakes_are_one_line_errors(archive_path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(archive, ["--store", str(archive_path), *args])
    assert result.exit_code != 0 and "Traceback" not in result.output


def test_store_errors_propagate_for_the_main_cli_to_map(tmp_path: Path) -> None:
    result = CliRunner().invoke(archive, ["--store", "mysql://nope", "list"])
    assert isinstance(result.exception, StoreError)


def test_store_url_comes_from_the_environment(
    archive_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXTENGINE_STORE_URL", f"sqlite:///{archive_path}")
    result = CliRunner().invoke(archive, ["list"])
    assert "session-one" in result.output
