"""The control socket's frame checks (transport/socketio/csr.py): pure functions, no network."""

from __future__ import annotations

import pytest
from socketio import packet as sio_packet

from avatar_sdk.transport.socketio.frame_guard import (
    NON_STRING_EVENT,
    UNKNOWN_EVENT,
    engineio_problem,
    malformed,
    sniff_event,
)


@pytest.mark.parametrize(
    ("text", "name", "offset"),
    [
        ('2["conversationEnded",{"n":1111},"17"]', "conversationEnded", "17"),
        ('2["removePeer",{"n":1},"OGx3S-bq_"]', "removePeer", "OGx3S-bq_"),
        ('2["agentRawText",{"n":[[[', "agentRawText", None),  # cut off: no tail
        ('2[ "x" ,{}]trailing', "x", None),
        ('212["withAck",{},"17"]', "withAck", None),  # an ack id: offsets are never appended
        ('2/other,["x",{}]', None, None),  # another namespace: not read
        ("2[17,{}]", None, None),
        ('2["a\\"b",{}]', None, None),  # escapes are not decoded: unknown rather than wrong
        ("0{}", None, None),
        ("", None, None),
    ],
)
def test_sniff_event_reads_name_and_offset(text: str, name: str | None, offset: str | None) -> None:
    assert sniff_event(text) == (name, offset)


def test_sniff_event_is_cheap_on_a_long_frame() -> None:
    text = '2["big",' + "[" * 200_000 + ',"9"]'
    assert sniff_event(text) == ("big", "9")


def _pkt(encoded: str) -> sio_packet.Packet:
    return sio_packet.Packet(encoded_packet=encoded)


@pytest.mark.parametrize(
    ("encoded", "problem"),
    [
        ('2{"a":1}', (UNKNOWN_EVENT, "event payload must be a list, got dict")),
        ('2"x"', (UNKNOWN_EVENT, "event payload must be a list, got str")),
        ("2", (UNKNOWN_EVENT, "event payload must be a list, got NoneType")),
        ("2[]", (UNKNOWN_EVENT, "event without a name")),
        ("2[17]", (NON_STRING_EVENT, "event name is a int")),
        ("3{}", (UNKNOWN_EVENT, "ack payload must be a list, got dict")),
        ('9["x"]', (UNKNOWN_EVENT, "unknown Socket.IO packet type 9")),
        ('2/x,["ev",{}]', ("ev", "EVENT for namespace '/x', never joined")),
        ('4/x,{"message":"no"}', (UNKNOWN_EVENT, "CONNECT_ERROR for namespace '/x', never joined")),
    ],
)
def test_malformed_packets_are_named(encoded: str, problem: tuple[str, str]) -> None:
    assert malformed(_pkt(encoded)) == problem


def test_binary_event_without_attachments_is_malformed() -> None:
    assert malformed(_pkt('5["ev",{}]')) == ("ev", "binary packet without attachments")


@pytest.mark.parametrize(
    "encoded", ['2["ev",{"a":1}]', '2["ev"]', "3[]", "3[1]", '0{"sid":"s"}', "1", '4{"m":1}', "0"]
)
def test_wellformed_packets_pass(encoded: str) -> None:
    assert malformed(_pkt(encoded)) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty Engine.IO frame"),
        ("x", "undecodable Engine.IO frame (ValueError)"),
        ("4" + "[" * 50_000 + "]" * 50_000, "undecodable Engine.IO frame (RecursionError)"),
        ("9hello", "unknown Engine.IO packet type 9"),
        ("3probe", "PONG packet from the server"),
        ("5", "UPGRADE packet from the server"),
        ("ba", "undecodable Engine.IO frame (Error)"),
    ],
)
def test_engineio_problem(text: str, problem: str) -> None:
    assert engineio_problem(text) == problem


@pytest.mark.parametrize("text", ['42["ev",{}]', "2", "1", "6", '0{"sid":"x"}', "4hello"])
def test_engineio_frames_that_decode_pass(text: str) -> None:
    assert engineio_problem(text) is None
