"""The one exception hierarchy of contextengine.

Every error the library raises on purpose derives from :class:`ContextEngineError`,
so callers can catch everything of ours with one ``except`` clause while still
telling configuration mistakes, invalid input and failing dependencies apart::

    ContextEngineError
    ├── ConfigError                 a configuration file, variable or argument is wrong
    ├── InvalidMessagesError        bad input: a message list that is not valid OpenAI format
    ├── ContextOverflowError        system prompt, tools and latest user message exceed the window
    ├── VocabularyError             a shipped token vocabulary is missing or fails its hash check
    ├── SummarizerError             a summariser (model or HTTP endpoint) failed
    │   ├── SummarizerAuthError     401/402/403, missing key, exhausted quota: do not retry
    │   └── SummarizerTransientError timeout, 429, 5xx, malformed answer: retry later or fall back
    ├── StoreError                  the archive (SQLite or PostgreSQL) failed or was misused
    │   └── StoreConflictError      another writer changed the active context first: reload, retry
    ├── FormatError                 a session file is corrupt or of an unknown format
    ├── EngineNotFoundError         no engine is registered under the requested name
    ├── EngineLoadError             an engine plugin failed to import or construct
    └── HermesUnavailableError      the Hermes adapters need hermes-agent, which is not installed

The CLI maps each class to an exit code and a one-line message; see
``contextengine.cli``.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ContextEngineError",
    "ContextOverflowError",
    "EngineLoadError",
    "EngineNotFoundError",
    "FormatError",
    "HermesUnavailableError",
    "InvalidMessagesError",
    "StoreConflictError",
    "StoreError",
    "SummarizerAuthError",
    "SummarizerError",
    "SummarizerTransientError",
    "VocabularyError",
]


class ContextEngineError(Exception):
    """Base class of every error contextengine raises on purpose."""


class ConfigError(ContextEngineError, ValueError):
    """A configuration value is wrong; the message names the file, variable or argument."""


class InvalidMessagesError(ContextEngineError, ValueError):
    """A message list is not valid OpenAI chat-completions format.

    ``index`` is the position of the offending message (None when the list
    itself is wrong) and ``problem`` says what is wrong with it.
    """

    def __init__(self, problem: str, *, index: int | None = None) -> None:
        self.index = index
        self.problem = problem
        where = "messages" if index is None else f"messages[{index}]"
        super().__init__(f"{where}: {problem}")


class ContextOverflowError(ContextEngineError, ValueError):
    """Nothing can be sent: what must be sent whole does not fit the context window.

    Raised by the host before a request, only when the system prompt, the tool
    schemas and the latest user message alone exceed the window (everything
    else it can shorten or leave out, see :mod:`contextengine.window`).
    ``required`` is what those take, ``budget`` the window, both in tokens.
    """

    def __init__(self, message: str, *, required: int = 0, budget: int = 0) -> None:
        super().__init__(message)
        self.required = required
        self.budget = budget


class VocabularyError(ContextEngineError):
    """A shipped vocabulary file is missing, corrupt or does not match its hash.

    The installed package is damaged; reinstall contextengine. We refuse to
    count with a vocabulary we cannot vouch for rather than return wrong numbers.
    """


class SummarizerError(ContextEngineError):
    """A summariser failed to produce a summary.

    ``cause`` says why in one machine-readable word, the vocabulary of
    :data:`contextengine.failure_policy.FailureCause` (``"auth"``,
    ``"rate_limited"``, ``"timeout"``, ``"server_error"``, ``"bad_response"``);
    the message keeps the provider's own words. ``retry_after`` is how long
    the provider asked us to wait, in seconds, when it said so.
    """

    default_cause = "server_error"

    def __init__(
        self, message: str = "", *, cause: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.cause = cause or self.default_cause
        self.retry_after = retry_after


class SummarizerAuthError(SummarizerError):
    """The summariser refused us for good: bad or missing key, no quota.

    Engines abort the compaction and keep the messages unchanged: retrying or
    falling back would hide a configuration problem the user must fix.
    """

    default_cause = "auth"


class SummarizerTransientError(SummarizerError):
    """The summariser failed in a way that may pass: timeout, 429, 5xx, bad answer."""


class StoreError(ContextEngineError):
    """The message archive failed, or was asked for something it does not hold."""


class StoreConflictError(StoreError):
    """The active context is not what the writer expected: another writer changed it first.

    Raised by :meth:`~contextengine.store.Store.commit_compaction` when the run
    of items a :class:`~contextengine.store.ContextSplice` replaces is no longer
    there as described. Nothing was written; the engine reloads the active
    context from the store and plans again.
    """


class FormatError(ContextEngineError, ValueError):
    """A session file could not be read as the format it claims or was detected as.

    ``path`` is the file, ``location`` the line or record ("line 7",
    "record 3", "" when the whole file is wrong) and ``expected`` what the
    importer expected to find there.
    """

    def __init__(self, path: str, location: str, expected: str, *, found: str = "") -> None:
        self.path = path
        self.location = location
        self.expected = expected
        self.found = found
        where = f"{path} {location}".strip()
        detail = f"expected {expected}" + (f", found {found}" if found else "")
        super().__init__(f"{where}: {detail}")


class EngineNotFoundError(ContextEngineError, LookupError):
    """No engine is registered under the requested name.

    ``available`` lists the names that are registered.
    """

    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        names = ", ".join(available) or "none"
        super().__init__(f"no context engine named {name!r}; available: {names}")


class EngineLoadError(ContextEngineError):
    """An engine plugin failed to import or construct, or is not a ContextEngine.

    ``plugin`` names the entry point (and its distribution when known).
    """

    def __init__(self, plugin: str, cause: str) -> None:
        self.plugin = plugin
        self.cause = cause
        super().__init__(f"context engine plugin {plugin!r} failed to load: {cause}")


class HermesUnavailableError(ContextEngineError, ImportError):
    """The Hermes adapters need ``hermes-agent`` and it cannot be imported.

    Raised by :mod:`contextengine.hermes` when one of its adapters is used in
    an environment without the package (or with a version lacking what the
    adapter needs); the message names the package and the extra to install.
    ``missing`` is what could not be found.
    """

    def __init__(self, missing: str, detail: str = "") -> None:
        self.missing = missing
        hint = "install it with: pip install 'contextengine[hermes]' (or pip install hermes-agent)"
        extra = f" ({detail})" if detail else ""
        super().__init__(f"the Hermes adapter needs {missing}{extra}; {hint}")
