"""``contextengine archive``: read commands create nothing and work on a read-only archive.

The read-only folder is a real one: ``chmod`` (root ignores file modes, so as
root the commands run in a user namespace through ``unshare --user``, where
they do not).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import contextengine
from contextengine.cli import main
from contextengine.store import ContextRef, NewSummary, SQLiteStore

SOURCE_ROOT = str(Path(contextengine.__file__).resolve().parents[1])
READ_COMMANDS = [
    pytest.param(["list"], id="list"),
    pytest.param(["grep", "deploy"], id="grep"),
    pytest.param(["describe", "msg_0000000000000000"], id="describe"),
    pytest.param(["expand", "msg_0000000000000000"], id="expand"),
    pytest.param(["stats"], id="stats"),
    pytest.param(["prune", "--older-than", "1d", "--dry-run"], id="prune-dry-run"),
]


def archive(store: str | Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["archive", "--store", str(store), *args])
    return result.exit_code, result.output


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("args", READ_COMMANDS)
def test_a_read_command_on_a_missing_archive_is_one_line_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for store in ("nosuch.db", str(tmp_path / "no" / "folder" / "x.db")):
        code, out = archive(store, *args)
        assert code == 74
        assert out == f"error: no archive at {store} (reading does not create one)\n"
    assert tree(tmp_path) == set()


def test_migrate_reads_its_source_without_creating_it(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "a.db"
    result = CliRunner().invoke(
        main, ["archive", "migrate", "--from", str(missing), "--to", "postgresql://x/y"]
    )
    assert result.exit_code == 74 and "no archive at" in result.output
    assert tree(tmp_path) == set()


@pytest.mark.parametrize(
    "args", [*READ_COMMANDS, pytest.param(["vacuum"], id="vacuum")], ids=lambda a: a[0]
)
def test_a_file_that_is_not_an_archive_is_one_line(tmp_path: Path, args: list[str]) -> None:
    notes = tmp_path / "notadb.txt"
    notes.write_text("meeting notes\n" * 100)
    code, out = archive(notes, *args)
    assert code == 74
    assert out == f"error: {notes} is not a contextengine archive (not a SQLite database)\n"
    assert tree(tmp_path) == {"notadb.txt"}


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """An archive with a summary, a large content and messages still waiting to be indexed."""
    folder = tmp_path / "archive"
    folder.mkdir()
    path = folder / "archive.db"
    with SQLiteStore(path) as store:
        cid = store.open_conversation("session-one")
        msgs = store.append_messages(
            cid,
            [
                {"role": "user", "content": "Where is the deploy script?"},
                {"role": "assistant", "content": "It is tools/deploy.sh, run it with --staging."},
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
                    source_ids=[m.id for m in msgs],
                    seq_start=0,
                    seq_end=1,
                    time_start=0.0,
                    time_end=0.0,
                    descendant_count=2,
                )
            ],
            [ContextRef(kind="summary", id="new:0")],
        )
        store.put_large_content(cid, msgs[1].id, "LARGE OUTPUT", 3)
    # A writer that died after storing a turn: its messages wait in index_pending.
    writer = SQLiteStore(path)
    writer.append_messages(cid, [{"role": "user", "content": "the penguin deploy"}], start_seq=2)
    writer._db.close()
    return path


@functools.cache
def _unprivileged_prefix() -> tuple[str, ...] | None:
    """How to run a command that file modes apply to (None: this machine cannot)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "--user", "true"], capture_output=True, check=False)
    return ("unshare", "--user") if probe.returncode == 0 else None


def unprivileged(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    prefix = _unprivileged_prefix()
    if prefix is None:
        pytest.skip("running as root without user namespaces: file modes cannot be enforced")
    return subprocess.run(
        [*prefix, sys.executable, "-m", "contextengine", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": SOURCE_ROOT},
        timeout=120,
        check=False,
    )


@pytest.fixture
def read_only(filled: Path) -> Iterator[Path]:
    """``filled``, its file and folder made read-only (restored afterwards for cleanup)."""
    folder = filled.parent
    filled.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    yield filled
    folder.chmod(stat.S_IRWXU)
    filled.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_read_commands_serve_a_read_only_archive(read_only: Path) -> None:
    folder = read_only.parent
    before = tree(folder)
    assert before == {"archive.db"}

    def run(*args: str) -> str:
        result = unprivileged("archive", "--store", str(read_only), *args, cwd=folder)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "session-one" in run("list")
    summary = run("grep", "Asked", "--scope", "summaries", "--json")
    summary_id = summary.split('"id": "')[1].split('"')[0]
    assert '"kind": "leaf"' in run("describe", summary_id)
    assert "tools/deploy.sh" in run("expand", summary_id)
    # The waiting message is found although nothing can index it.
    assert "«penguin»" in run("grep", "penguin")
    assert "«penguin»" in run("grep", "--regex", "pengu.n")
    assert '"index_pending": 1' in run("stats")
    assert tree(folder) == before  # no -wal, no -shm, nothing

    result = unprivileged("archive", "--store", str(read_only), "vacuum", cwd=folder)
    assert result.returncode == 74 and result.stdout == ""
    assert result.stderr.startswith(f"error: archive {read_only} cannot be opened for writing")
    assert len(result.stderr.splitlines()) == 1
    assert tree(folder) == before


def test_grep_sees_what_a_running_writer_has_not_indexed(filled: Path) -> None:
    with SQLiteStore(filled) as writer:
        cid = writer.open_conversation("session-one")
        writer.append_messages(cid, [{"role": "user", "content": "a walrus appears"}], start_seq=3)
        code, out = archive(filled, "grep", "walrus")
        assert code == 0 and "«walrus»" in out
        assert writer.stats()["index_pending"] > 0  # the read indexed nothing


def test_a_log_that_cannot_be_read_without_writing_is_one_line(
    filled: Path, tmp_path: Path
) -> None:
    # What a crashed writer leaves when its -shm is lost: the log's rows need a new -shm.
    stranded = tmp_path / "stranded"
    stranded.mkdir()
    with SQLiteStore(filled) as writer:
        cid = writer.open_conversation("session-one")
        writer.append_messages(cid, [{"role": "user", "content": "late"}], start_seq=3)
        for suffix in ("", "-wal"):
            shutil.copy(f"{filled}{suffix}", f"{stranded / 'archive.db'}{suffix}")
    stranded.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        result = unprivileged("archive", "--store", "archive.db", "list", cwd=stranded)
    finally:
        stranded.chmod(stat.S_IRWXU)
    assert result.returncode == 74 and result.stdout == ""
    assert result.stderr.endswith("open the archive once where its folder is writable\n")
    assert len(result.stderr.splitlines()) == 1
    assert tree(stranded) == {"archive.db", "archive.db-wal"}
