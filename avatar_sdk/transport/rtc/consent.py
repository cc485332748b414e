"""The uplink's path liveness from its first moment: ICE consent freshness at the SDK's rate.

Why this and not a first-report deadline. The server's RTCP receiver reports
(:mod:`.cadence`) judge a peer only once the server has reported, at a rate the server
chooses (aiortc 0.5-1.5 s, libwebrtc-like servers every ~5 s, RFC 3550 lets the first one
come a whole interval after connect), and some media servers send none at all. A deadline
on the first report would have to be longer than the slowest legal first report (one
interval, 1.5x randomised: 7.5 s for a 5 s server) to never misfire, so it could not find a
death in under 5 s, and on a server that never reports it would misfire every time or
have to be switched off. Every ICE agent, on the other hand, must answer a STUN binding
request on the selected pair (RFC 7675 consent freshness; RFC 8445 section 7.3), whatever
its RTCP does, within a round trip. aioice checks consent itself only every ~5 s and gives
up after 6 misses (~30 s: the old detection time of a silent death). So the SDK sends its
own binding requests on the selected pair every ``interval`` (0.5 s by default, a quarter
of the deadline) from the moment the peer connects, and judges the path dead when no
answer has arrived for ``deadline`` seconds (``SessionConfig.media_stall_timeout``, 2 s by
default, the bound used for the downlink's media too).

Why it does not misfire on a healthy path: requests are pipelined (a new one every
``interval`` while earlier ones are still open) and each stays open, with aioice's own
retransmissions at 0.5 and 1.5 s, for 3.5 s, longer than the deadline: a slow path (a long
round trip) still answers every ``interval``, and one lost request or answer costs one
``interval``, not a verdict. Only ``deadline / interval`` (4) answers in a row lost, or a
round trip over the deadline, make a verdict. The cost: one ~100-byte STUN request and its
answer every 0.5 s, beside 50 RTP packets a second.

:class:`ConsentWatch` is the pure rule (times passed in, tested on a fake clock);
:class:`ConsentProbe` does the I/O on one aiortc peer. It uses aioice 0.13 internals
(``RTCIceTransport._connection``, ``Connection._nominated``, ``Connection.build_request``,
``StunProtocol.request``), the same private surface as RECOVERY-NOTES' ICE restart: aiortc
and aioice are pinned exactly, and ``tests/unit/test_consent_probe.py`` runs the probe on
real aioice connections over loopback.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from aioice import stun
from aiortc import RTCPeerConnection

from ...logs import sdk_logger

log = sdk_logger(__name__)

#: Requests per deadline: ``interval = deadline / PROBES_PER_DEADLINE``.
PROBES_PER_DEADLINE = 4
#: The longest interval between two requests, seconds (RFC 8445's pacing is 50 ms).
MAX_INTERVAL = 0.5
MIN_INTERVAL = 0.05
#: aioice retransmits at 0.5 s and 1.5 s and gives up at 3.5 s: longer than the deadline.
RETRANSMISSIONS = 2


def probe_interval(deadline: float) -> float:
    """The SDK's consent-request rate for a ``deadline`` (seconds between requests)."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, deadline / PROBES_PER_DEADLINE))


class ConsentWatch:
    """When the far end of one peer's selected ICE pair last answered, and whether that is
    too long ago. Pure: every time is passed in or read from ``clock`` (the session's
    monotonic reader, so its verdicts share the watchdog's time line)."""

    def __init__(self, deadline: float, *, clock: Callable[[], float]) -> None:
        self.deadline = max(0.0, deadline)
        self._clock = clock
        self.started_at: float | None = None
        self.last_answer: float | None = None
        self.answers = 0
        self.sent = 0
        self.enabled = True

    def disable(self) -> None:
        """No verdict any more (the requests cannot be sent on this peer)."""
        self.enabled = False

    def start(self, at: float | None = None) -> None:
        """The peer's transport connected at ``at`` (default: now). ICE connecting is itself
        an answer on the selected pair, so the silence counts from there: a path that dies
        before the first request is judged like any other."""
        self.started_at = self._clock() if at is None else at

    def answered(self, at: float | None = None) -> None:
        """An answer arrived at ``at`` (default: now)."""
        when = self._clock() if at is None else at
        if self.last_answer is None or when > self.last_answer:
            self.last_answer = when
        self.answers += 1

    def silence(self, now: float | None = None, since: float | None = None) -> float | None:
        """Seconds without an answer, counted from ``since`` at the earliest (when the
        session last became usable); None before :meth:`start`."""
        marks = [m for m in (self.started_at, self.last_answer, since) if m is not None]
        if self.started_at is None or not marks:
            return None
        current = self._clock() if now is None else now
        return current - max(marks)

    def is_overdue(self, now: float | None = None, since: float | None = None) -> bool:
        """True when the path has not answered for longer than the deadline."""
        silent = self.silence(now, since)
        return self.enabled and silent is not None and silent > self.deadline


def _ice_connection(pc: RTCPeerConnection) -> Any:
    """The aioice connection carrying ``pc``'s (bundled) media, or None."""
    for transceiver in pc.getTransceivers():
        dtls = transceiver.sender.transport
        if dtls is not None:
            return dtls.transport._connection
    return None


class ConsentProbe:
    """Sends consent requests on one peer's selected pair every ``interval`` seconds and
    notes each answer in ``watch``. Owned by the uplink: :meth:`stop` ends every task."""

    def __init__(
        self,
        pc: RTCPeerConnection,
        watch: ConsentWatch,
        *,
        interval: float,
        rng: random.Random | None = None,
    ) -> None:
        self._pc = pc
        self.watch = watch
        self.interval = max(MIN_INTERVAL, interval)
        self._rng = rng or random.Random()
        self._loop_task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._stopped = False

    def start(self) -> None:
        """Start probing (idempotent); the peer's ICE must be connected."""
        if self._loop_task is None and not self._stopped:
            self._loop_task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            if self._pc.connectionState == "connected":
                try:
                    self._send_requests()
                except (AttributeError, TypeError, KeyError) as exc:
                    # aioice's internals moved (it is pinned; a test guards it): judging the
                    # path by requests we cannot send would recover a healthy peer forever.
                    log.warning(
                        "ICE consent probing unavailable, the uplink is judged by its state "
                        "and receiver reports only: %s: %s",
                        type(exc).__name__,
                        exc,
                    )
                    self.watch.disable()
                    return
            # Randomised like RFC 7675 asks (0.8-1.2x), so that peers do not synchronise.
            await asyncio.sleep(self.interval * (0.8 + 0.4 * self._rng.random()))

    def _send_requests(self) -> None:
        connection = _ice_connection(self._pc)
        password = getattr(connection, "remote_password", None)
        if connection is None or not password:
            return
        for pair in list(connection._nominated.values()):
            task = asyncio.ensure_future(self._request(connection, pair, password))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _request(self, connection: Any, pair: Any, password: str) -> None:
        request = connection.build_request(pair, nominate=False)
        self.watch.sent += 1
        try:
            await pair.protocol.request(
                request,
                pair.remote_addr,
                integrity_key=password.encode("utf8"),
                retransmissions=RETRANSMISSIONS,
            )
        except stun.TransactionError as exc:
            # A timeout (no answer) or an error answer: consent not granted by this one.
            log.debug("uplink consent request unanswered: %s", type(exc).__name__)
            return
        except OSError as exc:
            # The pair's socket closed under us (the peer is closing): nothing to judge.
            log.debug("uplink consent request not sent: %s", type(exc).__name__)
            return
        self.watch.answered()

    def halt(self) -> list[asyncio.Task[None]]:
        """Cancel the loop and every open request now (the peer failed or is closing);
        returns the tasks, for :meth:`stop` to wait for. Idempotent, and for good: a
        stopped probe never restarts."""
        tasks = [t for t in (self._loop_task, *self._requests) if t is not None and not t.done()]
        self._stopped = True
        for task in tasks:
            task.cancel()
        return tasks

    async def stop(self) -> None:
        """Cancel the loop and every open request, and wait for them (idempotent)."""
        tasks = self.halt()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
