"""Media through a real TURN relay (coturn in the lab's server namespace), in the short set
(``make test``): with every UDP packet between client and server dropped but the relay's
port, a session connects, talks, and survives a control-socket drop and an ICE failure of
each media channel, media flowing again both ways each time (counted at the SDK and at the
staging). The TCP-to-the-relay case (all UDP blocked) is in the matrix
(``test_session_matrix.py``, ``make netlab``). Figures: ``NETLAB-RELAY {...}`` lines."""

from __future__ import annotations

import pytest

from benchmarks.netlab_relay_scenario import run_relay

from .conftest import relay_survived, show_relay

pytestmark = pytest.mark.timeout(120)


async def test_a_session_over_the_relay_only_connects_talks_and_survives_faults() -> None:
    """Without the relay the same run fails to connect (``asr_failed``: the uplink finds no
    path), so media went through coturn: it granted an allocation per peer, one more per
    peer each ICE failure rebuilt."""
    f = show_relay(await run_relay("relay-udp"))
    relay_survived(f)
    assert f.allocations >= 2
