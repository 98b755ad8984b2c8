"""The recoverable side of the compressor: its archive, the tools over it, and failing safely.

:class:`RecoverableEngine` is the base of
:class:`~contextengine.engines.compressor.engine.ContextCompressor`: it holds
the optional :class:`~contextengine.engines.compressor.archive.CompressorArchive`,
answers the hooks that only matter with one (``on_session_start``,
``on_session_end``, the tools, ``recovery_hint``, ``close``), and gives the
compaction code the few calls it makes into the archive. Every archive call
goes through here, so a failing archive is dropped in one place, with a
warning, and the compressor goes on as if it had none.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from abc import ABC
from collections.abc import Callable
from typing import Any, Protocol

from contextengine.engine import ContextEngine
from contextengine.engines.compressor.archive import (
    ArchiveError,
    CompressorArchive,
    PlannedSummary,
    default_archive_path,
)
from contextengine.engines.compressor.prune import PruneResult
from contextengine.store.protocol import Store

__all__ = ["RecoverableEngine", "with_archive_line"]

Message = dict[str, Any]
logger = logging.getLogger("contextengine.compressor")


class _Report(Protocol):
    """What of a compaction report the archive code reads and fills."""

    fallback_used: bool
    summary_id: str | None
    warning: str | None


class RecoverableEngine(ContextEngine, ABC):
    """A context engine with an optional archive of what it removes (the compressor's base)."""

    _archive: CompressorArchive | None = None
    # A failure not yet reported in a compaction report (the next one carries it).
    _archive_warning: str | None = None

    def _init_archive(
        self, spec: Store | str | os.PathLike[str] | bool | None, redact_at_rest: bool
    ) -> None:
        """Set the archive up from the ``archive=`` / ``redact_at_rest=`` arguments."""
        self._archive_warning = None
        self._archive = None
        self._archive = self._open_archive(spec, redact_at_rest)

    def _open_archive(
        self, spec: Store | str | os.PathLike[str] | bool | None, redact_at_rest: bool
    ) -> CompressorArchive | None:
        if spec is None or spec is False:
            return None
        if spec is True:
            path = default_archive_path()
            if path is None:
                return None  # no writable data directory: no archive, as documented
            spec = path
        try:
            return CompressorArchive(
                spec, redact_at_rest=redact_at_rest, model=lambda: self.model or None
            )
        except ArchiveError as exc:
            self._archive_failed(exc)
            return None

    def _archive_failed(self, exc: Exception) -> None:
        """Go on without the archive; the next compaction report carries the warning."""
        warning = f"the compressor's archive failed, going on without it: {exc}"[:400]
        logger.warning("%s", warning)
        self._archive_warning = warning
        archive, self._archive = self._archive, None
        if archive is not None:
            # Closing a broken store must not break the turn either.
            with contextlib.suppress(Exception):
                archive.close()

    @property
    def archive(self) -> CompressorArchive | None:
        """The archive in use, or None (none configured, or it failed)."""
        return self._archive

    # ------------------------------------------------------------------ the archive

    def on_session_start(self, session_id: str, **kwargs: Any) -> None:
        """Open (lazily) the archive conversation stored under ``session_id``.

        With ``boundary_reason="compression"`` (the host renamed the same
        conversation after a compaction) the archive conversation goes on and
        the new id becomes another key of it, as for lcm. Without an archive:
        nothing.
        """
        if self._archive is None:
            return
        if kwargs.get("boundary_reason") == "compression":
            self._archive_call(lambda archive: archive.alias(session_id))
        else:
            self._archive.start(session_id)

    def on_session_end(self, session_id: str, messages: list[Message]) -> None:
        """Archive what the session still holds, so a later search finds its end too.

        Only when the archive is in use already (something was compacted or
        searched): a session that never compacted writes no archive.
        """
        # Only a session that used its archive (compacted, searched) writes to it
        # at the end: one that never compacted creates no file.
        if self._archive is not None and self._archive.opened and messages:

            def store_rest(archive: CompressorArchive) -> None:
                archive.archive(messages)
                archive.sync()

            self._archive_call(store_rest)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """``lcm_grep``, ``lcm_describe``, ``lcm_expand`` over the archive; [] without one."""
        return CompressorArchive.tool_schemas() if self._archive is not None else []

    def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
        """Run an archive tool (the lossless engine's implementation); always a JSON string.

        Without an archive (none configured, or it failed) every name is an
        unknown tool, as before.
        """
        if self._archive is None:
            return super().handle_tool_call(name, args, **kwargs)
        try:
            return self._archive.call_tool(name, args)
        except ArchiveError as exc:
            self._archive_failed(exc)
            return json.dumps({"error": f"{name} failed: the archive is unavailable ({exc})"})

    def recovery_hint(self, message: Message) -> str | None:
        """``lcm_expand`` with the archived id of a message the host had to shorten."""
        if self._archive is None:
            return None
        item_id = self._archive.id_of(message)
        return f'lcm_expand {{"id": "{item_id}"}}' if item_id else None

    def close(self) -> None:
        """Close the archive when this engine opened it."""
        if self._archive is not None:
            self._archive.close()

    def _archive_call(self, action: Callable[[CompressorArchive], Any]) -> bool:
        """Run ``action`` on the archive; on failure drop the archive (warned). True when it ran."""
        if self._archive is None:
            return False
        try:
            action(self._archive)
        except ArchiveError as exc:
            self._archive_failed(exc)
            return False
        return True

    def _archive_ids(
        self, messages: list[Message], report: _Report | None
    ) -> list[str | None] | None:
        """Archive ``messages``; their ids, or None without a (working) archive."""
        archive = self._archive
        if archive is None:
            return None
        try:
            return archive.archive(messages)
        except ArchiveError as exc:
            self._archive_failed(exc)
            if report is not None:
                report.warning, self._archive_warning = self._archive_warning, None
            return None

    def _archive_pruned(
        self, pruned: PruneResult, ids: list[str | None] | None, start: int
    ) -> None:
        """Record what pass 1 took out: it left the context, and its rewrites stand for it."""
        if not ids or self._archive is None:
            return
        for index in pruned.changed:
            item_id = ids[start + index]
            if item_id is not None:
                self._archive.alias_rewrite(pruned.messages[index], item_id)
                self._archive.left.add(item_id)

    def _plan_summary(
        self, middle: list[Message], body: str, report: _Report
    ) -> PlannedSummary | None:
        archive = self._archive
        if archive is None:
            return None
        try:
            sources = [i for i in archive.archive(middle) if i is not None]
            if not sources:
                return None
            return archive.plan_summary(body, sources, fallback=report.fallback_used)
        except ArchiveError as exc:
            self._archive_failed(exc)
            report.warning, self._archive_warning = self._archive_warning, None
            return None

    def _record_summary(self, planned: PlannedSummary, report: _Report) -> bool:
        archive = self._archive
        if archive is None:
            return False
        try:
            record = archive.record_summary(planned)
            archive.sync()
        except ArchiveError as exc:
            self._archive_failed(exc)
            report.warning, self._archive_warning = self._archive_warning, None
            return False
        if record.id != planned.id:
            # A third-party store named it otherwise: the text must name the real id.
            return False
        report.summary_id = record.id
        return True


def with_archive_line(body: str, planned: PlannedSummary | None) -> str:
    """The summary body followed by its archive line (which ids reopen what)."""
    return f"{body}\n\n{planned.line}" if planned is not None else body
