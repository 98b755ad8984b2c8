"""Opt-in redaction at rest: a store shared by many hosts never holds the secrets it was given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextengine.engines.lossless import LosslessEngine
from contextengine.store import Store, StoredMessage
from store_factories import STORE_FACTORIES, FakeClock, StoreFactory

SECRET = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are careful."},
    {"role": "user", "content": f"Use OPENAI_API_KEY={SECRET} for the tests."},
    {"role": "assistant", "content": "Understood; I will use it."},
]


@pytest.fixture(params=STORE_FACTORIES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    factory: StoreFactory = request.param
    opened = factory(tmp_path, FakeClock())
    opened.redact_at_rest = True  # type: ignore[attr-defined]  # the constructors' option
    yield opened
    opened.close()


def test_the_archive_never_holds_the_secret(store: Store) -> None:
    cid = store.open_conversation("s")
    (stored, *_rest) = store.append_messages(cid, HISTORY[1:], start_seq=1)
    assert SECRET not in str(stored.message) and "[REDACTED]" in str(stored.message)
    assert SECRET not in str(store.get_messages(cid))
    assert store.search(cid, SECRET).results == []
    assert store.search(cid, "OPENAI_API_KEY").results  # the words around it are kept
    large = store.put_large_content(cid, stored.id, f"token={SECRET}\n" * 3, 30)
    assert SECRET not in large.content
    # The same message again stores nothing: identities come from the redacted form.
    assert store.append_messages(cid, HISTORY[1:], start_seq=1) == []
    assert store.import_messages(cid, HISTORY[1:], start_seq=1) == 0


def test_copied_records_are_redacted_with_their_ids_kept(store: Store) -> None:
    cid = store.open_conversation("copy")
    record = StoredMessage(
        id="msg_0123456789abcdef",
        conversation_id=cid,
        seq=0,
        role="user",
        message=HISTORY[1],
        token_count=20,
        identity_key="h:0:abc",
        created_at=1.0,
    )
    assert store.copy_messages(cid, [record]) == 1
    (copied,) = store.get_messages(cid)
    assert copied.id == record.id and SECRET not in str(copied.message)


def test_an_engine_on_a_redacting_store_resumes_without_storing_twice(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    first = LosslessEngine(context_length=8_000, store=path, redact_at_rest=True)
    first.on_session_start("s")
    first.on_turn_complete(HISTORY)
    first.close()
    again = LosslessEngine(context_length=8_000, store=path, redact_at_rest=True)
    again.on_session_start("s")
    again.on_turn_complete([*HISTORY, {"role": "user", "content": "next"}])
    assert again.conversation_id is not None
    assert again.store.message_count(again.conversation_id) == len(HISTORY) + 1
    view = again.current_view()
    assert SECRET not in str(view)  # the cost, documented: the view shows [REDACTED] too
    again.close()
