"""TurnRelay: a real TURN relay (coturn's ``turnserver``) in the network lab's server
namespace, for sessions whose media cannot reach the media server directly.

coturn rather than a Python TURN server: it is the relay most deployments run, Debian
packages it (the Makefile's ``netlab-tools`` installs it with the lab's other tools), and a
session that works through it works through the relay a user's network provides. It
listens on the server address, port 80, UDP and TCP (the ports
:meth:`~avatar_sdk.TurnConfig.urls` names first), relays from the same address, and
accepts one long-term credential. Its log is read line by line: :attr:`allocations`
counts the relay allocations it granted (the evidence that media went through it).

``async with lab.turn_relay() as relay:`` starts it and waits until it listens; leaving the
block (an error and a cancellation included) stops it (SIGTERM, then SIGKILL) and waits for
it, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Sequence
from typing import Final, Literal

from ...besteffort import best_effort
from ...errors import AvatarError, ErrorCode
from ...logs import sdk_logger
from ...transport.rtc.ice import TurnConfig

__all__ = ["TURN_PORT", "TurnRelay", "turnserver_command"]

log = sdk_logger(__name__)

#: The relay's port: the first one :meth:`TurnConfig.urls` names (aiortc uses that URL).
TURN_PORT: Final = 80
#: coturn's log line once its listeners and relay threads are up.
_READY: Final = "Total General servers"
#: coturn's log line for each relay allocation it granted.
_ALLOCATED: Final = "ALLOCATE processed, success"


def turnserver_command(
    address: str, *, port: int, username: str, credential: str, realm: str, state_dir: str
) -> list[str]:
    """The ``turnserver`` command line: no configuration file (``-n``), plain TURN over UDP
    and TCP on ``address:port`` only, relay ports on the same address, one long-term
    credential, its pid file and user database in ``state_dir`` (not the system's), the
    log on stdout, verbose enough to name each allocation."""
    return [
        "turnserver", "-n", "--verbose",
        "--listening-ip", address, "--relay-ip", address, "--listening-port", str(port),
        "--lt-cred-mech", "--user", f"{username}:{credential}", "--realm", realm,
        "--fingerprint", "--no-tls", "--no-dtls", "--no-cli", "--no-software-attribute",
        "--pidfile", f"{state_dir}/turnserver.pid", "--userdb", f"{state_dir}/turndb",
        "--log-file", "stdout", "--simple-log",
    ]  # fmt: skip


class TurnRelay:
    """coturn in the named network namespace ``netns``, on ``address`` (the lab's server
    side: :meth:`NetworkLab.turn_relay`; see the module's docstring). ``config()`` is the
    :class:`TurnConfig` a session uses to reach it."""

    def __init__(
        self,
        netns: str,
        address: str,
        *,
        username: str = "lab",
        credential: str = "lab-relay",
        realm: str = "lab",
        start_timeout: float = 10.0,
    ) -> None:
        self.netns = netns
        self.address = address
        self.port = TURN_PORT
        self.username = username
        self.credential = credential
        self.realm = realm
        self.start_timeout = start_timeout
        #: Relay allocations granted so far (UDP and TCP clients alike).
        self.allocations = 0
        #: The log's last lines (the end of a failed start is shown from them).
        self.log_tail: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._state_dir: str | None = None

    def config(self, transport: Literal["udp", "tcp"] = "udp") -> TurnConfig:
        return TurnConfig(self.address, self.username, self.credential, transport=transport)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def __repr__(self) -> str:  # never the credential
        return f"<TurnRelay {self.address}:{self.port} allocations={self.allocations}>"

    async def __aenter__(self) -> TurnRelay:
        if shutil.which("turnserver") is None:
            raise AvatarError(
                ErrorCode.INVALID_STATE,
                "the TURN relay needs coturn's turnserver; fix: "
                "sudo apt-get install -y --no-install-recommends coturn",
            )
        self._state_dir = tempfile.mkdtemp(prefix="avlab-turn-")
        argv = ["ip", "netns", "exec", self.netns, *turnserver_command(
            self.address,
            port=self.port,
            username=self.username,
            credential=self.credential,
            realm=self.realm,
            state_dir=self._state_dir,
        )]  # fmt: skip
        try:
            await self._start(argv)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _start(self, argv: Sequence[str]) -> None:
        log.debug("network lab: %s", " ".join(argv))
        self._process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.ensure_future(self._read(self._process))
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait({ready, self._reader}, timeout=self.start_timeout)
        ready.cancel()
        if not self._ready.is_set():
            tail = "\n".join(self.log_tail[-10:])
            raise AvatarError(
                ErrorCode.INTERNAL,
                f"turnserver did not start in {self.start_timeout:g} s:\n{tail}",
            )

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.log_tail = [*self.log_tail[-49:], line]
            if _READY in line:
                self._ready.set()
            if _ALLOCATED in line:
                self.allocations += 1

    async def close(self) -> None:
        """Stop coturn and wait for it (SIGKILL after 5 s). Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with best_effort("stop the TURN relay", log):
                process.terminate()
            try:
                await asyncio.shield(asyncio.wait_for(process.wait(), 5.0))
            except TimeoutError:
                log.warning("turnserver did not stop in 5 s: killing it")
                process.kill()
                await asyncio.shield(process.wait())
        reader, self._reader = self._reader, None
        if reader is not None:
            with best_effort("finish reading the TURN relay's log", log):
                await asyncio.wait_for(asyncio.shield(reader), 2.0)
            reader.cancel()
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None
