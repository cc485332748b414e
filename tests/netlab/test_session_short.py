"""The SDK in the network lab, the short set (``make test``): an audio+video session with
turns against the staging backend across real kernel-level faults. The full matrix is
``make netlab`` (test_session_matrix.py). Each test prints its figures (``NETLAB {...}``)."""

from __future__ import annotations

import pytest

from benchmarks.netlab_scenarios import (
    address_change,
    blackhole,
    loss,
    reject,
    run_scenario,
)

from .conftest import no_turn_lost, show

pytestmark = pytest.mark.timeout(120)


async def test_five_percent_loss_needs_no_recovery() -> None:
    f = show(await run_scenario("loss 5% 6s", loss(5, 6.0), expect_recovery=False))
    no_turn_lost(f)
    assert f.tiers == [] and f.media_recoveries == 0 and f.reconnects == {}
    assert f.video_fps_during is not None and f.video_fps_during > 5
    assert f.voice_packets > 0 and f.voice_concealed > 0  # lost voice concealed, counted


async def test_a_three_second_blackhole_is_recovered_with_no_turn_lost() -> None:
    f = show(await run_scenario("blackhole all 3s", blackhole(3.0)))
    no_turn_lost(f)
    assert f.detection is not None and f.detection < 3.0  # the media's 2 s bounds
    assert f.recovery is not None and f.recovery < 10.0
    assert "cold" not in f.tiers  # the socket lives through 3 s


async def test_a_tcp_reset_is_classified_and_recovered() -> None:
    """The reset reaches the client only (the server's side of the connection lives on
    until it next writes): the socket tier's resume may find the server still holding the
    old socket (a fresh session answers), and the cold tier takes over at once; the turn
    in flight is resent once, never answered twice."""
    f = show(await run_scenario("reject tcp 1s", reject("tcp", 1.0)))
    no_turn_lost(f)
    assert f.detected_by == "reconnecting" and f.detection is not None and f.detection < 1.5
    assert f.tiers[0] == "socket"
    assert f.recovery is not None and f.recovery < 10.0


async def test_an_address_change_is_detected_by_the_network_watch() -> None:
    """Found by the network watch in well under 2 s; the control socket, bound to the
    address that is gone, is dropped at once as a transport error (regression: it waited
    for a probe to time out, one more second, as a ``ping timeout``)."""
    f = show(await run_scenario("address change", address_change()))
    no_turn_lost(f)
    assert f.detected_by == "network_changed"
    assert f.detection is not None and f.detection < 2.0
    assert any("added" in change for change in f.network_changes)
    first_at, tier, reason = f.recoveries[0]
    assert (tier, reason) == ("socket", "transport error")
    assert first_at - f.detection < 0.5
    assert f.recovery is not None and f.recovery < 10.0
