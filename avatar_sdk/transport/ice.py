"""Peer-connection plumbing shared by both channels: ICE servers (PROTOCOL.md §1.4) and
applying a remote answer."""

from __future__ import annotations

from dataclasses import dataclass

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.rtcconfiguration import RTCBundlePolicy, RTCIceTransportPolicy

from ..errors import AvatarError, ErrorCode


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """A TURN host and credentials (ephemeral RFC 7635 credentials are just a pair too)."""

    host: str
    username: str
    credential: str

    def urls(self) -> list[str]:
        """Every URL with an explicit port and transport: a bare ``turn:host`` yields no
        relay candidate, and the uplink then silently sends nothing."""
        host = self.host.strip().rstrip("/")
        for prefix in ("turns:", "turn:"):
            if host.startswith(prefix):
                host = host[len(prefix) :]
        return [
            f"turn:{host}:80?transport=udp",
            f"turn:{host}:443?transport=udp",
            f"turn:{host}:80?transport=tcp",
            f"turns:{host}:443?transport=tcp",
        ]


def rtc_configuration(turn: TurnConfig | None, *, relay_only: bool = False) -> RTCConfiguration:
    """The peer configuration for one channel."""
    servers = []
    if turn is not None and turn.host.strip():
        servers.append(
            RTCIceServer(turn.urls(), username=turn.username, credential=turn.credential)
        )
    policy = RTCIceTransportPolicy.RELAY if relay_only and servers else RTCIceTransportPolicy.ALL
    return RTCConfiguration(
        iceServers=servers, iceTransportPolicy=policy, bundlePolicy=RTCBundlePolicy.MAX_BUNDLE
    )


async def apply_answer(pc: RTCPeerConnection, sdp: str, code: ErrorCode, what: str) -> None:
    """Apply a server's answer SDP; an unusable one is ``AvatarError(code)``, not a crash."""
    try:
        await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))
    except (ValueError, AttributeError) as exc:
        raise AvatarError(code, f"bad {what} ({type(exc).__name__})") from None
