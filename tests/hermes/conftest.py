"""Tests that run inside a real ``hermes-agent`` installation.

They skip, with the reason, where Hermes cannot be imported (our main test
environment never installs it: its pinned dependencies must not leak there).
``.ci/run`` builds a separate environment with ``hermes-agent`` from the
package index and runs this directory there with
``CONTEXTENGINE_REQUIRE_HERMES=1``, which turns that skip into a failure.
"""

from __future__ import annotations

import os
import tempfile

import pytest

# Hermes writes its home (~/.hermes) when imported: never the user's in a test
# run. The tests that need a configured home set their own.
os.environ.setdefault("HERMES_HOME", tempfile.mkdtemp(prefix="contextengine-hermes-home-"))


def _hermes_problem() -> str | None:
    try:
        import agent.context_engine  # noqa: F401
        import run_agent  # noqa: F401
    except Exception as exc:  # any failure to import Hermes means "not installed here"
        return f"hermes-agent is not importable: {type(exc).__name__}: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    mine = [item for item in items if str(item.path).startswith(here)]
    if not mine:
        return
    problem = _hermes_problem()
    if problem is None:
        return
    if os.environ.get("CONTEXTENGINE_REQUIRE_HERMES") == "1":
        raise pytest.UsageError(f"CONTEXTENGINE_REQUIRE_HERMES=1 but {problem}")
    for item in mine:
        item.add_marker(pytest.mark.skip(reason=problem))
