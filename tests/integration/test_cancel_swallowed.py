"""Found by the chaos tour (``make soak``): ``close()`` right after a socket probe was
answered (or right after ``agent_speech_started``) waits its whole ``close_timeout`` for a
watchdog that ignored its cancellation.

``ServerLink.probe`` waits with ``asyncio.wait_for(waiter, timeout)``. On Python 3.11
(supported: ``requires-python >= 3.11``) ``wait_for`` swallows a cancellation that arrives
once its inner future is already done (CPython gh-86296, fixed in 3.12 where ``wait_for``
is built on ``asyncio.timeout``): it returns the result instead of raising
``CancelledError``. The probe's answer resolves the waiter in the same loop iteration as
the ``capacity_changed`` event, so a caller that reacts to that event by closing cancels
the watchdog exactly then; the watchdog goes on looping, ``Supervisor.aclose`` waits its
whole ``close_timeout`` and logs "did not stop within ...s of its cancellation", and the
watchdog only leaves once the machine is terminal. The brain watchdog
(``ConversationGuards.run_watchdog``: ``asyncio.wait_for(self._changed.wait(), delay)``)
does the same when ``agentStartSpeech`` re-arms it in the iteration that delivers
``agent_speech_started`` to a caller who closes on it. Every ``asyncio.wait_for`` in a
cancellable loop has this hole on 3.11.

Deterministic: the close is issued in the same iteration that resolved the probe. Fixed:
the probe and every watchdog wait with ``asyncio.wait`` on a clock timer
(``clock.sleep_or``), which never swallows a cancellation.
"""

from __future__ import annotations

import logging

import pytest

from avatar_sdk import AvatarSession
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import describe_task

from .conftest import FAST, sdk_tasks

PROBING = FAST.with_(socket_probe_interval=0.5, socket_probe_timeout=0.6)


async def _close_at_once(session: AvatarSession, caplog: pytest.LogCaptureFixture) -> None:
    """Close now; every task must stop at its cancellation. Asserted by what happened, not
    by how long close took: a task that swallows its cancellation is logged by the
    supervisor ("did not stop") and is still running when close() returns."""
    caplog.set_level(logging.ERROR, logger="avatar_sdk.session.supervisor")
    await session.close()
    stuck = [r.getMessage() for r in caplog.records if "did not stop" in r.getMessage()]
    assert stuck == []  # today: the watchdog, cancelled, kept running
    assert sdk_tasks() == [], [describe_task(t) for t in sdk_tasks()]  # at once: none left


async def test_close_right_after_a_probe_answer_stops_every_task_at_once(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    session = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=PROBING
    )
    try:
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=3)
        answered = session.expect("capacity_changed", timeout=3)
        session.notify_network_change(media=False)  # the watchdog probes at its next tick
        await answered  # resolved with the probe's own waiter, in the same loop iteration
        await _close_at_once(session, caplog)  # the socket watchdog swallows the cancel
    finally:
        await session.close()


async def test_close_right_after_the_answer_starts_stops_every_task_at_once(
    staging: StagingServer, caplog: pytest.LogCaptureFixture
) -> None:
    session = AvatarSession(
        staging.url, staging.token, media=False, allow_insecure_transport=True, config=PROBING
    )
    try:
        await session.connect()
        await session.wait_for("agent_turn_ended", timeout=3)
        started = session.expect("agent_speech_started", timeout=3)
        await session.speak("hello")
        await started  # agentStartSpeech re-armed the brain watchdog in this same iteration
        await _close_at_once(session, caplog)  # the brain watchdog swallows the cancel
    finally:
        await session.close()
