"""``ArchiveSession``: the OpenAI Agents SDK's ``Session`` protocol on contextengine's archive.

``Runner.run(agent, input, session=ArchiveSession("chat-1", store=...))`` reads
the conversation from the archive before the run (``get_items``) and appends
every new item after it (``add_items``). The protocol is structural: this
module needs no import of the SDK.

How the session lives in the archive (:mod:`contextengine.store`, the same
values as lcm's ``store=``: a path, ``":memory:"``, a ``sqlite:///`` or
``postgresql://`` URL, a ``Store``, or None for the default archive file):

* One conversation per session, under the session key
  ``openai-agents:<session_id>`` (:data:`SESSION_KEY_PREFIX`), apart from
  any conversation an engine keeps.
* One archived message per item: ``{"role", "content", "openai_agents":
  {"item": <the item, verbatim>}}``; ``role`` and ``content`` (the item's
  text: a message's text, ``name(arguments)`` of a call, a call's output)
  are there so ``contextengine archive`` search and listing read it like
  any conversation. ``get_items`` returns the items exactly as added,
  ``function_call``, ``function_call_output`` and ``reasoning`` items
  included. Items are stored by position: the same item added twice is
  two items, as it is in the SDK's own sessions.
* The archive is append-only, so ``pop_item`` and ``clear_session`` delete
  nothing: each appends a marker (``{"openai_agents": {"op": "pop", "seq":
  N}}`` naming the archived item it removes, ``{"op": "clear"}``), and
  ``get_items`` replays items and markers in order. The SDK sees the
  session it expects; the archive keeps everything, and
  :meth:`ArchiveSession.archived_items` returns every item ever added.
  Deleting for real is retention's job (``contextengine archive prune``),
  which removes whole conversations.

Calls to one session are serialised; store work runs in a worker thread, so
the event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from contextengine.errors import InvalidMessagesError
from contextengine.store import Store, StoredMessage, open_store

__all__ = ["SESSION_KEY_PREFIX", "ArchiveSession"]

#: Prefix of the archive's session key for an Agents SDK session.
SESSION_KEY_PREFIX = "openai-agents:"
_KEY = "openai_agents"


def _role_of(item: Mapping[str, Any]) -> str:
    role = item.get("role")
    if isinstance(role, str):
        return role
    kind = str(item.get("type") or "")
    return "tool" if kind.endswith("_output") else "assistant"


def _text_of(item: Mapping[str, Any]) -> str:
    """The searchable text of an item."""
    kind = item.get("type")
    if kind == "function_call":
        return f"{item.get('name')}({item.get('arguments')})"
    if kind == "reasoning":
        parts = item.get("summary") or []
        return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, Mapping))
    value = item.get("content", item.get("output"))
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [
            str(p.get("text", p.get("refusal", "")))
            for p in value
            if isinstance(p, Mapping) and ("text" in p or "refusal" in p)
        ]
        if texts:
            return "\n".join(texts)
    return json.dumps(item, ensure_ascii=False, default=str)


def _replay(records: Sequence[StoredMessage]) -> list[tuple[int, dict[str, Any]]]:
    """The live items, with their archive seqs, after every pop and clear marker."""
    live: list[tuple[int, dict[str, Any]]] = []
    for record in records:
        entry = record.message.get(_KEY)
        if not isinstance(entry, Mapping):
            continue  # a row this session did not write
        if "item" in entry:
            live.append((record.seq, entry["item"]))
        elif entry.get("op") == "pop":
            live = [(seq, item) for seq, item in live if seq != entry.get("seq")]
        elif entry.get("op") == "clear":
            live = []
    return live


class ArchiveSession:
    """An Agents SDK session whose items live in the archive; see the module docstring.

    ``store`` is a path, URL or ``Store`` (a ``Store`` object is used as is and
    not closed by :meth:`close`).
    """

    session_settings: Any = None

    def __init__(
        self, session_id: str, *, store: str | os.PathLike[str] | Store | None = None
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        self.session_id = session_id
        owned = not isinstance(store, Store) or isinstance(store, str | os.PathLike)
        self._store: Store = open_store(store)
        self._owns_store = owned
        self._conversation = self._store.open_conversation(SESSION_KEY_PREFIX + session_id)
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        """The archive this session writes to."""
        return self._store

    @property
    def conversation_id(self) -> str:
        """The archive's id of this session's conversation."""
        return self._conversation

    # ------------------------------------------------------------ sync core

    def _records(self) -> list[StoredMessage]:
        return self._store.get_messages(self._conversation)

    def _append(self, records: list[dict[str, Any]]) -> None:
        # start_seq: identities by position, so a repeated item is stored again,
        # never mistaken for one already archived.
        start = self._store.message_count(self._conversation)
        self._store.append_messages(self._conversation, records, start_seq=start)

    def _get(self, limit: int | None) -> list[dict[str, Any]]:
        with self._lock:
            items = [item for _, item in _replay(self._records())]
        if limit is not None:
            items = items[-limit:] if limit > 0 else []
        return items

    def _add(self, items: Sequence[Any]) -> None:
        records: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidMessagesError(
                    f"a session item must be an object, got {type(item).__name__}", index=index
                )
            plain = json.loads(json.dumps(item))  # a JSON copy: what is archived is what is read
            records.append(
                {"role": _role_of(plain), "content": _text_of(plain), _KEY: {"item": plain}}
            )
        if records:
            with self._lock:
                self._append(records)

    def _pop(self) -> dict[str, Any] | None:
        with self._lock:
            live = _replay(self._records())
            if not live:
                return None
            seq, item = live[-1]
            marker = {"role": "session", "content": "pop_item", _KEY: {"op": "pop", "seq": seq}}
            self._append([marker])
            return item

    def _clear(self) -> None:
        with self._lock:
            marker = {"role": "session", "content": "clear_session", _KEY: {"op": "clear"}}
            self._append([marker])

    # ------------------------------------------------------------ the Session protocol

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """Called by ``Runner.run`` before a run: the session's items, oldest first.

        ``limit`` keeps the latest N (the SDK's ``SessionSettings.limit``).
        """
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return await asyncio.to_thread(self._get, limit)

    async def add_items(self, items: list[Any]) -> None:
        """Called by ``Runner.run`` with the run's new items: archived verbatim, in order."""
        await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (a marker in the archive; nothing is deleted)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Empty the session (a marker in the archive; the archived items stay)."""
        await asyncio.to_thread(self._clear)

    # ------------------------------------------------------------ beyond the protocol

    def archived_items(self) -> list[dict[str, Any]]:
        """Every item ever added to this session, popped and cleared ones included."""
        with self._lock:
            records = self._records()
        items: list[dict[str, Any]] = []
        for record in records:
            entry = record.message.get(_KEY)
            if isinstance(entry, Mapping) and "item" in entry:
                items.append(entry["item"])
        return items

    def close(self) -> None:
        """Close the archive, when this session opened it."""
        if self._owns_store:
            self._store.close()
