"""Client-side tools: per-turn de-duplication, fused-call recovery, argument validation and
pending acknowledgements (PROTOCOL.md §3.6). Pure: the session does the dispatching."""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .wire import ToolCall, canonical_json

#: An acknowledgement older than this is stale: the brain stopped waiting long ago.
ACK_MAX_AGE: Final = 600.0
#: At most this many acknowledgements are remembered (oldest forgotten first).
MAX_PENDING_ACKS: Final = 256


class ToolTracker:
    """What a turn has already dispatched, and argument blobs waiting for their names.

    When a brain calls several tools at once, one ``tool`` segment may carry every call's
    arguments back to back but name only the last tool; the following ``tool_response``
    segments echo every name in call order, which is how the unnamed blobs are attributed.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._fused: deque[Mapping[str, Any]] = deque(maxlen=64)
        self._names: set[str] = set()

    def on_speech_start(self, is_new_turn: bool) -> None:
        # The fused queue belongs to one sub-turn; de-duplication to a whole user turn.
        self._fused.clear()
        self._names.clear()
        if is_new_turn:
            self._seen.clear()

    def on_tool(self, call: ToolCall) -> ToolCall | None:
        """The call to dispatch, or None for a repeat within the turn."""
        self._fused.extend(call.fused_args)
        key = call.dedup_key
        if key in self._seen:
            return None
        self._seen.add(key)
        self._names.add(call.name)
        return call

    def on_tool_response(self, name: str) -> ToolCall | None:
        """A recovered fused call for ``name``, if a blob is waiting and ``name`` is new."""
        if not self._fused or name in self._names:
            return None
        args = self._fused.popleft()
        self._names.add(name)
        call = ToolCall(
            name=name,
            args=args,
            fused_args=(),
            raw=f"{name} {canonical_json(args)}",
            call_id=None,
            wait_for_response=False,
            tool_type=None,
        )
        self._seen.add(call.dedup_key)
        return call


@dataclass(frozen=True, slots=True)
class PendingAck:
    name: str
    at: float
    generation: int


class PendingAcks:
    """Tool calls that wait for ``respond_to_tool``; bounded and aged."""

    def __init__(self) -> None:
        self._acks: OrderedDict[str, PendingAck] = OrderedDict()
        self.generation = 0

    def add(self, call_id: str, name: str, now: float) -> None:
        self._acks[call_id] = PendingAck(name, now, self.generation)
        while len(self._acks) > MAX_PENDING_ACKS:
            self._acks.popitem(last=False)

    def take(self, call_id: str, now: float) -> PendingAck | None:
        """The pending call, or None if unknown or stale (it is forgotten either way)."""
        ack = self._acks.pop(call_id, None)
        if ack is None or now - ack.at > ACK_MAX_AGE:
            return None
        return ack

    def restore(self, call_id: str, ack: PendingAck) -> None:
        """Put a call back after a failed delivery, so a retry can still answer it."""
        self._acks[call_id] = ack

    def rebuilt(self) -> None:
        """A new server session: nobody is waiting for the old session's answers."""
        self._acks.clear()
        self.generation += 1

    def __len__(self) -> int:
        return len(self._acks)


_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Errors of ``value`` against a JSON-Schema subset (type, enum, required, properties,
    additionalProperties, items, minimum/maximum, minLength/maxLength). Empty when valid."""
    errors: list[str] = []
    expected = schema.get("type")
    if expected is not None and not _type_ok(value, expected):
        return [f"{path}: expected {expected}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                errors.append(f"{path}: missing required {key!r}")
        for key, item in value.items():
            if key in properties:
                errors += validate(item, properties[key], f"{path}.{key}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected property {key!r}")
    if isinstance(value, list | tuple) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{index}]")
    if _is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
    return errors


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_ok(value: Any, expected: Any) -> bool:
    if isinstance(expected, list):
        return any(_type_ok(value, e) for e in expected)
    if expected == "number":
        return _is_number(value) and math.isfinite(float(value))
    if expected == "integer":
        return _is_number(value) and float(value).is_integer()
    kinds = _TYPES.get(str(expected))
    return (
        kinds is not None
        and isinstance(value, kinds)
        and not (expected != "boolean" and isinstance(value, bool))
    )
