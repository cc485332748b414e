"""pytest plugin (auto-loaded when avatar-sdk is installed): a ``staging`` fixture.

``staging`` is a started :class:`~avatar_sdk.testing.StagingServer` on 127.0.0.1, stopped
after the test. Requires pytest-asyncio (async fixtures).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .server import StagingServer

try:
    import pytest_asyncio

    _HAVE_ASYNCIO = True
except ImportError:  # pragma: no cover - the fixture needs pytest-asyncio
    _HAVE_ASYNCIO = False


if _HAVE_ASYNCIO:

    @pytest_asyncio.fixture
    async def staging() -> AsyncIterator[StagingServer]:
        """A running staging backend for one test."""
        server = StagingServer()
        await server.start()
        try:
            yield server
        finally:
            await server.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "staging: uses the embedded StagingServer")
