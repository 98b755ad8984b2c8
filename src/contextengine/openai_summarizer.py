"""A summariser backed by any OpenAI-compatible chat-completions endpoint.

OpenAI, vLLM, llama.cpp's server, Ollama, LM Studio and most gateways speak the
same ``POST {base_url}/chat/completions``. :class:`OpenAICompatibleSummarizer`
sends the rendered summary prompt there and maps every way that can fail onto
the two errors an engine acts on:

* :class:`~contextengine.SummarizerAuthError` — 401, 402, 403, a 429 whose body
  says the quota or billing is exhausted, or no API key for a remote server.
  Never retried: only the user can fix it, and the engine aborts the
  compaction rather than hide the problem behind a fallback.
* :class:`~contextengine.SummarizerTransientError` — everything else, with
  its ``cause`` (``rate_limited``, ``timeout``, ``server_error``,
  ``bad_response``). Timeouts, connection errors (a dropped connection), 408,
  429 and 5xx are retried ``max_retries`` times with exponential backoff,
  honouring ``Retry-After``; other 4xx and bad answers (malformed JSON, no
  choices, an empty answer) fail at once, since asking again rarely changes
  them and the engine has a fallback.

Waiting is bounded: no single wait exceeds ``max_retry_after``, and the whole
call ends by the request's ``deadline`` (the engine's wait cap). A
``Retry-After`` longer than either is not slept: the call fails at once with
``retry_after`` set, and the engine falls back and cools down for that long.

The answer is cleaned of thinking blocks (``<think>…</think>``,
``<thinking>…</thinking>``); a ``reasoning_content`` field is ignored. No
``temperature`` or ``max_tokens`` is sent unless configured, because several
reasoning models reject them. The prompt is passed through
:func:`~contextengine.redact.redact` once more before it leaves the process.

Tests run it against :class:`contextengine.testing.ScriptedOpenAIServer`, a
real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from contextengine.errors import SummarizerAuthError, SummarizerTransientError
from contextengine.redact import redact
from contextengine.summary_prompt import SUMMARY_SYSTEM_PROMPT, render_summary_prompt
from contextengine.summary_request import SummaryRequest

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "DEFAULT_OPENAI_BASE_URL",
    "OpenAICompatibleSummarizer",
    "strip_thinking",
    "summarizer_from_env",
]

#: Used by :func:`summarizer_from_env` when a key is configured but no base URL.
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "host.docker.internal"})
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)
_UNOPENED_THINK_END = re.compile(r"^.*?</(?:think|thinking)>\s*", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"<(?:think|thinking)>.*\Z", re.DOTALL | re.IGNORECASE)
_QUOTA_WORDS = ("insufficient_quota", "quota", "billing", "credit balance")
_BODY_EXCERPT_CHARS = 300


def strip_thinking(text: str) -> str:
    """``text`` without reasoning blocks, including the forms servers leave half-open.

    Some servers render the opening ``<think>`` in the chat template and only
    return the closing tag; an answer cut off inside a block has no closing tag.
    """
    cleaned = _THINK_BLOCK.sub("", text)
    if re.search(r"</(?:think|thinking)>", cleaned, re.IGNORECASE):
        cleaned = _UNOPENED_THINK_END.sub("", cleaned, count=1)
    cleaned = _UNCLOSED_THINK.sub("", cleaned)
    return cleaned.strip()


def _is_local(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return (
        host in _LOCAL_HOSTS or host.endswith((".local", ".localhost")) or host.startswith("127.")
    )


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _BODY_EXCERPT_CHARS else flat[:_BODY_EXCERPT_CHARS] + "…"


def _error_fields(response: httpx.Response) -> tuple[str, str]:
    """``(code or type, message)`` from an OpenAI-style error body, or ``("", body excerpt)``."""
    try:
        body = response.json()
    except ValueError:
        return "", _excerpt(response.text)
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or error.get("type") or "")
        return code, _excerpt(str(error.get("message") or ""))
    if isinstance(error, str):
        return "", _excerpt(error)
    return "", _excerpt(response.text)


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` or ``Retry-After``)."""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = response.headers.get(header)
        if raw is None:
            continue
        try:
            seconds = float(raw.strip()) * scale
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
        return max(seconds, 0.0)
    return None


class OpenAICompatibleSummarizer:
    """Summarise through ``POST {base_url}/chat/completions``.

    Called by engines like any :class:`~contextengine.Summarizer`; each
    ``summarize`` makes at most ``1 + max_retries`` requests. ``base_url``
    includes the API prefix (``http://127.0.0.1:8000/v1``); a trailing slash
    is fine. ``api_key`` may be None for a server on this machine.

    ``client`` is used as is and left open (the caller owns it); otherwise the
    summariser creates its own on first use, with ``transport`` when given,
    and :meth:`close` closes it. ``backoff_base``, ``sleep`` and ``clock``
    exist so tests can retry without waiting.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        max_tokens: int | None = None,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        max_retry_after: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        extra_body: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or None
        self.model = model
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_retry_after = max_retry_after
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._clock = clock
        self._client = client
        self._owns_client = client is None
        self._transport = transport

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the HTTP client this summariser created (an injected one is left open)."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> OpenAICompatibleSummarizer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAICompatibleSummarizer(base_url={self.base_url!r}, model={self.model!r})"

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(transport=self._transport, timeout=self.timeout)
            self._owns_client = True
        return self._client

    # ------------------------------------------------------------ the call

    @property
    def url(self) -> str:
        """The chat-completions endpoint this summariser posts to."""
        return f"{self.base_url}/chat/completions"

    def build_body(self, request: SummaryRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``; public so hosts can log or inspect it."""
        prompt = request.prompt or render_summary_prompt(
            messages=request.messages,
            previous_summary=request.previous_summary,
            focus_topic=request.focus_topic,
            memory_context=request.memory_context,
            token_budget=request.token_budget,
            anchors=request.anchors,
        )
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
                {"role": "user", "content": redact(prompt)},
            ],
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body.update(self.extra_body)
        return body

    def summarize(self, request: SummaryRequest) -> str:
        """Return the model's summary for ``request``, cleaned of thinking blocks.

        Raises SummarizerAuthError (no retry) or SummarizerTransientError (after
        the retries) as described in the module docstring.
        """
        if self.api_key is None and not _is_local(self.base_url):
            raise SummarizerAuthError(
                f"no API key for the summariser at {self.base_url}: set "
                "CONTEXTENGINE_SUMMARY_API_KEY (or OPENAI_API_KEY)"
            )
        body = self.build_body(request)
        headers = {"Content-Type": "application/json", "User-Agent": "contextengine"}
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key}"
        deadline = request.deadline
        last_problem = "no attempt made"
        cause = "server_error"
        attempts = 0
        for attempt in range(self.max_retries + 1):
            timeout = self.timeout
            if deadline is not None:
                timeout = min(timeout, deadline - self._clock())
                if timeout <= 0:
                    cause, last_problem = "timeout", "no time left for another attempt"
                    break
            attempts += 1
            wait: float | None = None
            try:
                response = self._http().post(self.url, json=body, headers=headers, timeout=timeout)
            except httpx.TimeoutException as exc:
                cause = "timeout"
                last_problem = f"timed out after {timeout:g} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                cause = "server_error"
                last_problem = f"connection failed: {type(exc).__name__}: {exc}"
            else:
                outcome = self._judge(response)
                if isinstance(outcome, str):
                    return outcome
                last_problem, retryable, cause = outcome
                if not retryable:
                    raise SummarizerTransientError(
                        f"summariser request failed: {last_problem}", cause=cause
                    )
                wait = _retry_after(response)
                left = None if deadline is None else deadline - self._clock()
                if wait is not None and (
                    wait > self.max_retry_after or (left is not None and wait > left)
                ):
                    # Asked to wait longer than we may: fall back now, cool down that long.
                    raise SummarizerTransientError(
                        f"summariser request failed: {last_problem}; it asked to retry after"
                        f" {wait:g} s, longer than this compaction may wait",
                        cause=cause,
                        retry_after=wait,
                    )
            if attempt == self.max_retries:
                break
            if wait is None:
                wait = min(self.backoff_base * (2**attempt), self.backoff_cap)
            if deadline is not None and self._clock() + wait >= deadline:
                break  # the next attempt could not start in time
            self._sleep(wait)
        raise SummarizerTransientError(
            f"summariser request failed after {attempts} attempt{'s' * (attempts != 1)}: "
            f"{last_problem}",
            cause=cause,
        )

    def _judge(self, response: httpx.Response) -> str | tuple[str, bool, str]:
        """The summary, or ``(problem, retryable, cause)``; raises SummarizerAuthError."""
        status = response.status_code
        if status >= 400:
            code, message = _error_fields(response)
            problem = f"HTTP {status} from {self.url}" + (f": {message}" if message else "")
            lowered = f"{code} {message}".lower()
            if status in (401, 402, 403) or (
                status == 429 and any(word in lowered for word in _QUOTA_WORDS)
            ):
                raise SummarizerAuthError(problem)
            if status == 429:
                return problem, True, "rate_limited"
            if status == 408:
                return problem, True, "timeout"
            if status >= 500:
                return problem, True, "server_error"
            return problem, False, "bad_response"
        try:
            payload = response.json()
        except ValueError:
            return (
                f"malformed JSON from {self.url}: {_excerpt(response.text)!r}",
                False,
                "bad_response",
            )
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return (
                f"no choices in the answer from {self.url}: {_excerpt(response.text)!r}",
                False,
                "bad_response",
            )
        reply = choices[0].get("message")
        content: Any = reply.get("content") if isinstance(reply, dict) else None
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        text = strip_thinking(content) if isinstance(content, str) else ""
        if not text:
            return f"empty summary from {self.url} (model {self.model!r})", False, "bad_response"
        return text


def summarizer_from_env(
    environ: Mapping[str, str] | None = None,
) -> OpenAICompatibleSummarizer | None:
    """An :class:`OpenAICompatibleSummarizer` configured by environment variables, or None.

    ``CONTEXTENGINE_SUMMARY_BASE_URL`` (else ``OPENAI_BASE_URL``),
    ``CONTEXTENGINE_SUMMARY_API_KEY`` (else ``OPENAI_API_KEY``) and
    ``CONTEXTENGINE_SUMMARY_MODEL``. The model has no fallback, so an
    ``OPENAI_API_KEY`` set for other tools never starts paid summary calls on
    its own. Returns None without a model, or with neither a base URL nor a
    key; with a key and no base URL the OpenAI API is used. The environment alone:
    :func:`contextengine.load_engine` and the CLI use
    :func:`contextengine.configured_summarizers`, which reads the
    configuration files and arguments too and applies the same rules.
    """
    env = os.environ if environ is None else environ

    def get(*names: str) -> str | None:
        for name in names:
            value = (env.get(name) or "").strip()
            if value:
                return value
        return None

    model = get("CONTEXTENGINE_SUMMARY_MODEL")
    base_url = get("CONTEXTENGINE_SUMMARY_BASE_URL", "OPENAI_BASE_URL")
    api_key = get("CONTEXTENGINE_SUMMARY_API_KEY", "OPENAI_API_KEY")
    if model is None or (base_url is None and api_key is None):
        return None
    return OpenAICompatibleSummarizer(
        base_url=base_url or DEFAULT_OPENAI_BASE_URL, api_key=api_key, model=model
    )
