"""What an SDK session can leave behind, found the same way by the pytest plugin and by the
SDK's own tests: tasks, aiohttp sessions, Engine.IO clients, peer connections, sockets.

Why a module of its own: the suite's "no task left" checks once matched package names in
``repr(task.get_coro())``, which holds only ``<coroutine object Qualname at 0x...>``; they
never matched, so fourteen assertions could not fail. Every check now lives here, once,
and each has a test that plants the leak and sees it reported.

* **Tasks** are judged by their whole coroutine chain (``cr_await`` down to the future the
  task waits on), not by the top coroutine: an SDK task that runs a tenacity-wrapped or
  ``functools``-wrapped coroutine, or an aiortc task the SDK's peer started, has library
  code on top. Frames are placed by the file they run in, compared with the directories of
  the imported packages. A task belongs to the client side (the SDK's) when its outermost
  frame that tells a side is the SDK's or a client library's (python-socketio/engineio
  clients, aiohttp's client, aiortc, aioice); it belongs to the staging backend when that
  frame is ``avatar_sdk.testing`` or a server library (python-socketio/engineio servers,
  aiohttp's ``web``). aiortc and aioice serve both ends alike and tell no side: a task made
  only of their frames counts as the client's, so the check must run after the staging
  backend has let go of the departed client's peers (it does so at the disconnect; the
  plugin allows a short grace).
* **Objects** (aiohttp ``ClientSession`` not closed, Engine.IO ``AsyncClient`` not
  disconnected, aiortc ``RTCPeerConnection`` not closed) are found with ``gc``, only among
  classes already imported (a class never loaded has no objects, and the plugin stays cheap
  to import).
* **Sockets** are the process's socket file descriptors (``/proc/self/fd`` or ``/dev/fd``):
  whatever a library opened, an ICE UDP socket included, is counted without knowing the
  library. Listening sockets and the server ends of their connections (local address a
  listening one) are a backend's, not a client's, and do not count.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import socket
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, Protocol

from .staging.ledger import RELEASED_ON_CLOSE

Side = Literal["client", "server", "either"]

#: The packages whose frames tell a task's side; others (the stdlib, the test's own code,
#: tenacity, ...) are neutral: they wrap, they do not own.
PACKAGES = ("avatar_sdk", "socketio", "engineio", "aiohttp", "aiortc", "aioice")

#: Words in a python-socketio / python-engineio module name that mark its server side.
_SIO_SERVER_WORDS = ("server", "socket", "manager", "admin", "asgi", "middleware", "tornado")


def _roots() -> dict[str, str]:
    """Package name -> its directory (with a trailing separator), for packages imported."""
    roots: dict[str, str] = {}
    for name in PACKAGES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            roots[name] = os.path.dirname(os.path.abspath(path)) + os.sep
    return roots


def frame_side(path: str, roots: dict[str, str] | None = None) -> Side | None:
    """The side code in file ``path`` tells, or None for neutral code."""
    roots = _roots() if roots is None else roots
    for name, root in roots.items():
        if not path.startswith(root):
            continue
        inner = path[len(root) :].replace(os.sep, "/")
        if name == "avatar_sdk":
            return "server" if inner.startswith("testing/") else "client"
        if name in ("socketio", "engineio"):
            if "client" in inner:
                return "client"
            return "server" if any(w in inner for w in _SIO_SERVER_WORDS) else None
        if name == "aiohttp":
            return "server" if inner.startswith("web") else "client"
        return "either"  # aiortc, aioice: both ends of a peer run the same code
    return None


def coroutine_chain(task: asyncio.Task[Any], limit: int = 200) -> list[str]:
    """The files of every frame the task is suspended in, outermost first: its coroutine,
    the coroutine that one awaits, and so on down to the awaited future."""
    paths: list[str] = []
    link: Any = task.get_coro()
    while link is not None and len(paths) < limit:
        code = (
            getattr(link, "cr_code", None)
            or getattr(link, "gi_code", None)
            or getattr(link, "ag_code", None)
        )
        if code is None:  # a future's iterator, a C awaitable: the chain ends here
            break
        paths.append(os.path.abspath(code.co_filename))
        link = (
            getattr(link, "cr_await", None)
            or getattr(link, "gi_yieldfrom", None)
            or getattr(link, "ag_await", None)
        )
    return paths


def task_side(task: asyncio.Task[Any]) -> Side | None:
    """Whose task this is: the side of the outermost frame that tells one ("either" if only
    aiortc/aioice frames do), or None when no frame is of a known package."""
    roots = _roots()
    seen_either = False
    for path in coroutine_chain(task):
        side = frame_side(path, roots)
        if side in ("client", "server"):
            return side
        seen_either = seen_either or side == "either"
    return "either" if seen_either else None


def running_tasks(
    keep: Callable[[asyncio.Task[Any]], bool], exclude: Sequence[asyncio.Task[Any]] = ()
) -> list[asyncio.Task[Any]]:
    """Live tasks of the running loop (the caller's own and ``exclude`` left out) that
    ``keep`` selects."""
    current = asyncio.current_task()
    skip = set(exclude)
    return [
        t
        for t in asyncio.all_tasks()
        if t is not current and not t.done() and t not in skip and keep(t)
    ]


def sdk_tasks(exclude: Sequence[asyncio.Task[Any]] = ()) -> list[asyncio.Task[Any]]:
    """Live tasks of the client side: the SDK's own, and those of the libraries it drives
    (python-socketio/engineio clients, aiohttp's client, aiortc, aioice)."""
    return running_tasks(lambda t: task_side(t) in ("client", "either"), exclude)


def media_tasks(exclude: Sequence[asyncio.Task[Any]] = ()) -> list[asyncio.Task[Any]]:
    """Live tasks of peer connections on either end: any aiortc or aioice frame in the
    chain, or the staging backend's media code (``avatar_sdk.testing``)."""
    roots = _roots()
    staging = roots.get("avatar_sdk", "\0") + "testing" + os.sep

    def media(task: asyncio.Task[Any]) -> bool:
        for path in coroutine_chain(task):
            if path.startswith(staging) or frame_side(path, roots) == "either":
                return True
        return False

    return running_tasks(media, exclude)


def describe_task(task: asyncio.Task[Any]) -> str:
    """``task NAME (qualname -> qualname ...)``: enough to find who started it."""
    names: list[str] = []
    link: Any = task.get_coro()
    while link is not None and len(names) < 6:
        code = getattr(link, "cr_code", None) or getattr(link, "gi_code", None)
        if code is None:
            break
        names.append(getattr(code, "co_qualname", code.co_name))
        link = getattr(link, "cr_await", None) or getattr(link, "gi_yieldfrom", None)
    return f"task {task.get_name()} ({' -> '.join(names) or task.get_coro()!r})"


# -- objects -----------------------------------------------------------------------------------
def _classes(*names: str) -> tuple[type, ...]:
    """The classes ``module:Name`` already imported (a class never loaded has no objects)."""
    found = []
    for name in names:
        module, _, attr = name.partition(":")
        cls = getattr(sys.modules.get(module), attr, None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def open_objects() -> dict[int, str]:
    """Open client objects, by id: aiohttp sessions not closed, Engine.IO clients not
    disconnected, peer connections not closed."""
    http = _classes("aiohttp.client:ClientSession")
    engines = _classes("engineio.async_client:AsyncClient")
    peers = _classes("aiortc.rtcpeerconnection:RTCPeerConnection")
    found: dict[int, str] = {}
    if not (http or engines or peers):
        return found
    for obj in gc.get_objects():
        if http and isinstance(obj, http):
            if not getattr(obj, "closed", True):
                found[id(obj)] = "aiohttp ClientSession not closed"
        elif engines and isinstance(obj, engines):
            if getattr(obj, "state", "disconnected") != "disconnected":
                url = str(getattr(obj, "base_url", "") or "?").split("?", 1)[0]
                found[id(obj)] = f"socket to {url}"
        elif peers and isinstance(obj, peers):
            state = getattr(obj, "connectionState", "closed")
            if state != "closed":
                found[id(obj)] = f"peer connection (RTCPeerConnection, {state})"
    return found


# -- sockets -----------------------------------------------------------------------------------
def _fd_dir() -> str | None:
    for path in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(path):
            return path
    return None


def _socket_fds() -> Iterator[tuple[int, int]]:
    """(fd, inode) of every socket the process holds open."""
    where = _fd_dir()
    if where is None:  # pragma: no cover - no fd table to read (Windows): nothing to count
        return
    for name in os.listdir(where):
        try:
            fd = int(name)
            info = os.fstat(fd)
        except (ValueError, OSError):  # the listing's own fd, closed since: not a socket
            continue
        if stat.S_ISSOCK(info.st_mode):
            yield fd, info.st_ino


def _address(value: Any) -> str:
    if isinstance(value, tuple) and len(value) >= 2:
        return f"{value[0]}:{value[1]}"
    return str(value) or "?"


def _inspect(fd: int) -> tuple[str, bool, tuple[str, Any]]:
    """(description, listening, (kind, local port)) of socket ``fd``, read through a
    borrowed socket object that gives the fd back untouched."""
    borrowed = socket.socket(fileno=fd)
    try:
        kind = {socket.SOCK_STREAM: "TCP", socket.SOCK_DGRAM: "UDP"}.get(borrowed.type, "")
        if borrowed.family == socket.AF_UNIX:
            kind = "unix"
        listening = bool(borrowed.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        local = borrowed.getsockname()
        try:
            peer = " -> " + _address(borrowed.getpeername())
        except OSError as exc:  # not connected (UDP, a listener): no far end to name
            if exc.errno not in (errno.ENOTCONN, errno.EINVAL):
                raise
            peer = ""
        port = local[1] if isinstance(local, tuple) and len(local) >= 2 else local
        return f"{kind or 'socket'} socket {_address(local)}{peer}", listening, (kind, port)
    finally:
        borrowed.detach()


def open_sockets() -> dict[tuple[int, int], str]:
    """The process's open sockets that a client could own, by (fd, inode): listening
    sockets and the server ends of their connections (a local port that listens) left out."""
    seen: list[tuple[tuple[int, int], str, tuple[str, Any]]] = []
    listening: set[tuple[str, Any]] = set()
    for key in _socket_fds():
        try:
            text, listens, local = _inspect(key[0])
        except OSError:  # closed between the listing and the look: gone, not leaked
            continue
        if listens:
            listening.add(local)
        else:
            seen.append((key, text, local))
    return {key: text for key, text, local in seen if local not in listening}


class LeakCheck:
    """What was open when it was made, to tell what was opened since and is still open.

    Build it in the event loop before the sessions start; ``await settle()`` after they
    are closed gives what they leaked."""

    def __init__(self) -> None:
        self.tasks = set(asyncio.all_tasks())
        self.objects = set(open_objects())
        self.sockets = set(open_sockets())

    def leaks(self) -> list[str]:
        """Everything open now that was not open at the start (tasks of the client side)."""
        found = [text for key, text in open_objects().items() if key not in self.objects]
        found += [text for key, text in open_sockets().items() if key not in self.sockets]
        return found + [describe_task(t) for t in sdk_tasks(exclude=list(self.tasks))]

    async def settle(self, grace: float) -> list[str]:
        """The leaks still there after at most ``grace`` seconds (none: returns at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while True:
            found = self.leaks()
            if not found or loop.time() >= deadline:
                return found
            await asyncio.sleep(0.02)


# -- the server side ---------------------------------------------------------------------------
class ResourceLedgerView(Protocol):
    """A backend that accounts for what it holds for clients (``StagingServer``)."""

    def live_resources(self) -> dict[str, int]: ...


def server_leftovers(server: ResourceLedgerView) -> dict[str, int]:
    """What ``server`` still holds for clients that a close should have released."""
    counts = server.live_resources()
    return {kind: counts[kind] for kind in RELEASED_ON_CLOSE if counts.get(kind)}


async def settle_server(server: ResourceLedgerView, grace: float) -> dict[str, int]:
    """The server-side leftovers still there after at most ``grace`` seconds (a backend
    releases a departed client's resources a few loop turns after its disconnect)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while True:
        held = server_leftovers(server)
        if not held or loop.time() >= deadline:
            return held
        await asyncio.sleep(0.02)
