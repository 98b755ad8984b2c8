"""Test doubles shipped with contextengine, so users test their agents the way we test ours.

* :class:`ScriptedOpenAIServer` is a real OpenAI-compatible HTTP server on
  127.0.0.1 that answers from a script (replies, tool calls, errors, delays,
  malformed bodies, dropped connections) and records every request.
* :class:`RecordingEngine` is a context engine that records every hook call,
  to check that an agent loop drives the contract in the right order.
"""

from __future__ import annotations

from contextengine.testing.openai_server import RecordedRequest, ScriptedOpenAIServer
from contextengine.testing.recording_engine import RecordingEngine

__all__ = ["RecordedRequest", "RecordingEngine", "ScriptedOpenAIServer"]
