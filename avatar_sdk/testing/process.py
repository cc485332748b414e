"""StagingProcess: the staging backend in a child process, for load runs.

A fleet's sessions and the backend they load should not share one event loop or one core's
worth of GIL: under load the backend's own latency would be charged to the client. This
runs a :class:`StagingServer` with its HTTP control API in a ``spawn`` child and hands the
parent its URLs and token; leaving the ``async with`` (an exception and a cancellation
included) stops the child and joins it, terminating it if it does not stop in time.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from ..besteffort import best_effort
from ..errors import AvatarError, ErrorCode
from ..logs import logger_levels, sdk_logger, set_logger_levels
from .staging.control import CONTROL_PREFIX

__all__ = ["StagingProcess"]

log = sdk_logger(__name__)


def _serve(
    conn: Connection, options: dict[str, Any], levels: dict[str, int], netns: str | None = None
) -> None:
    """Child entry point: serve until the parent says stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if netns is not None:  # before any socket: every one of them is then in that namespace
        from .netlab.netns import enter_netns  # noqa: PLC0415

        enter_netns(netns)
    set_logger_levels(levels)  # the parent's: the CLI quiets this chatter
    try:
        asyncio.run(_serve_async(conn, options))
    finally:
        conn.close()


async def _serve_async(conn: Connection, options: dict[str, Any]) -> None:
    from .staging.server import StagingServer  # noqa: PLC0415

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    async with StagingServer(control_api=True, **options) as staging:
        url = staging.public_url
        conn.send(
            {
                "url": staging.url,
                "token": staging.token,
                "genie_url": staging.genie_url,
                "control_url": url,
                "agentic_url": staging.agentic_url,
                "admin_token": staging.admin_token,
                "visual_id": staging.visual_id,
            }
        )
        loop.add_reader(conn.fileno(), stop.set)  # "stop", or EOF: the parent is gone
        try:
            await stop.wait()
        finally:
            loop.remove_reader(conn.fileno())


class StagingProcess:
    """``async with StagingProcess() as staging:`` then ``staging.url``, ``.token``,
    ``.genie_url``, the avatar-session service's ``.agentic_url``, ``.admin_token`` and
    ``.visual_id`` (a ``ScriptedAvatarSession``'s arguments), and ``.control_url`` (the
    base of the control API: faults are ``POST {control_url}/_control/faults/<name>``).

    ``options`` are :class:`StagingServer` keyword arguments (picklable ones: ``token``,
    ``audio_only``, ``speech_time_scale``, ``recovery_window``...); ``control_api`` is
    always on. ``start_timeout``/``stop_timeout`` bound the child's start and stop (s).
    ``netns``: the named network namespace the child serves in (the network lab's server
    side, :class:`~avatar_sdk.testing.NetworkLab`).
    """

    def __init__(
        self,
        *,
        start_timeout: float = 60.0,
        stop_timeout: float = 5.0,
        netns: str | None = None,
        **options: Any,
    ) -> None:
        self.options = options
        self.netns = netns
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.url = ""
        self.token = ""
        self.genie_url = ""
        self.control_url = ""
        self.agentic_url = ""
        self.admin_token = ""
        self.visual_id = ""
        self._conn: Connection | None = None
        self._process: BaseProcess | None = None

    @property
    def control_prefix(self) -> str:
        return f"{self.control_url}{CONTROL_PREFIX}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __repr__(self) -> str:  # never the token
        return f"<StagingProcess url={self.url or None!r} pid={self.pid}>"

    async def __aenter__(self) -> StagingProcess:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._conn = parent
        levels = logger_levels()
        self._process = context.Process(
            target=_serve,
            args=(child, self.options, levels, self.netns),
            name="avatar-staging",
            daemon=True,
        )
        try:
            self._process.start()
            child.close()
            ready = await asyncio.to_thread(parent.poll, self.start_timeout)
            if not ready:
                raise AvatarError(
                    ErrorCode.INTERNAL,
                    f"the staging process did not start in {self.start_timeout:g} s",
                )
            info = parent.recv()
        except EOFError:
            await self._stop()
            raise AvatarError(ErrorCode.INTERNAL, "the staging process exited at start") from None
        except BaseException:
            await self._stop()
            raise
        self.url, self.token = info["url"], info["token"]
        self.genie_url, self.control_url = info["genie_url"], info["control_url"]
        self.agentic_url, self.admin_token = info["agentic_url"], info["admin_token"]
        self.visual_id = info["visual_id"]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stop()

    async def _stop(self) -> None:
        conn, self._conn = self._conn, None
        process, self._process = self._process, None
        if conn is not None:
            with best_effort("tell the staging process to stop", log):
                conn.send("stop")
        try:
            if process is not None and process.pid is not None:
                await asyncio.to_thread(_reap, process, self.stop_timeout)
        finally:
            if conn is not None:
                conn.close()


def _reap(process: BaseProcess, timeout: float) -> None:
    process.join(timeout)
    if process.is_alive():
        log.warning("the staging process did not stop in %gs: terminating it", timeout)
        process.terminate()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join(timeout)
    process.close()
