"""Pure media-side logic: private hosts, TURN URLs, device errors, the uplink track."""

from __future__ import annotations

import errno
import fractions
import ipaddress

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from avatar_sdk import ErrorCode
from avatar_sdk.transport.net.hostguard import address_kind
from avatar_sdk.transport.rtc.asr import UplinkTrack, classify_source_error
from avatar_sdk.transport.rtc.ice import TurnConfig, rtc_configuration
from avatar_sdk.transport.rtc.stv import FanoutTrack, is_private_host


@pytest.mark.parametrize(
    ("url", "private"),
    [
        ("http://127.0.0.1:8080/whep", True),
        ("https://10.0.0.5/whep", True),
        ("https://192.168.1.2/whep", True),
        ("https://169.254.0.1/whep", True),
        ("https://[::1]/whep", True),
        ("https://[::ffff:10.1.2.3]/whep", True),
        ("https://localhost/whep", True),
        ("https://srs.avatar.example/whep", False),
        ("https://8.8.8.8/whep", False),
        # every spelling the system resolver reads as a loopback/private address
        ("https://0x7f000001:8443/whep", True),
        ("https://127.1/whep", True),
        ("https://2130706433/whep", True),
        ("https://0177.0.0.1/whep", True),
        ("https://0xa.1/whep", True),  # 10.0.0.1
        ("https://localhost./whep", True),
        ("https://media.localhost/whep", True),
        ("https://0.0.0.0/whep", True),
        ("https://100.64.1.1/whep", True),  # carrier-grade NAT: not the Internet
        ("https://224.0.0.1/whep", True),
        ("https://[fe80::1]/whep", True),
        ("https://[fc00::1]/whep", True),
        ("https://[2002:7f00:1::]/whep", True),  # 6to4 wrapping 127.0.0.1
        ("https://0x08080808/whep", False),  # 8.8.8.8
        ("https://cafe.example/whep", False),  # hex-looking letters, a name
        ("https://[2606:4700::1111]/whep", False),
    ],
)
def test_private_hosts(url: str, private: bool) -> None:
    assert is_private_host(url) is private


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("::ffff:127.0.0.1", "a loopback address"),
        ("0.0.0.0", "an unspecified address"),
        ("169.254.169.254", "a link-local address"),  # cloud metadata
        ("239.1.2.3", "a multicast address"),
        ("192.168.0.1", "a private address"),
        ("100.64.0.1", "a non-public address"),
        ("93.184.216.34", None),
    ],
)
def test_each_refused_address_is_named(address: str, kind: str | None) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


def test_turn_urls_carry_explicit_port_and_transport() -> None:
    urls = TurnConfig("turn:turn.example/", "u", "p").urls()
    assert urls == [
        "turn:turn.example:80?transport=udp",
        "turn:turn.example:443?transport=udp",
        "turn:turn.example:80?transport=tcp",
        "turns:turn.example:443?transport=tcp",
    ]
    cfg = rtc_configuration(TurnConfig("turn.example", "u", "p"), relay_only=True)
    assert cfg.iceServers and cfg.iceServers[0].username == "u"
    assert rtc_configuration(None, relay_only=True).iceTransportPolicy.value == "all"


def test_the_chosen_turn_transport_is_the_one_aiortc_allocates_on() -> None:
    """aiortc takes the first TURN URL only: a UDP-first list never reaches a relay on a
    network with all UDP blocked, so ``transport="tcp"`` must put TCP first."""
    from aiortc.rtcicetransport import connection_kwargs  # noqa: PLC0415

    for transport in ("udp", "tcp"):
        turn = TurnConfig("turn.example", "u", "p", transport=transport)  # type: ignore[arg-type]
        kwargs = connection_kwargs(rtc_configuration(turn, relay_only=True).iceServers)
        assert kwargs["turn_transport"] == transport
        assert kwargs["turn_server"] == ("turn.example", 80)
    with pytest.raises(ValueError, match="transport"):
        TurnConfig("turn.example", "u", "p", transport="quic")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (PermissionError("denied"), ErrorCode.PERMISSION_DENIED),
        (FileNotFoundError("gone"), ErrorCode.DEVICE_NOT_FOUND),
        (OSError(errno.ENODEV, "no device"), ErrorCode.DEVICE_NOT_FOUND),
        (OSError(errno.EBUSY, "busy"), ErrorCode.DEVICE_BUSY),
        (OSError(errno.EIO, "io"), ErrorCode.DEVICE_BUSY),
    ],
)
def test_source_error_classification(exc: BaseException, code: ErrorCode) -> None:
    assert classify_source_error(exc) is code


class _Tone(MediaStreamTrack):
    kind = "audio"

    def __init__(self, fail_after: int | None = None, exc: BaseException | None = None) -> None:
        super().__init__()
        self.n = 0
        self.fail_after = fail_after
        self.exc = exc

    async def recv(self) -> av.AudioFrame:
        if self.fail_after is not None and self.n >= self.fail_after:
            raise self.exc or MediaStreamError()
        self.n += 1
        samples = (np.sin(np.arange(960) / 10) * 10000).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 48000
        frame.pts = 12345  # the wrapper restamps
        frame.time_base = fractions.Fraction(1, 48000)
        return frame


def _energy(frame: av.AudioFrame) -> int:
    return int(np.abs(frame.to_ndarray()).sum())


async def test_uplink_track_mutes_restamps_and_survives_a_failing_source() -> None:
    errors: list[ErrorCode] = []
    track = UplinkTrack(
        _Tone(fail_after=3, exc=PermissionError("no")), lambda c, e: errors.append(c)
    )
    first = await track.recv()
    assert _energy(first) > 0 and first.pts == 0
    track.muted = True
    muted = await track.recv()
    assert _energy(muted) == 0 and muted.pts == 960
    track.muted = False
    assert _energy(await track.recv()) > 0
    after_failure = await track.recv()  # the source raises: classified once, silence follows
    assert errors == [ErrorCode.PERMISSION_DENIED]
    assert _energy(after_failure) == 0 and after_failure.pts == 3 * 960
    track.switch(_Tone())
    assert _energy(await track.recv()) > 0
    track.stop()
    with pytest.raises(MediaStreamError):
        await track.recv()


async def test_fanout_track_drops_oldest_and_ends_on_stop() -> None:
    out = FanoutTrack("video", max_queue=2)
    for i in range(3):
        out.push(i)
    assert out.dropped == 1
    assert [await out.recv(), await out.recv()] == [1, 2]
    out.stop()
    with pytest.raises(MediaStreamError):
        await out.recv()
