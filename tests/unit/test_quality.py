"""Quality summaries from getStats-like reports (pure)."""

from __future__ import annotations

from types import SimpleNamespace as NS

from avatar_sdk.transport.liveness.quality import ByteMark, summarize


def test_summary_units_and_bitrate() -> None:
    report = [
        NS(type="inbound-rtp", kind="video", packetsLost=1, packetsReceived=99, jitter=900),
        NS(type="inbound-rtp", kind="audio", packetsLost=0, packetsReceived=100, jitter=48),
        NS(type="transport", bytesSent=1000, bytesReceived=9000),
    ]
    first, mark = summarize("stv", report, None, now=10.0)
    assert first["bitrate"] is None
    assert first["packet_loss"] == 1 / 200
    assert first["jitter"] == 0.01  # 900 ticks at 90 kHz
    assert mark == ByteMark(10_000, 10.0)
    report[2] = NS(type="transport", bytesSent=1000, bytesReceived=21_500)
    second, _ = summarize("stv", report, mark, now=11.0)
    assert second["bitrate"] == 12_500 * 8
    assert second["rtt"] is None


def test_remote_inbound_rtt_and_empty_report() -> None:
    data, _ = summarize(
        "asr", [NS(type="remote-inbound-rtp", kind="audio", roundTripTime=0.04)], None, 1.0
    )
    assert data["rtt"] == 0.04
    empty, _ = summarize("asr", [], None, 1.0)
    assert empty == {
        "channel": "asr",
        "rtt": None,
        "jitter": None,
        "packet_loss": 0.0,
        "bitrate": None,
    }
