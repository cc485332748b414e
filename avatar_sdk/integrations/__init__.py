"""Integrations of the SDK with other frameworks (each behind its own extra):
``avatar_sdk.integrations.pipecat`` (``avatar-sdk[pipecat]``)."""
