"""The lossless engine "lcm": every message stored, the context a budgeted view, search tools.

Modules: :mod:`.engine` (``LosslessEngine``, the hooks), :mod:`.assemble` (the
view), :mod:`.compaction` (the summary DAG and the escalation ladder),
:mod:`.large_content` (huge tool results out of the view), :mod:`.tools`
(``lcm_grep`` / ``lcm_describe`` / ``lcm_expand``).
"""

from __future__ import annotations

from contextengine.engines.lossless.engine import LosslessEngine

__all__ = ["LosslessEngine"]
