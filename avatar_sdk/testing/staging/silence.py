"""A TCP connection that goes silent like a vanished peer, for the staging backend.

A dead NAT mapping or a Wi-Fi link that went away answers nothing: no data, no ping, no
WebSocket close frame, no FIN, no RST, and whatever the client sends is never read. Swallowing
Engine.IO packets is not enough to imitate that, because the WebSocket layer under them still
answers a close handshake and the kernel still reports the client's FIN; a client that works
against such a "silent" server can still fail against a really silent one (issue 8, defect 3).

:class:`SilencedConnection` therefore works on the server's asyncio transport itself: reading
stops (nothing the client sends is consumed, its FIN included), every write is dropped, and
every close or abort the server's own stack asks for is held back, so the client sees nothing
at all. :meth:`SilencedConnection.release` gives the transport back and closes it for real,
so a test that clears the fault or stops the server leaks no socket.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...logs import sdk_logger

log = sdk_logger(__name__)

#: Transport methods replaced on the instance while silenced (the class keeps the originals).
_SILENCED = ("write", "writelines", "write_eof", "close", "abort", "resume_reading")


class SilencedConnection:
    """One server-side transport made silent until :meth:`release`."""

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self._transport: asyncio.BaseTransport | None = transport
        self.dropped_bytes = 0
        #: The server's own stack asked to close this connection meanwhile (held back).
        self.close_requested = False
        if isinstance(transport, asyncio.ReadTransport):
            transport.pause_reading()

        def drop(data: Any) -> None:
            self.dropped_bytes += len(data)

        def drop_lines(lines: Any) -> None:
            for data in lines:
                drop(data)

        def hold_close(*_: Any) -> None:
            self.close_requested = True

        def noop(*_: Any) -> None:
            return None

        replacements = {
            "write": drop,
            "writelines": drop_lines,
            "write_eof": noop,
            "close": hold_close,
            "abort": hold_close,
            "resume_reading": noop,  # aiohttp's flow control must not undo the pause
        }
        for name in _SILENCED:
            setattr(transport, name, replacements[name])

    @classmethod
    def silence(cls, transport: asyncio.BaseTransport | None) -> SilencedConnection | None:
        """Silence ``transport``; None when there is none or it is already closing."""
        if transport is None or transport.is_closing():
            return None
        try:
            return cls(transport)
        except (AttributeError, TypeError) as exc:  # e.g. a C transport without __dict__
            log.warning("cannot silence %s: %s", type(transport).__name__, exc)
            return None

    @property
    def silenced(self) -> bool:
        return self._transport is not None

    def release(self) -> None:
        """Restore the transport and close it at once (no goodbye: the peer is long gone)."""
        transport, self._transport = self._transport, None
        if transport is None:
            return
        for name in _SILENCED:
            transport.__dict__.pop(name, None)
        if not transport.is_closing():
            # abort(): close now, without flushing anything still buffered for the client.
            if isinstance(transport, asyncio.WriteTransport):
                transport.abort()
            else:
                transport.close()
