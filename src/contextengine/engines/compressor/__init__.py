"""The default context engine, ``"compressor"``: prune old tool traffic, then summarise.

:class:`ContextCompressor` lives in :mod:`.engine`; the pieces it is built from
are one module each — :mod:`.boundaries` (where the cuts go), :mod:`.prune`
(pass 1, no model), :mod:`.request` (what is sent to the summariser) and
:mod:`.summary` (the framed summary message and :func:`is_summary_message`).
"""

from __future__ import annotations

from contextengine.engines.compressor.engine import CompressionReport, ContextCompressor
from contextengine.engines.compressor.summary import is_summary_message

__all__ = ["CompressionReport", "ContextCompressor", "is_summary_message"]
