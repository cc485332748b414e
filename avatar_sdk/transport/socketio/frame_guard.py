"""Frame checks for the control socket: what python-engineio and python-socketio would
refuse or mishandle, found before they see it.

Pure helpers (:func:`sniff_event`, :func:`malformed`, :func:`engineio_problem`) read a raw
frame or a decoded packet and say what is wrong with it; :class:`GuardedWebSocket` (an
aiohttp websocket response class, plugged in through aiohttp's public ``ws_response_class``)
skips Engine.IO text frames that cannot be decoded, reporting them, and records the size of
a message refused for being too big. Used by :mod:`avatar_sdk.transport.socketio.csr`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Final

import aiohttp
from engineio import packet as eio_packet
from socketio import packet as sio_packet

from ...besteffort import best_effort
from ...logs import sdk_logger

log = sdk_logger("avatar_sdk.transport.socketio.csr")

#: The event name a protocol error carries when the frame's event name cannot be read.
UNKNOWN_EVENT = "<unknown>"
#: ... and when the frame names its event with something that is not a string.
NON_STRING_EVENT = "<non-string event>"


#: Where a client reports a frame it refused: ``(event, detail, name_only)``. ``event`` is
#: the event's name when it could be read (else :data:`UNKNOWN_EVENT`); ``name_only`` is
#: True when an EVENT of that name arrived on ``/`` but its payload could not be decoded.
ProtocolErrorSink = Callable[[str, str, bool], None]

#: Longest piece of a decoder's message quoted in a detail (it may echo payload text).
_DETAIL_QUOTE: Final = 80
#: Socket.IO EVENT text (no namespace): type 2, optional ack id, then the name.
_EVENT_HEAD: Final = re.compile(r'2(\d*)\[\s*"([^"\\]{1,100})"')
#: A connection-state-recovery offset as the last argument (Node: yeast ids; staging: ints).
_EVENT_TAIL: Final = re.compile(r',\s*"([\w.~-]{1,64})"\s*\]\s*$')
#: aiohttp's description of a frame refused for its size.
_SIZE: Final = re.compile(r"Message size (\d+)")


def sniff_event(text: str) -> tuple[str | None, str | None]:
    """The event name and CSR offset of a Socket.IO EVENT the decoder refused, if readable.

    A cheap look at the raw text (``2["name",...,"offset"]``): the name, so the protocol
    error can say which event was lost; the offset only when the frame carries no ack id
    (the server appends offsets to those alone), so a replay does not report it twice.
    """
    head = _EVENT_HEAD.match(text)
    if head is None:
        return None, None
    tail = None if head.group(1) else _EVENT_TAIL.search(text[-100:])
    return head.group(2), tail.group(1) if tail is not None else None


def malformed(pkt: Any) -> tuple[str, str] | None:
    """``(event, detail)`` if a decoded Socket.IO packet cannot be dispatched, else None.

    python-socketio indexes and hashes what it is given (``data[0]`` as a handler key), so
    anything but the shapes the protocol defines would raise inside its dispatch.
    """
    kind = pkt.packet_type
    if not isinstance(kind, int) or isinstance(kind, bool) or not 0 <= kind <= 6:
        shown = kind if isinstance(kind, int) else type(kind).__name__
        return UNKNOWN_EVENT, f"unknown Socket.IO packet type {shown}"
    data = pkt.data
    name = UNKNOWN_EVENT
    if kind in (sio_packet.EVENT, sio_packet.BINARY_EVENT):
        if not isinstance(data, list):
            return UNKNOWN_EVENT, f"event payload must be a list, got {type(data).__name__}"
        if not data:
            return UNKNOWN_EVENT, "event without a name"
        if not isinstance(data[0], str):
            return NON_STRING_EVENT, f"event name is a {type(data[0]).__name__}"
        name = data[0]
    elif kind in (sio_packet.ACK, sio_packet.BINARY_ACK) and not isinstance(data, list):
        return UNKNOWN_EVENT, f"ack payload must be a list, got {type(data).__name__}"
    if pkt.namespace not in (None, "/"):
        label = sio_packet.packet_names[kind]
        return name, f"{label} for namespace {str(pkt.namespace)[:40]!r}, never joined"
    if kind in (sio_packet.BINARY_EVENT, sio_packet.BINARY_ACK) and not pkt.attachment_count:
        return name, "binary packet without attachments"
    return None


def engineio_problem(text: str) -> str | None:
    """Why Engine.IO could not take this text frame, or None (it can)."""
    if len(text) > 1 and text[0] == "4" and text[1].isdigit():
        return None  # a Socket.IO packet: Engine.IO keeps it as text, no decoding
    if not text:
        return "empty Engine.IO frame"
    try:
        pkt = eio_packet.Packet(encoded_packet=text)
    except Exception as exc:  # ValueError, binascii.Error, RecursionError (deep nesting)
        return f"undecodable Engine.IO frame ({type(exc).__name__})"
    if not 0 <= pkt.packet_type <= 6:
        return f"unknown Engine.IO packet type {pkt.packet_type}"
    if pkt.packet_type in (eio_packet.PONG, eio_packet.UPGRADE):
        # Only a client sends these (Engine.IO v4, websocket only): engineio would log and drop.
        return f"{eio_packet.packet_names[pkt.packet_type]} packet from the server"
    return None


class GuardedWebSocket(aiohttp.ClientWebSocketResponse):
    """The control socket's websocket (aiohttp's ``ws_response_class``).

    python-engineio's read loop ends the connection on a text frame it cannot decode (a
    hostile peer could cut the transport at will, and nothing would say why): such frames
    are reported and skipped here. A message refused for its size is remembered
    (:attr:`oversized`, its size in bytes) for the disconnect that follows, since engineio
    only logs it. Make a subclass per client with :func:`guarded_websocket`.
    """

    #: Where skipped frames are reported: ``(event, detail)``.
    sink: ClassVar[Callable[[str, str], None] | None] = None
    #: Size of the message refused for ``max_msg_size`` (0 when aiohttp did not say), if any.
    oversized: int | None = None
    _opened: bool = False

    async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
        while True:
            msg = await super().receive(timeout)
            if msg.type is aiohttp.WSMsgType.ERROR:
                error = msg.data
                if (
                    isinstance(error, aiohttp.WebSocketError)
                    and error.code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
                ):
                    size = _SIZE.search(str(error))
                    self.oversized = int(size.group(1)) if size is not None else 0
                return msg
            if msg.type is aiohttp.WSMsgType.TEXT:
                problem = engineio_problem(msg.data)
                if problem is None and msg.data[:1] == "0":
                    # The handshake's OPEN is the first frame; engineio drops any later one.
                    problem = "OPEN packet after the handshake" if self._opened else None
                    self._opened = True
                if problem is not None:
                    sink = type(self).sink
                    if sink is not None:
                        with best_effort("report of a refused frame", log):
                            sink(UNKNOWN_EVENT, problem)
                    continue
            return msg


def guarded_websocket(sink: Callable[[str, str], None]) -> type[GuardedWebSocket]:
    """A :class:`GuardedWebSocket` class reporting to ``sink`` (pass it to
    ``aiohttp.ClientSession(ws_response_class=...)``)."""

    class _Guarded(GuardedWebSocket):
        pass

    _Guarded.sink = staticmethod(sink)
    return _Guarded


def quote(exc: BaseException) -> str:
    text = str(exc)
    text = text if len(text) <= _DETAIL_QUOTE else text[: _DETAIL_QUOTE - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def log_sink(event: str, detail: str, name_only: bool) -> None:
    log.warning("refused frame (%s): %s", event, detail)


def packet_name(pkt: Any) -> str:
    """The event name of a packet for a report, or :data:`UNKNOWN_EVENT`."""
    data = pkt.data
    if isinstance(data, list) and data and isinstance(data[0], str):
        return str(data[0])
    return UNKNOWN_EVENT
