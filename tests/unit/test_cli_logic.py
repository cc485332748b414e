"""The CLI's pure parts: the exit-code contract, ``--set`` parsing, the spoken filter, and
the printer's plain output."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from avatar_sdk import ErrorCode, Event, RetryPolicy, SessionConfig
from avatar_sdk._cli import exits
from avatar_sdk._cli.options import OptionError, session_config
from avatar_sdk._cli.output import ConversationPrinter, Screen, is_spoken, seconds
from avatar_sdk.errors import AvatarError


@pytest.mark.parametrize(
    ("ended", "code"),
    [
        ({"reason": "closed", "code": None}, exits.OK),
        ({"reason": "idle_timeout", "code": None}, exits.OK),
        ({"reason": "conversation_ended", "code": "server_ended"}, exits.SERVER_ENDED),
        ({"reason": "io server disconnect", "code": "server_ended"}, exits.SERVER_ENDED),
        ({"reason": "agent_crashed", "code": "agent_crashed"}, exits.SERVER_ENDED),
        ({"reason": "peer_removed", "code": "peer_removed"}, exits.SERVER_ENDED),
        ({"reason": "gave_up", "code": "agent_timeout"}, exits.GAVE_UP),
        ({"reason": "gave_up", "code": "gave_up"}, exits.GAVE_UP),
        ({"reason": "gave_up", "code": "auth_failed"}, exits.REFUSED),  # a refusal stays one
        ({"reason": "auth_failed", "code": "auth_failed"}, exits.REFUSED),
        ({"reason": "tls_failed", "code": "tls_failed"}, exits.REFUSED),
        ({"reason": "connect failed", "code": "capacity_unavailable"}, exits.CAPACITY),
        ({"reason": "internal", "code": "internal"}, exits.REFUSED),
        ({"reason": "x", "code": "transport_closed"}, exits.GAVE_UP),
        ({"reason": "x", "code": "not-a-code"}, exits.SERVER_ENDED),
    ],
)
def test_exit_code_of_each_ending(ended: dict[str, object], code: int) -> None:
    assert exits.for_ending(ended) == code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ErrorCode.AUTH_FAILED, exits.REFUSED),
        (ErrorCode.TIER_EXCEEDED, exits.REFUSED),
        (ErrorCode.INSECURE_TRANSPORT, exits.REFUSED),
        (ErrorCode.INVALID_ARGUMENT, exits.USAGE),
        (ErrorCode.CAPACITY_UNAVAILABLE, exits.CAPACITY),
        (ErrorCode.CONNECT_TIMEOUT, exits.GAVE_UP),
        (ErrorCode.TRANSPORT_CLOSED, exits.GAVE_UP),
        (ErrorCode.SERVER_ENDED, exits.SERVER_ENDED),
    ],
)
def test_exit_code_of_a_connect_error(error: ErrorCode, code: int) -> None:
    assert exits.for_error(AvatarError(error)) == code


def test_the_epilog_lists_every_code_once() -> None:
    text = exits.epilog()
    assert text.startswith("\b\n")
    assert [int(line.split()[0]) for line in text.splitlines()[2:]] == [0, 2, 3, 4, 5, 6, 7, 130]


def test_set_reads_each_field_type() -> None:
    config = session_config(
        [
            "close_timeout=1.5",
            "max_reconnect_attempts=3",
            "handle_signals=yes",
            "hard_tool_spiral_limit=none",
            "capacity_backoff=0.1, 0.2",
            "cold_reconnect.max_attempts=2",
            "cold_reconnect.jitter=none",
        ]
    )
    assert config.close_timeout == 1.5 and config.max_reconnect_attempts == 3
    assert config.handle_signals is True and config.hard_tool_spiral_limit is None
    assert config.capacity_backoff == (0.1, 0.2)
    assert config.cold_reconnect == RetryPolicy(max_attempts=2, jitter="none")
    assert session_config([]) == SessionConfig()
    assert session_config(["hard_tool_spiral_limit=7"]).hard_tool_spiral_limit == 7


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("close_timeout", "expected FIELD=VALUE"),
        ("closetimeout=1", "unknown SessionConfig field 'closetimeout'"),
        ("cold_reconnect=1", "unknown SessionConfig field 'cold_reconnect'"),
        ("cold_reconnect.tries=1", "unknown RetryPolicy field 'tries'"),
        ("close_timeout=soon", "SessionConfig.close_timeout: cannot read 'soon' as float"),
        ("handle_signals=maybe", "cannot read 'maybe' as a bool"),
        ("close_timeout=-1", "close_timeout must be a finite number >= 0"),
        ("cold_reconnect.max_attempts=0", "max_attempts must be an int >= 1"),
    ],
)
def test_set_refuses_with_the_field_named(item: str, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        session_config([item])


def test_spoken_prefers_the_flag_then_the_type() -> None:
    assert is_spoken({"type": "avatar"}) and is_spoken({"type": "text"})
    assert is_spoken({"type": "avatar-filler"})
    assert not any(is_spoken({"type": t}) for t in ("tool", "tool_response", "think"))
    assert not is_spoken({"type": "avatar", "spoken": False})
    assert is_spoken({"type": "custom", "spoken": True})


def test_seconds_for_people() -> None:
    assert seconds(0.1524) == "152 ms" and seconds(2.314) == "2.31 s" and seconds(None) == "?"


def _event(event_name: str, **data: object) -> Event:
    return Event(event_name, dict(data), 0.0)


def test_printer_streams_what_the_avatar_says_on_its_own_lines() -> None:
    out = io.StringIO()
    printer = ConversationPrinter(Screen(out), start=0.0)
    assert not Screen(out).styled  # not a terminal: plain text
    for event in [
        _event("agent_speech_started", is_new_turn=True),
        _event("agent_text", type="think", content=""),
        _event("agent_text", type="tool", content='open_filing {"doc": "10-K"}'),
        _event("tool_call", name="open_filing", args={"doc": "10-K"}),
        _event("agent_text", type="tool_response", content="open_filing responded with size 2"),
        _event("agent_text", type="avatar", content="Opened"),
        _event("agent_text", type="avatar", content=" the filing."),
        _event("reconnecting", tier="cold", attempt=1, max_attempts=6, reason="drop"),
        _event("reconnected", tier="cold", recovered=False, duration=0.42),
        _event("agent_speech_started", is_new_turn=True),
        _event("agent_text", type="avatar", content="Hello again."),
        _event("agent_speech_started", is_new_turn=True),  # the next answer: a new line
        _event("agent_text", type="avatar", content=" Next."),
        _event("agent_turn_ended"),
    ]:
        printer.on_event(event)
    assert out.getvalue().splitlines() == [
        '[tool open_filing {"doc": "10-K"}]',
        "avatar: Opened the filing.",
        "[reconnecting: cold tier, attempt 1/6 (drop)]",
        "[reconnected: cold tier in 420 ms (new server session)]",
        "avatar: Hello again.",
        "avatar: Next.",
    ]
    assert printer.turns == ["Opened the filing.", "Hello again.", "Next."]
    assert "responded" not in out.getvalue() and "\x1b[" not in out.getvalue()


def test_plain_table_aligns_columns() -> None:
    out = io.StringIO()
    Screen(out).table("t", ["a", "bb"], [["xxx", "y"]])
    assert out.getvalue().splitlines() == ["t", "a    bb", "---  --", "xxx  y"]


def test_docs_list_the_same_exit_codes_as_the_help() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    rows = [f"| {code} | {meaning} |" for code, meaning in exits.TABLE]
    assert all(row in text for row in rows), "docs/cli.md: paste the exit-code table"


def test_netlab_without_its_requirements_says_what_and_how(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``avatar-sdk netlab`` where the lab cannot run: exit 3, the missing part and its fix,
    before anything is made."""
    from click.testing import CliRunner  # noqa: PLC0415

    from avatar_sdk._cli.main import main  # noqa: PLC0415
    from avatar_sdk.testing import netlab  # noqa: PLC0415

    monkeypatch.setattr(
        netlab, "requirements", lambda: "the network lab needs:\n  - root; fix: run as root"
    )
    result = CliRunner().invoke(main, ["netlab", "--loss", "5", "--", "true"])
    assert result.exit_code == 3
    assert "the network lab needs" in result.output and "run as root" in result.output
