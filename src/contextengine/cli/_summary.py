"""``--summary-model`` and ``--summary-base-url``, on every command that compacts.

:func:`summary_options` adds both options to a command and runs it inside
:func:`~contextengine.config.config_overrides`, so every configuration
resolved while it runs (and so every engine :func:`~contextengine.load_engine`
builds, however deep in a replay) sees them as arguments: above the
environment and the configuration files, as the configuration's precedence
says. Left out, they change nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from contextengine.config import config_overrides

__all__ = ["summary_options"]

F = TypeVar("F", bound=Callable[..., Any])


def summary_options(command: F) -> F:
    """Decorate a click command function with ``--summary-model`` and ``--summary-base-url``."""

    @functools.wraps(command)
    def run(
        *args: Any, summary_model: str | None, summary_base_url: str | None, **kwargs: Any
    ) -> Any:
        with config_overrides(summary_model=summary_model, summary_base_url=summary_base_url):
            return command(*args, **kwargs)

    run = click.option(
        "--summary-base-url",
        default=None,
        help="OpenAI-compatible endpoint of the summary model "
        "(default: configured, CONTEXTENGINE_SUMMARY_BASE_URL).",
    )(run)
    run = click.option(
        "--summary-model",
        default=None,
        help="Model that writes the summaries (default: configured, "
        "CONTEXTENGINE_SUMMARY_MODEL; none: the offline summariser, or in chat the "
        "chat's own model; 'offline': always the offline summariser).",
    )(run)
    return run  # type: ignore[return-value]  # click's decorators keep the call signature
