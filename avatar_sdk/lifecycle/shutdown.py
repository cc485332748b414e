"""Process shutdown for open sessions: opt-in SIGTERM/SIGINT handling on the running loop,
and an interpreter-exit hook that sends the completions still pending.

Registered async callbacks (usually ``session.close``) run within ``grace`` seconds, then
the previous disposition is restored and the signal delivered again; at interpreter exit the
pending completions are sent from a fresh event loop in a daemon thread, never delaying exit
by more than ``exit_bound`` seconds.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ..besteffort import best_effort
from ..logs import sdk_logger

log = sdk_logger("avatar_sdk.lifecycle")

#: Guards the creation of the process-wide ShutdownHooks.
_hooks_lock = threading.Lock()


def log_task_error(task: asyncio.Future[Any]) -> None:
    """Done-callback: a lifecycle task that failed is logged, never lost."""
    if not task.cancelled() and task.exception() is not None:
        log.error("lifecycle callback failed: %r", task.exception())


# ---------------------------------------------------------------------------------------------
# Shutdown hooks
# ---------------------------------------------------------------------------------------------

#: A shutdown callback: sync, or returning an awaitable (``session.close``).
ShutdownCallback = Callable[[], object]


class ExitCompletion(Protocol):
    """What the exit hook needs of a ``session_completed`` signal
    (:class:`avatar_sdk.lifecycle.completion.CompletionSignal`)."""

    @property
    def finished(self) -> bool: ...

    @property
    def pending(self) -> bool: ...

    timeout: float

    async def complete_at_exit(self, reason: str, *, timeout: float) -> dict[str, Any]: ...


@dataclass
class _Installed:
    sig: int
    previous: Any  # the Python-level disposition before install
    previous_loop_handle: asyncio.Handle | None


class ShutdownHooks:
    """Process shutdown for open sessions.

    *Signals* (opt-in, :meth:`install`): on SIGTERM/SIGINT the registered callbacks (each
    session registers its ``close``) run concurrently on the loop, bounded by ``grace``
    seconds (stragglers are cancelled); then the previous dispositions are restored and the
    same signal is delivered again, so the process ends exactly as it would have without
    the SDK: SIGTERM with the default disposition kills the process by SIGTERM (wait status
    -15, a shell shows exit code 143; ``atexit`` does not run, nothing is sent twice), SIGINT
    raises ``KeyboardInterrupt`` (``asyncio.run`` re-raises it), an application handler
    installed before is called. A second signal during the grace period skips the rest.
    Signals whose disposition was ``SIG_IGN`` are left alone.

    *Interpreter exit*: :meth:`track` a completion signal
    (:class:`~avatar_sdk.lifecycle.completion.CompletionSignal`) and, at exit, every one still
    pending is completed (reason ``exit``) from a fresh event loop in a daemon thread; exit
    waits at most ``exit_bound`` seconds.

    Signal callbacks that are bound methods (``session.close``) are held through
    :class:`weakref.WeakMethod`, so a forgotten session does not leak (plain functions are
    held strongly). Tracked completions are held strongly until they finish (or are
    untracked): a completion signal does not reference its session, and a session
    dropped without ``close()`` must still complete its thread at exit, which a weak
    reference cannot promise (the garbage collector may run first). Untracking on close
    is still the rule.
    """

    def __init__(self, *, grace: float = 2.0, exit_bound: float = 1.0) -> None:
        self.grace = max(0.0, float(grace))
        self.exit_bound = max(0.0, float(exit_bound))
        self._callbacks: dict[int, Callable[[], ShutdownCallback | None]] = {}
        self._ids = iter(range(1, sys.maxsize))
        self._installed: list[_Installed] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._tracked: dict[int, ExitCompletion] = {}
        self._atexit = False
        self.signalled: int | None = None

    # -- callbacks ----------------------------------------------------------------------------
    def register(self, callback: ShutdownCallback) -> Callable[[], None]:
        """Run ``callback()`` (sync or async) on SIGTERM/SIGINT; returns an unregister."""
        key = next(self._ids)
        ref: Callable[[], ShutdownCallback | None]
        if inspect.ismethod(callback):
            ref = weakref.WeakMethod(callback)
        else:

            def ref() -> ShutdownCallback:
                return callback

        self._callbacks[key] = ref

        def unregister() -> None:
            self._callbacks.pop(key, None)

        return unregister

    def _live_callbacks(self) -> list[ShutdownCallback]:
        live = []
        for key, ref in list(self._callbacks.items()):
            callback = ref()
            if callback is None:
                self._callbacks.pop(key, None)
            else:
                live.append(callback)
        return live

    # -- signals ------------------------------------------------------------------------------
    @property
    def installed(self) -> tuple[int, ...]:
        return tuple(i.sig for i in self._installed)

    def install(
        self,
        signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT),
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> tuple[int, ...]:
        """Handle ``signals`` on ``loop`` (default: the running loop; it must run in the main
        thread). Returns the signals now handled. Idempotent per signal."""
        loop = loop or asyncio.get_running_loop()
        if self._shutdown_task is not None and self._shutdown_task.done():
            self._shutdown_task = None
        if self._loop is not None and self._loop is not loop:
            self.uninstall()
        self._loop = loop
        for raw in signals:
            sig = int(raw)
            if sig in self.installed:
                continue
            previous = signal.getsignal(sig)
            if previous is signal.SIG_IGN:
                continue
            loop_handlers: dict[int, asyncio.Handle] = getattr(loop, "_signal_handlers", {})
            prev_handle = loop_handlers.get(sig)
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError) as exc:
                log.warning("cannot handle signal %s here: %s", sig, exc)
                continue
            self._installed.append(_Installed(sig, previous, prev_handle))
        return self.installed

    def uninstall(self) -> None:
        """Restore the dispositions found at install time."""
        loop, installed, self._installed = self._loop, self._installed, []
        for item in reversed(installed):
            with best_effort(f"restoring the disposition of signal {item.sig}", log):
                if loop is not None and not loop.is_closed():
                    loop.remove_signal_handler(item.sig)
                handle = item.previous_loop_handle
                if handle is not None and loop is not None and not loop.is_closed():
                    loop.add_signal_handler(
                        item.sig,
                        handle._callback,  # type: ignore[attr-defined]
                        *handle._args,
                    )
                else:
                    previous = item.previous if item.previous is not None else signal.SIG_DFL
                    signal.signal(item.sig, previous)

    def _on_signal(self, sig: int) -> None:
        if self._shutdown_task is not None:  # a second signal: stop waiting
            self._redeliver(sig)
            return
        self.signalled = sig
        assert self._loop is not None
        self._shutdown_task = self._loop.create_task(self._shutdown(sig))

    async def _shutdown(self, sig: int) -> None:
        log.info("signal %s: closing %d session(s)", sig, len(self._callbacks))
        tasks = [asyncio.ensure_future(_call(cb)) for cb in self._live_callbacks()]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=self.grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=0.1)
            for task in done:
                log_task_error(task)
        self._redeliver(sig)

    def _redeliver(self, sig: int) -> None:
        self.uninstall()
        for stream in (sys.stdout, sys.stderr):
            with best_effort("flushing stdout/stderr before the signal", log):
                stream.flush()
        signal.raise_signal(sig)

    # -- interpreter exit ---------------------------------------------------------------------
    def track(self, completion: ExitCompletion) -> None:
        """Complete ``completion`` at interpreter exit if it is still pending then."""
        for key, tracked in list(self._tracked.items()):
            if tracked.finished:
                del self._tracked[key]
        self._tracked[id(completion)] = completion
        if not self._atexit:
            atexit.register(self.run_exit_hook)
            self._atexit = True

    def untrack(self, completion: ExitCompletion) -> None:
        self._tracked.pop(id(completion), None)

    def run_exit_hook(self, reason: str = "exit") -> list[dict[str, Any]]:
        """Send the pending completions, waiting at most ``exit_bound`` seconds; returns the
        payloads that finished in time. What ``atexit`` calls."""
        pending = [c for c in list(self._tracked.values()) if c.pending]
        if not pending:
            return []
        results: list[dict[str, Any]] = []
        bound = self.exit_bound

        async def run_all() -> None:
            # gather starts them in order; each one's lease release and peer count run
            # before its first await, so holders in this process settle among themselves.
            done = await asyncio.gather(
                *(c.complete_at_exit(reason, timeout=min(c.timeout, bound)) for c in pending),
                return_exceptions=True,
            )
            results.extend(r for r in done if isinstance(r, dict))

        def worker() -> None:
            with best_effort("sending the pending completions at exit", log):
                asyncio.run(asyncio.wait_for(run_all(), bound))

        thread = threading.Thread(target=worker, name="avatar-sdk-exit", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no new threads at this point of shutdown: run here
            worker()
            return list(results)
        thread.join(bound)
        return list(results)

    def close(self) -> None:
        """Uninstall signals and drop the exit hook."""
        self.uninstall()
        if self._atexit:
            atexit.unregister(self.run_exit_hook)
            self._atexit = False
        self._tracked.clear()
        self._callbacks.clear()


async def _call(callback: ShutdownCallback) -> None:
    result = callback()
    if inspect.isawaitable(result):
        await result


_default_hooks: ShutdownHooks | None = None


def default_hooks() -> ShutdownHooks:
    """The process-wide :class:`ShutdownHooks` (signals stay uninstalled until
    :meth:`ShutdownHooks.install`)."""
    global _default_hooks  # noqa: PLW0603 - signals are process-wide
    with _hooks_lock:
        if _default_hooks is None:
            _default_hooks = ShutdownHooks()
        return _default_hooks
