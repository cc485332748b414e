"""The plugin's leak failure names every leaked item: a leaked live session is about a dozen,
and a cap of 10 once dropped the socket's read loop from the message in no fixed order (a
flake of test_pytest_plugin under load)."""

from __future__ import annotations

from avatar_sdk.testing.pytest_plugin import LEAKS_NAMED, leak_message


def test_a_leaked_sessions_dozen_items_are_all_named() -> None:
    leaks = [f"item-{n:02d}" for n in range(12)]
    message = leak_message(leaks)
    assert message.startswith("the avatar session leaked after close(): ")
    assert all(item in message for item in leaks)
    assert "more" not in message


def test_past_the_cap_it_says_how_many_more() -> None:
    leaks = [f"item-{n:02d}" for n in range(LEAKS_NAMED + 5)]
    message = leak_message(leaks)
    assert f"item-{LEAKS_NAMED - 1:02d}" in message
    assert f"item-{LEAKS_NAMED:02d}" not in message
    assert message.endswith("; and 5 more")
