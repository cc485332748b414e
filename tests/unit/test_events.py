"""The event bus (no network): subscriptions that start at call time, one-shot expectations,
closed buses and timeouts, and the typed event list kept in step with the source."""

from __future__ import annotations

import ast
import asyncio
import typing
from pathlib import Path
from typing import Any

import pytest

import avatar_sdk
from avatar_sdk import AvatarError, ErrorCode, EventName
from avatar_sdk.events.bus import Event, EventBus, EventSource
from avatar_sdk.events.names import PAYLOADS

from ..conftest import until

SOURCE = Path(avatar_sdk.__file__).parent


# -- subscription at call time -----------------------------------------------------------------
async def test_events_iterator_sees_an_event_emitted_before_its_first_anext() -> None:
    bus = EventBus()
    stream = bus.events("x")
    bus.emit("x", {"v": 1})  # between the call and the first __anext__
    event = await asyncio.wait_for(anext(stream), 1)
    assert event.data == {"v": 1}
    await stream.aclose()


async def test_expect_registers_at_once_and_awaits_later() -> None:
    bus = EventBus()
    waiter = bus.expect("x")
    bus.emit("x", {"v": 1})
    event = await asyncio.wait_for(waiter, 1)
    assert event.name == "x" and event.data == {"v": 1}
    assert waiter.done()
    assert await waiter is event  # awaiting again gives the same event


async def test_wait_for_registers_at_call_time() -> None:
    bus = EventBus()
    waiting = bus.wait_for("x", timeout=1)
    bus.emit("x", {"v": 2})
    assert (await waiting).data == {"v": 2}


async def test_wait_for_still_makes_a_task() -> None:
    bus = EventBus()
    task = asyncio.create_task(bus.wait_for("x", timeout=1))  # a coroutine, as before
    bus.emit("x")
    assert (await task).name == "x"


# -- closed buses ------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["aclose", "close_streams"])
async def test_wait_for_and_expect_on_a_closed_bus_fail_at_once(how: str) -> None:
    bus = EventBus()
    if how == "aclose":
        await bus.aclose()
    else:
        bus.close_streams()
    # "At once" is the exception itself: a waiter that waited would end in wait_for's
    # TimeoutError, not AvatarError(CLOSED); no wall-clock bound needed.
    with pytest.raises(AvatarError) as caught:
        await asyncio.wait_for(bus.wait_for("x"), 1)
    assert caught.value.code is ErrorCode.CLOSED
    assert "'x'" in str(caught.value)
    with pytest.raises(AvatarError) as caught:
        await asyncio.wait_for(bus.expect("x"), 1)
    assert caught.value.code is ErrorCode.CLOSED


async def test_pending_waiters_fail_with_closed_when_the_bus_closes() -> None:
    bus = EventBus()
    waiter = bus.expect("x")
    waiting = bus.wait_for("y")  # registered now, awaited below
    await bus.aclose()
    for pending in (waiter, waiting):
        with pytest.raises(AvatarError) as caught:
            await asyncio.wait_for(pending, 1)
        assert caught.value.code is ErrorCode.CLOSED


async def test_events_iterator_of_a_closed_bus_ends_after_draining() -> None:
    bus = EventBus()
    stream = bus.events()
    bus.emit("a")
    bus.close_streams()
    assert [e.name async for e in stream] == ["a"]
    with pytest.raises(AvatarError) as closed:  # a new stream would be over at once
        bus.events()
    assert closed.value.code is ErrorCode.CLOSED


# -- timeouts ----------------------------------------------------------------------------------
async def test_timeout_names_the_event() -> None:
    bus = EventBus()
    with pytest.raises(TimeoutError, match=r"no 'reconnected' event within 0\.05s"):
        await bus.wait_for("reconnected", timeout=0.05)
    waiter = bus.expect("reconnected", timeout=0.05)
    with pytest.raises(TimeoutError, match=r"no 'reconnected' event within 0\.05s"):
        await waiter


async def test_expect_timeout_counts_from_creation() -> None:
    bus = EventBus()
    waiter = bus.expect("x", timeout=0.05)
    assert await until(waiter.done, 2)  # the deadline passes while nobody awaits it
    with pytest.raises(TimeoutError):
        await waiter
    bus.emit("x")  # too late: nothing is registered any more
    assert not bus.waiters


# -- expect details ----------------------------------------------------------------------------
async def test_expect_predicate_and_cancel() -> None:
    bus = EventBus()
    waiter = bus.expect("x", predicate=lambda e: e.data.get("v") == 2)
    bus.emit("x", {"v": 1})
    assert not waiter.done()
    bus.emit("x", {"v": 2})
    assert (await waiter).data == {"v": 2}

    cancelled = bus.expect("x")
    assert cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert not bus.waiters


async def test_cancelling_the_awaiting_task_unregisters_the_waiter() -> None:
    bus = EventBus()
    task = asyncio.ensure_future(bus.wait_for("x"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not bus.waiters


# -- iterator lifetime -------------------------------------------------------------------------
async def test_events_iterator_unregisters_on_aclose_and_when_dropped() -> None:
    bus = EventBus()
    stream = bus.events("x")
    assert len(bus.subscribers) == 1
    await stream.aclose()
    assert not bus.subscribers
    with pytest.raises(StopAsyncIteration):
        await anext(stream)

    async def first() -> str:
        async for event in bus.events():
            return event.name  # no aclose(): dropping the iterator unsubscribes it
        return ""

    task = asyncio.ensure_future(first())
    await asyncio.sleep(0)
    assert len(bus.subscribers) == 1
    bus.emit("x")
    assert await task == "x"
    assert not bus.subscribers

    async with bus.events() as scoped:
        bus.emit("y")
        assert (await anext(scoped)).name == "y"
    assert not bus.subscribers


async def test_events_iterator_keeps_the_newest_events_up_to_its_cap() -> None:
    bus = EventBus()
    stream = bus.events(cap=2)
    for name in ("a", "b", "c"):
        bus.emit(name)
    bus.close_streams()
    assert [e.name async for e in stream] == ["events_dropped", "b", "c"]
    assert stream.dropped == 1


async def test_cancelled_anext_leaves_the_iterator_usable() -> None:
    bus = EventBus()
    stream = bus.events()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), 0.01)
    bus.emit("later")
    assert (await asyncio.wait_for(anext(stream), 1)).name == "later"
    await stream.aclose()


# -- typed names -------------------------------------------------------------------------------
async def test_event_names_are_accepted_as_enum_or_string() -> None:
    bus = EventBus()
    seen: list[Event] = []
    bus.on(EventName.RECONNECTED, seen.append)
    stream = bus.events(EventName.RECONNECTED)
    waiter = bus.expect(EventName.RECONNECTED)
    waiting = bus.wait_for(EventName.RECONNECTED, timeout=1)
    event = bus.emit(EventName.RECONNECTED, {"tier": "socket"})
    assert type(event.name) is str and event.name == "reconnected"
    assert seen == [event]
    assert await waiter is event
    assert await waiting is event
    assert await anext(stream) is event
    await stream.aclose()


def test_every_event_name_has_a_payload_type() -> None:
    assert set(PAYLOADS) == set(EventName)
    for name in EventName:
        assert typing.is_typeddict(PAYLOADS[name]), name


def _emitted(tree: ast.AST) -> list[tuple[str, ast.expr | None, int]]:
    """(name, payload expression, line) of every literal event emitted in ``tree``: calls to
    ``emit``/``_emit`` with a literal name, and the ``("name", {...})`` pairs that views
    return for the session to emit."""
    found: list[tuple[str, ast.expr | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("emit", "_emit") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    payload = node.args[1] if len(node.args) > 1 else None
                    found.append((first.value, payload, node.lineno))
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
            first, payload = node.elts
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and isinstance(payload, ast.Dict)
            ):
                found.append((first.value, payload, node.lineno))
    return found


def _sdk_sources() -> list[Path]:
    # The staging server (testing/) emits Socket.IO wire events, not SDK events.
    return [p for p in sorted(SOURCE.rglob("*.py")) if "testing" not in p.relative_to(SOURCE).parts]


def test_every_emitted_event_is_an_event_name_with_matching_payload_keys() -> None:
    names = {str(n) for n in EventName}
    seen: set[str] = set()
    problems: list[str] = []
    for path in _sdk_sources():
        for name, payload, line in _emitted(ast.parse(path.read_text(), str(path))):
            where = f"{path.relative_to(SOURCE.parent)}:{line}"
            seen.add(name)
            if name not in names:
                problems.append(f"{where}: {name!r} is not in EventName")
                continue
            if not isinstance(payload, ast.Dict) or None in payload.keys:
                continue  # built elsewhere or spread: only literal payloads are checked here
            keys = {str(k.value) for k in payload.keys if isinstance(k, ast.Constant)}
            typed: Any = PAYLOADS[EventName(name)]
            allowed = typed.__required_keys__ | typed.__optional_keys__
            if not keys <= allowed or not typed.__required_keys__ <= keys:
                problems.append(f"{where}: {name!r} keys {sorted(keys)} vs {sorted(allowed)}")
    assert not problems, "\n".join(problems)
    assert len(seen) >= 30, seen  # the scan itself still finds the emitters


def test_event_name_is_exported() -> None:
    assert "EventName" in avatar_sdk.__all__
    assert EventName("reconnected") == "reconnected"


def test_wait_for_made_outside_a_loop_registers_when_run() -> None:
    bus = EventBus()
    waiting = bus.wait_for("x", timeout=0.01)  # no loop yet: it can only register once it runs
    with pytest.raises(TimeoutError, match="no 'x' event"):
        asyncio.run(waiting)


def test_every_event_name_is_documented() -> None:
    # The reference part of the page is generated from the code when the site is built.
    from tools.docgen import expand  # noqa: PLC0415 - the docs tooling, only for this test

    docs = expand((Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text())
    missing = [str(n) for n in EventName if f"`{n}`" not in docs]
    assert not missing


# -- a consumer that falls behind (issue 12, defect 5) ----------------------------------------
async def test_a_stream_that_fell_behind_is_told_where_and_how_many_it_lost() -> None:
    bus = EventBus()
    stream = bus.events(cap=3)
    for i in range(10):
        bus.emit("tick", {"i": i})
    gap = await anext(stream)
    assert gap.name == "events_dropped" and gap.data == {"count": 7, "total": 7}
    assert (await anext(stream)).data["i"] == 7
    for i in range(10, 15):  # queue [8, 9] + 5 more, cap 3: 8, 9, 10, 11 are lost
        bus.emit("tick", {"i": i})
    gap = await anext(stream)
    assert gap.data == {"count": 4, "total": 11}
    bus.close_streams()
    assert [e.data["i"] async for e in stream] == [12, 13, 14]
    assert stream.dropped == 11


async def test_the_gap_notice_reaches_a_filtered_stream_and_counts_per_bus() -> None:
    bus = EventBus()
    small = bus.events("tick", cap=2)
    large = bus.events(cap=100)
    for i in range(5):
        bus.emit("tick", {"i": i})
    bus.emit("other")  # filtered out of `small`: neither queued nor dropped there
    bus.close_streams()
    assert [e.name async for e in small] == ["events_dropped", "tick", "tick"]
    assert small.dropped == 3 and large.dropped == 0
    assert bus.dropped == 3  # the total across every stream of the bus


async def test_a_bus_counts_the_drops_of_its_configured_bound() -> None:
    """The session's ``stats()["events_dropped"]`` reads this count (the session-level
    check: ``tests/unit/test_session_stats.py``)."""
    bus = EventBus()
    bus.configure(queue_size=2)
    assert bus.dropped == 0
    stream = bus.events()  # the configured default bound
    for _ in range(5):
        bus.emit("tick")
    assert bus.dropped == 3 == stream.dropped
    await stream.aclose()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
async def test_a_bad_queue_bound_is_an_invalid_argument(bad: Any) -> None:
    with pytest.raises(AvatarError) as info:
        EventSource().events(max_queue=bad)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
