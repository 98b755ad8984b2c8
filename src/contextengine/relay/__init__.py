"""The relay: one conversation turn run through a context engine, for any OpenAI- or
Anthropic-format client, written once for the proxy (``contextengine serve``) and the
wrapped SDK client (``contextengine.wrap``).

A turn, whoever asks for it::

    the client's whole history (its format)  ->  our messages (OpenAI style)
    ingest what is new into the session's history (Conversation)
    host.prepare_request: compaction, select_context, the window guarantee
    the view (its format) + the client's tools + the engine's tools  ->  upstream
    the model calls an engine tool  ->  the relay answers it and asks again (bounded)
    the upstream's answer, unchanged in shape, goes back; engine calls never reach the client

Modules: :mod:`.wire` (what every format provides, stream events),
:mod:`.openai_wire` and :mod:`.anthropic_wire` (the two formats),
:mod:`.conversation` (one session: its host, what the client has sent, the
last answer), :mod:`.turn` (the engine-tool rounds, streamed and not),
:mod:`.actions` (what the engine did, as headers and metrics).
"""
