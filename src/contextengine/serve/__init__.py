"""``contextengine serve``: an OpenAI- and Anthropic-compatible proxy that manages context.

Any client that can be pointed at a base URL gets the engine without a code
change: the proxy ingests each request's history, lets the engine compact and
select, sends the view upstream, answers the engine's tool calls itself and
returns the upstream's answer unchanged in shape (docs/serve.md).

Modules: :mod:`.settings` (what it runs with), :mod:`.sessions` (session keys,
live sessions), :mod:`.upstream` (httpx to the upstream), :mod:`.metrics`
(Prometheus text), :mod:`.app` (the Starlette application), :mod:`.server`
(run it in a thread: tests, benchmarks, embedding). The turn itself is the
relay's (:mod:`contextengine.relay`), shared with ``contextengine.wrap``.
Needs the ``serve`` extra (Starlette, uvicorn); importing this package does not.
"""
