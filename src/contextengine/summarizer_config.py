"""The summariser an engine gets from the resolved configuration, and why.

:func:`configured_summarizers` turns the summary settings of a
:class:`~contextengine.config.ResolvedConfig` (``summary_model``,
``summary_base_url``, ``summary_api_key``, ``abort_on_summary_failure``) and,
when there is one, the main model's endpoint (:class:`MainModel`: the chat's
model, URL and key) into a :class:`SummarizerSetup`: the summariser, the
main-model summariser tried once when it fails, and one sentence saying which
is in effect and why. :func:`contextengine.load_engine` applies it to every
engine that takes a ``summarizer``; ``contextengine config`` prints the
sentence; ``contextengine chat`` passes its own endpoint as the main model.

The rules, in order:

0. ``summary_model = "offline"``: the offline summariser, even in ``chat``
   (for text that must not reach any model, or a test that scripts only
   the chat's replies).
1. ``summary_model`` set: that model summarises, at ``summary_base_url``,
   else the main model's endpoint, else the OpenAI API when an API key is
   configured. The key is ``summary_api_key`` (which falls back to
   ``OPENAI_API_KEY``), else the main model's key when the endpoint is the
   main model's. With a main model, it is retried once on the main model
   (one request: the summary model already had its own retries) before the
   offline fallback. With neither a base URL, a key nor a main model there
   is nowhere to send it: offline, and the sentence says so.
2. No ``summary_model`` and a main model: the main model summarises at its
   own endpoint with its own key, as Hermes does.
3. Otherwise the offline :class:`~contextengine.DeterministicSummarizer`: no
   network, no cost, and what ``contextengine demo`` shows out of the box.

A summary model never starts from ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``
alone: without ``summary_model`` (or a main model) nothing is sent anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from contextengine.config import ResolvedConfig
from contextengine.openai_summarizer import DEFAULT_OPENAI_BASE_URL, OpenAICompatibleSummarizer
from contextengine.summary_request import Summarizer

__all__ = ["MainModel", "SummarizerSetup", "configured_summarizers"]

SummarizerKind = Literal["offline", "summary_model", "main_model"]
#: The ``summary_model`` that asks for the offline summariser by name.
OFFLINE = "offline"


@dataclass(frozen=True, kw_only=True)
class MainModel:
    """The main (chat) model's endpoint: who summarises when no summary model is set."""

    model: str
    base_url: str
    api_key: str | None = None


@dataclass(frozen=True, kw_only=True)
class SummarizerSetup:
    """The summarisers the configuration asks for, and the sentence that says why."""

    #: The summariser, or None for the engine's offline default.
    summarizer: Summarizer | None
    #: The main model's summariser, asked once when ``summarizer`` fails; or None.
    main_summarizer: Summarizer | None
    abort_on_summary_failure: bool
    #: ``"offline"``, ``"summary_model"`` or ``"main_model"``.
    kind: SummarizerKind
    #: Which summariser is in effect and why, in one sentence (no secrets).
    description: str

    def engine_options(self) -> dict[str, Any]:
        """The constructor options that carry this setup into an engine (only what is set)."""
        options: dict[str, Any] = {}
        if self.summarizer is not None:
            options["summarizer"] = self.summarizer
        if self.main_summarizer is not None:
            options["main_summarizer"] = self.main_summarizer
        if self.abort_on_summary_failure:
            options["abort_on_summary_failure"] = True
        return options


def configured_summarizers(
    config: ResolvedConfig, *, main: MainModel | None = None
) -> SummarizerSetup:
    """The summariser ``config`` asks for (see the module docstring), with ``main`` as the
    main model's endpoint when the caller has one (the chat does; a replay does not)."""
    abort = config.abort_on_summary_failure
    model = str(config.get("summary_model") or "").strip()
    base_url = str(config.get("summary_base_url") or "").strip()
    api_key = str(config.get("summary_api_key") or "").strip() or None
    if model.lower() == OFFLINE:
        return SummarizerSetup(
            summarizer=None,
            main_summarizer=None,
            abort_on_summary_failure=abort,
            kind="offline",
            description=(
                "offline deterministic summariser: summary_model is 'offline' (from "
                f"{config.source('summary_model')})"
            ),
        )
    if model:
        where = f"summary_model from {config.source('summary_model')}"
        if not base_url and main is not None:
            base_url = main.base_url
        if not base_url and api_key is not None:
            base_url = DEFAULT_OPENAI_BASE_URL
        if not base_url:
            return SummarizerSetup(
                summarizer=None,
                main_summarizer=None,
                abort_on_summary_failure=abort,
                kind="offline",
                description=(
                    f"offline deterministic summariser: summary model {model!r} ({where}) has "
                    "no endpoint; set summary_base_url (CONTEXTENGINE_SUMMARY_BASE_URL) or an "
                    "API key"
                ),
            )
        if api_key is None and main is not None and _same_url(base_url, main.base_url):
            api_key = main.api_key or None
        summarizer = OpenAICompatibleSummarizer(base_url=base_url, api_key=api_key, model=model)
        retry = None
        then = "the offline fallback"
        if main is not None and not (_same_url(base_url, main.base_url) and model == main.model):
            # One request: the summary model already had its retries, and the
            # compaction's wait cap is shared by both.
            retry = OpenAICompatibleSummarizer(
                base_url=main.base_url,
                api_key=main.api_key or None,
                model=main.model,
                max_retries=0,
            )
            then = f"the main model {main.model!r} once, then the offline fallback"
        return SummarizerSetup(
            summarizer=summarizer,
            main_summarizer=retry,
            abort_on_summary_failure=abort,
            kind="summary_model",
            description=(
                f"summary model {model!r} at {summarizer.base_url} ({where}); on failure: "
                + ("abort the compaction" if abort else then)
            ),
        )
    unused = (
        f" (summary_base_url from {config.source('summary_base_url')} is ignored without "
        "summary_model)"
        if base_url
        else ""
    )
    if main is not None:
        summarizer = OpenAICompatibleSummarizer(
            base_url=main.base_url, api_key=main.api_key or None, model=main.model
        )
        return SummarizerSetup(
            summarizer=summarizer,
            main_summarizer=None,
            abort_on_summary_failure=abort,
            kind="main_model",
            description=(
                f"the chat's own model {main.model!r} at {summarizer.base_url}: no separate "
                f"summary model is configured (summary_model){unused}; on failure: "
                + ("abort the compaction" if abort else "the offline fallback")
            ),
        )
    return SummarizerSetup(
        summarizer=None,
        main_summarizer=None,
        abort_on_summary_failure=abort,
        kind="offline",
        description=(
            "offline deterministic summariser: no summary model is configured (set "
            f"summary_model, CONTEXTENGINE_SUMMARY_MODEL, and its endpoint){unused}"
        ),
    )


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")
