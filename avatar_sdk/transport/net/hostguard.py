"""The private-host guard of server-given media URLs (WHEP), enforced at connect time.

A WHEP URL arrives from the server, so a hostile or compromised server could use it to make
the SDK send requests into the user's machine or network. A check of the URL's spelling is
not enough (issue 12, defect 7): ``0x7f000001``, ``127.1`` and ``2130706433`` are all
127.0.0.1 to the system resolver, a public-looking name can resolve to a private address,
and a name can resolve differently between a check and the connect (DNS rebinding).

So the host is resolved once, every address is checked, and the connection is pinned to the
checked addresses: :class:`HostGuard` does the lookup and check, and its :attr:`resolver`
(an aiohttp resolver) hands the connector only what was checked, never asking DNS again.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver

from ...errors import AvatarError, ErrorCode

if TYPE_CHECKING:
    from aiohttp.abc import ResolveResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: ``(host, port) -> addresses``: how a name is resolved (injectable for tests).
Lookup = Callable[[str, int], Awaitable[list[str]]]

#: Names that mean this machine whatever DNS says (RFC 6761 §6.3).
_LOCAL_NAMES = ("localhost", "localhost.localdomain")

_ADVICE = "private media hosts need allow_insecure_transport=True"


class HostRefused(OSError):
    """Raised inside aiohttp's connector when a host resolves to a refused address (an
    ``OSError``, so aiohttp reports it as a connect failure carrying it)."""


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` spells, if it is a numeric literal, in any form the system
    resolver accepts: ``ipaddress`` forms and the legacy ``inet_aton`` ones (``0x7f000001``,
    ``127.1``, ``2130706433``, ``0177.0.0.1``), which it reads as 127.0.0.1."""
    host = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not host or not all(c.isalnum() or c == "." for c in host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _embedded(addr: IPAddress) -> list[IPAddress]:
    """The IPv4 addresses ``addr`` carries (mapped, 6to4, Teredo), then ``addr`` itself:
    the carried one names the kind (``::ffff:127.0.0.1`` is loopback, not just private)."""
    found: list[IPAddress] = []
    if isinstance(addr, ipaddress.IPv6Address):
        for inner in (addr.ipv4_mapped, addr.sixtofour, addr.teredo and addr.teredo[1]):
            if inner:
                found.append(inner)
    return [*found, addr]


def address_kind(addr: IPAddress) -> str | None:
    """Why ``addr`` is refused as a media host (``"a loopback address"``), or None when it
    is a public unicast address."""
    for a in _embedded(addr):
        if a.is_loopback:
            return "a loopback address"
        if a.is_unspecified:
            return "an unspecified address"
        if a.is_link_local:
            return "a link-local address"
        if a.is_multicast:
            return "a multicast address"
        if a.is_private:
            return "a private address"
        if a.is_reserved:
            return "a reserved address"
        if not a.is_global:
            # Shared (100.64/10 carrier NAT) and the other special ranges: not the Internet.
            return "a non-public address"
    return None


def host_of(url: str) -> str:
    """The host of ``url`` as written (lower case, no brackets)."""
    return (urlsplit(url).hostname or "").lower()


def spelled_private(host: str) -> str | None:
    """Why ``host``, by its spelling alone, is refused (a local name or a non-public
    literal), or None. Used where nothing may be resolved (a synchronous check)."""
    name = host.lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return "a local name"
    addr = literal_address(name)
    return address_kind(addr) if addr is not None else None


async def system_lookup(host: str, port: int) -> list[str]:
    """The system resolver's addresses for ``host`` (TCP), in its order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for *_, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in seen:
            seen.append(address)
    return seen


class HostGuard:
    """Resolve a media host once, refuse it if any address is not public, pin the rest.

    :meth:`check` runs before each request (it raises ``AvatarError``, with a sentence that
    says what was refused and why); :attr:`resolver` goes into the HTTP session's
    ``TCPConnector`` so the connection uses exactly the checked addresses. A host the
    connector asks for that was never checked is resolved and checked there (and refused
    with :class:`HostRefused`), so nothing reaches a private address by another path.
    """

    def __init__(self, *, lookup: Lookup | None = None, what: str = "WHEP") -> None:
        self._lookup = lookup or system_lookup
        self._what = what
        self._pins: dict[str, list[IPAddress]] = {}
        self.resolver = _PinnedResolver(self)

    def _refusal(self, host: str, address: str | None, kind: str) -> str:
        if address is None or address == host:
            return f"{self._what} host {host} is {kind}; {_ADVICE}"
        if literal_address(host) is not None:
            return f"{self._what} host {host} is {address}, {kind}; {_ADVICE}"
        return f"{self._what} host {host} resolves to {address}, {kind}; {_ADVICE}"

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        """Every address of ``host``. Raises ``HostRefused`` naming the first refused one,
        ``OSError`` when it does not resolve (both are connect failures to aiohttp)."""
        literal = literal_address(host)
        if literal is not None:
            addresses = [literal]
        else:
            kind = spelled_private(host)
            if kind is not None:
                raise HostRefused(self._refusal(host, None, kind))
            try:
                # Scope ids ("fe80::1%eth0") are cut: the address alone decides.
                addresses = [
                    ipaddress.ip_address(a.split("%", 1)[0]) for a in await self._lookup(host, port)
                ]
            except ValueError:
                raise socket.gaierror(socket.EAI_FAIL, "unreadable address") from None
            if not addresses:
                raise socket.gaierror(socket.EAI_NONAME, "no address")
        for addr in addresses:
            why = address_kind(addr)
            if why is not None:
                raise HostRefused(self._refusal(host, str(addr), why))
        return addresses

    async def check(self, url: str) -> None:
        """Resolve and check the host of ``url``, and pin it for the next connection.

        Raises ``AvatarError(INSECURE_TRANSPORT)`` for a refused host, ``MEDIA_FAILED`` for
        one that does not resolve."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
        try:
            addresses = await self._resolve(host, port)
        except HostRefused as exc:
            raise AvatarError(ErrorCode.INSECURE_TRANSPORT, str(exc)) from None
        except OSError as exc:
            raise AvatarError(
                ErrorCode.MEDIA_FAILED,
                f"{self._what} host {host} did not resolve ({type(exc).__name__})",
            ) from None
        self._pins[host] = addresses

    async def addresses_for(self, host: str, port: int) -> list[IPAddress]:
        """The pinned addresses of ``host``, or those of a fresh checked lookup."""
        pinned = self._pins.get(host.lower())
        if pinned is not None:
            return pinned
        return await self._resolve(host.lower(), port)


class _PinnedResolver(AbstractResolver):
    """aiohttp resolver of a :class:`HostGuard`: only checked addresses, DNS asked once."""

    def __init__(self, guard: HostGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._guard.addresses_for(host, port)
        results: list[Any] = []
        for addr in addresses:
            af = socket.AF_INET if addr.version == 4 else socket.AF_INET6
            if family not in (socket.AF_UNSPEC, af):
                continue
            results.append(
                {
                    "hostname": host,
                    "host": str(addr),
                    "port": port,
                    "family": af,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
            )
        if not results:
            raise socket.gaierror(socket.EAI_FAMILY, f"{host}: no address of that family")
        return results

    async def close(self) -> None:
        return None


def refusal_in(exc: BaseException) -> HostRefused | None:
    """The :class:`HostRefused` behind an aiohttp connect error, if that is what it was."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, HostRefused):
            return current
        seen.add(id(current))
        nested = getattr(current, "os_error", None)
        if isinstance(current, aiohttp.ClientError) and isinstance(nested, BaseException):
            current = nested
        else:
            current = current.__cause__ or current.__context__
    return None
