"""The reference agent behind ``contextengine chat``: an agent loop built only on the public API.

* :mod:`contextengine.chat.agent` — the OpenAI-compatible streaming client and
  the turn loop driving a :class:`~contextengine.ContextHost`;
* :mod:`contextengine.chat.session_store` — chat sessions persisted in SQLite
  under the user data directory.
"""

from __future__ import annotations

from contextengine.chat.agent import ChatAgent, ChatClient, Completion
from contextengine.chat.session_store import SessionInfo, SessionStore, data_dir

__all__ = ["ChatAgent", "ChatClient", "Completion", "SessionInfo", "SessionStore", "data_dir"]
