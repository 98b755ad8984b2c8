"""Adapters for the frameworks and SDKs agents are built with; each imports its framework lazily.

* :mod:`contextengine.integrations.clients`: ``contextengine.wrap(client, ...)``, an
  OpenAI or Anthropic SDK client that runs the host around each call.
"""
