"""The one error an adapter raises when its framework is not installed."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(extra: str, what: str, exc: ImportError) -> ImportError:
    """The error for an adapter imported without its extra: names the extra and the fix.

    An ``ImportError``, as ``contextengine.PostgresStore`` raises without the
    ``postgres`` extra: it is one, and ``except ImportError`` is what callers
    of an optional feature write. Raised from the adapter module's own import
    (``from exc``), so the original error stays in the traceback.
    """
    return ImportError(
        f"{what} needs the {extra!r} extra: pip install 'contextengine[{extra}]'"
        f" (import failed: {exc})"
    )
