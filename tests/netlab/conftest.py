"""The network lab's tests need root and the ip/tc/nft tools (the Makefile's ``netlab-tools``
installs them as root). Without them a lab test fails with the requirement and its fix: a
skip here would let a CI machine without the lab report it as passing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from avatar_sdk.testing.netlab import NetworkLab, requirements


@pytest_asyncio.fixture
async def lab() -> AsyncIterator[NetworkLab]:
    problem = requirements()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    async with NetworkLab() as opened:
        yield opened
