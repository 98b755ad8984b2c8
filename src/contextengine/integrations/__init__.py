"""Adapters for the frameworks agents are built with.

Each module imports its framework when it is imported, never before:
``import contextengine`` imports none of them.

* :mod:`contextengine.integrations.langchain`: ``ContextEngineMiddleware``, a
  LangChain v1 ``AgentMiddleware`` (extra ``langchain``).
* :mod:`contextengine.integrations.openai_agents`: ``ArchiveSession``,
  ``context_filter`` and ``engine_tools`` for the OpenAI Agents SDK (extra
  ``openai-agents``).
* :mod:`contextengine.integrations.clients`: ``wrap``, a wrapped OpenAI or
  Anthropic client.
"""
