"""A process that opens a network lab, says so, and waits (to be stopped with Ctrl-C or
killed by tests/netlab/test_lab.py)."""

from __future__ import annotations

import asyncio
import sys

from avatar_sdk.testing.netlab import NetworkLab


async def main() -> None:
    async with NetworkLab() as lab:
        print(lab.client_netns, lab.server_netns, flush=True)
        await asyncio.sleep(60)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
