"""Built-in context engines: ``compressor`` (the default) and ``lcm`` (lossless).

Each engine is a subpackage that exports its class; both register through the
``contextengine.engines`` entry-point group in the project's own pyproject, the
same way a third-party engine would.
"""

from __future__ import annotations

__all__: list[str] = []
