"""``contextengine eval recall``: what survives compaction, on a QA file whose answers are known.

``tests/fixtures/replay/locomo_tiny.json`` is a hand-made LoCoMo-format
conversation of 42 turns (about 1,950 tokens): Bob names his kitten Pickles
(D1:1) and flies to Lisbon in June (D1:3) at the start, 36 turns of small
talk follow, and he practises the cello in the last turns (D2:19). Four
questions have gold answers (three single-hop, one temporal); one adversarial
question has none. So:

* with a window that holds the whole conversation, every answer is in the
  context: closed-book recall 4/4 for every engine;
* with a 1,024-token window only the recent turns stay raw: only "cello" is
  still in the context (1/4); the lossless engine's ``lcm_grep`` finds the
  evidence turn of every question (recoverable 4/4), the compressor has no
  search tool (recoverable = closed-book = 1/4).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextengine.errors import FormatError
from contextengine.formats import Session, load_session
from contextengine.replay.recall import eval_transcript, load_locomo, normalize_answer

FIXTURES = Path(__file__).parent / "fixtures" / "replay"
QA = str(FIXTURES / "locomo_tiny.json")
AGENT = FIXTURES / "agent_session.json"


def _recall(*args: str) -> dict[str, Any]:
    from contextengine.cli.replay import eval_group

    result = CliRunner().invoke(eval_group, ["recall", *args, "--json"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return {r["engine"]: r for r in document["results"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("The Cello", "cello", id="article-and-case"),
        pytest.param("Psychology, counseling!", "psychology counseling", id="punctuation"),
        pytest.param("  a  b  ", "b", id="article-a"),
        pytest.param("2022", "2022", id="number"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_turns_become_messages_in_order_with_dia_id_to_seq() -> None:
    (conversation,) = load_locomo(QA)
    assert len(conversation.messages) == 42
    assert conversation.seq_of["D1:1"] == 0
    assert conversation.seq_of["D2:1"] == 22  # session 1 has 22 turns
    first = conversation.messages[0]
    assert first["role"] == "assistant"  # Bob is speaker_b
    assert first["content"].startswith("[10:00 am on 3 May, 2023] Bob: ")


def test_large_window_keeps_every_answer() -> None:
    results = _recall("--qa", QA, "--compare", "compressor,lcm", "--context-length", "100000")
    for engine in ("compressor", "lcm"):
        overall = results[engine]["overall"]
        assert overall["questions"] == 4
        assert overall["closed_book"] == 1.0
        assert overall["recoverable"] == 1.0
        assert overall["ceiling"] == 1.0
    assert results["lcm"]["has_search"] is True
    assert results["compressor"]["has_search"] is False
    assert results["compressor"]["overall"]["search"] == 0.0


def test_small_window_early_facts_leave_and_only_search_recovers_them() -> None:
    results = _recall("--qa", QA, "--compare", "compressor,lcm", "--context-length", "1024")
    lcm, compressor = results["lcm"], results["compressor"]
    assert lcm["overall"]["closed_book"] == 0.25  # only the cello is still in view
    assert compressor["overall"]["closed_book"] == 0.25
    assert lcm["overall"]["search"] == 1.0
    assert lcm["overall"]["recoverable"] == 1.0
    assert compressor["overall"]["recoverable"] == 0.25
    assert lcm["categories"]["temporal"] == {
        "questions": 1,
        "closed_book": 0.0,
        "ceiling": 1.0,
        "search": 1.0,
        "recoverable": 1.0,
    }
    # the adversarial question has no gold answer: it counts for search only
    assert lcm["categories"]["adversarial"]["closed_book"] is None
    assert lcm["categories"]["adversarial"]["search"] == 1.0
    # retained context tokens sit beside the recall figures
    assert 0 < lcm["context_tokens"] < lcm["conversation_tokens"]


def test_json_file_and_table(tmp_path: Path) -> None:
    from contextengine.cli.replay import eval_group

    out = tmp_path / "recall.json"
    result = CliRunner().invoke(
        eval_group,
        ["recall", "--qa", QA, "--engine", "lcm", "--context-length", "1024", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "single-hop" in result.output and "recall@5" in result.output
    document = json.loads(out.read_text())
    assert document["k"] == 5
    assert document["results"][0]["categories"]["single-hop"]["questions"] == 3


def test_a_corrupt_qa_file_is_a_format_error(tmp_path: Path) -> None:
    bad = tmp_path / "qa.json"
    bad.write_text('[{"conversation": {}}]')
    with pytest.raises(FormatError, match="record 0"):
        load_locomo(bad)


def test_anchors_of_what_left_the_view_on_an_agent_transcript() -> None:
    session = load_session(AGENT)
    everything = eval_transcript(session, engine="lcm", context_length=100_000)
    assert everything.tallies == {}  # nothing left the view: nothing to recall
    lcm = eval_transcript(session, engine="lcm", context_length=2048).to_json()
    compressor = eval_transcript(session, engine="compressor", context_length=2048).to_json()
    assert lcm["overall"]["questions"] > 0
    assert lcm["overall"]["search"] > 0
    assert lcm["overall"]["recoverable"] >= lcm["overall"]["closed_book"]
    assert compressor["has_search"] is False
    assert compressor["overall"]["recoverable"] == compressor["overall"]["closed_book"]
    assert set(lcm["categories"]) <= {"files", "urls", "ids", "errors", "commands", "numbers"}


def test_paths_a_summary_lists_in_a_folder_group_count_as_kept() -> None:
    messages: list[dict[str, Any]] = []
    for i in range(12):
        messages.append({"role": "user", "content": f"Next file, number {i}."})
        # Late in the message: the summary's one-line action record does not reach it.
        edited = "Nothing else here. " * 60 + f"Edited src/service/handlers/h_{i:03d}.py."
        messages.append({"role": "assistant", "content": edited})
    for i in range(6):
        messages.append({"role": "user", "content": f"Small talk {i}. " + "more words " * 40})
        messages.append({"role": "assistant", "content": "Fine. " * 60})
    session = Session(id="grouped", source="test", format="openai", messages=messages)
    result = eval_transcript(session, engine="compressor", context_length=4096)
    files = result.to_json()["categories"]["files"]
    assert files["questions"] >= 8  # the early paths left the view...
    assert files["closed_book"] == 1.0  # ...and the summary's src/service/handlers/{...} has them
