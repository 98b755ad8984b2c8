"""Fixtures shared by every test module.

``shared_data`` is the real, licensed data in ``../shared/data`` (outside the
project, never copied into it): tests that use it skip with a reason when the
folder is absent, as it is on a plain clone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI replays the same examples every run, so a red build always means a change
# broke something; locally each run explores new examples.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

SHARED_DATA = Path(
    os.environ.get(
        "CONTEXTENGINE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"
    )
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The ../shared/data folder, or a skip when it is not there."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data test: {SHARED_DATA} is absent (set CONTEXTENGINE_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_user_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep every test's archives and sessions out of the real user data directory."""
    home = tmp_path_factory.mktemp("contextengine-home")
    monkeypatch.setenv("CONTEXTENGINE_HOME", str(home))
    for variable in (
        "CONTEXTENGINE_ENGINE",
        "CONTEXTENGINE_CONTEXT_LENGTH",
        "CONTEXTENGINE_STORE_URL",
        # A summary model configured on the developer's machine must not turn
        # the offline summaries the tests expect into paid network calls.
        "CONTEXTENGINE_SUMMARY_MODEL",
        "CONTEXTENGINE_SUMMARY_BASE_URL",
        "CONTEXTENGINE_SUMMARY_API_KEY",
        "CONTEXTENGINE_ABORT_ON_SUMMARY_FAILURE",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(variable, raising=False)
