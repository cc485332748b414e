"""Scripted conversations: a YAML or JSON file of steps turned into a scenario function.

::

    name: recovery under load
    steps:
      - say: Hello!
      - pause: 0.5
      - fault: drop_socket            # POST /_control/faults/drop_socket on the staging API
        args: {recovery: true}
        sessions: [0]                 # which session indices fire it (default: [0] only)
      - expect: reconnected           # the next such event, registered before the fault
        where: {tier: socket}
        timeout: 10
      - say: Still there?

The file is checked against :data:`SCHEMA` with jsonschema (the same library the SDK uses
for tool arguments) so a typo fails before any session starts, naming the step. Staging
faults hit the whole backend, hence one session fires a fault by default while every
session may ``expect`` its effect. An ``expect`` step is registered when the step before
it starts, so an event caused by that step is never missed. Every duration is finite and
at most :data:`MAX_SECONDS` (a day): ``pause: .inf`` is a typo, not a plan (jsonschema has
no finiteness keyword; :func:`_finite` adds one for NaN, which passes every comparison).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from ..errors import AvatarError, ErrorCode
from .context import Scenario, ScenarioContext

if TYPE_CHECKING:
    from ..events.bus import Expectation
    from ..session.facade import AvatarSession

__all__ = ["SCHEMA", "load_script", "parse_script", "script_scenario"]

#: The longest pause or timeout a script may ask for (seconds).
MAX_SECONDS = 86400.0
_INDICES = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_TIMEOUT = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SECONDS, "finite": True}
_PAUSE = {"type": "number", "minimum": 0, "maximum": MAX_SECONDS, "finite": True}
#: An ``expect`` step's default deadline (seconds from when it is registered).
EXPECT_TIMEOUT = 30.0

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["steps"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "steps": {
            "type": "array",
            "minItems": 1,
            "items": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["say"],
                        "additionalProperties": False,
                        "properties": {
                            "say": {"type": "string", "minLength": 1},
                            "timeout": _TIMEOUT,
                        },
                    },
                    {
                        "type": "object",
                        "required": ["pause"],
                        "additionalProperties": False,
                        "properties": {"pause": _PAUSE},
                    },
                    {
                        "type": "object",
                        "required": ["fault"],
                        "additionalProperties": False,
                        "properties": {
                            "fault": {"type": "string", "pattern": "^[a-z_][a-z0-9_]*$"},
                            "args": {"type": "object"},
                            "sessions": _INDICES,
                        },
                    },
                    {
                        "type": "object",
                        "required": ["expect"],
                        "additionalProperties": False,
                        "properties": {
                            "expect": {"type": "string", "minLength": 1},
                            "where": {"type": "object"},
                            "timeout": _TIMEOUT,
                            "sessions": _INDICES,
                        },
                    },
                ]
            },
        },
    },
}


def _finite(
    validator: Any, wanted: bool, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """The ``finite`` keyword: a NaN (an infinity already fails ``maximum``)."""
    if wanted and isinstance(instance, float) and math.isnan(instance):
        yield jsonschema.ValidationError(f"{instance!r} is not a finite number")


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, {"finite": _finite}
)
_VALIDATOR = _Validator(SCHEMA)
#: The key that names a step's kind, and a validator of that kind of step alone.
_KINDS = ("say", "pause", "fault", "expect")
_BRANCHES = {
    branch["required"][0]: _Validator(branch)
    for branch in SCHEMA["properties"]["steps"]["items"]["oneOf"]
}


def _where(error: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "the top level"


def parse_script(data: Any, *, source: str = "script") -> dict[str, Any]:
    """``data`` checked against :data:`SCHEMA`; ``AvatarError(INVALID_ARGUMENT)`` names
    the first offending step and what is wrong with it."""
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        if error.validator == "oneOf" and isinstance(error.instance, Mapping):
            kinds = [k for k in _KINDS if k in error.instance]
            message = (
                f"a step needs exactly one of {', '.join(_KINDS)} with its own options"
                if len(kinds) != 1
                else _step_error(error.instance, kinds[0])
            )
        else:
            message = error.message
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{source}: {_where(error)}: {message}")
    from ..events.names import EventName  # noqa: PLC0415

    known = {str(n) for n in EventName}
    for index, step in enumerate(data["steps"]):
        name = step.get("expect")
        if name is not None and name not in known:
            raise AvatarError(
                ErrorCode.INVALID_ARGUMENT, f"{source}: steps[{index}]: unknown event {name!r}"
            )
    return dict(data)


def _step_error(step: Mapping[str, Any], kind: str) -> str:
    """The one error of a step whose kind is known (oneOf's own message names no branch)."""
    found = jsonschema.exceptions.best_match(_BRANCHES[kind].iter_errors(step))
    return found.message if found is not None else "invalid step"


def load_script(path: str | Path) -> Scenario:
    """The scenario of a ``.yaml``/``.yml``/``.json`` script file."""
    file = Path(path)
    shown = file.name
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"cannot read script {shown}: {type(exc).__name__}"
        ) from None
    try:
        if file.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml  # noqa: PLC0415 - only scripts need it

            data = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's subclasses
        raise AvatarError(ErrorCode.INVALID_ARGUMENT, f"{shown}: not valid: {exc}") from None
    except Exception as exc:  # yaml.YAMLError is not a ValueError
        raise AvatarError(
            ErrorCode.INVALID_ARGUMENT, f"{shown}: not valid YAML: {type(exc).__name__}: {exc}"
        ) from None
    return script_scenario(parse_script(data, source=shown))


def script_scenario(script: Mapping[str, Any]) -> Scenario:
    """A scenario function running ``script``'s steps (already checked)."""
    steps: Sequence[Mapping[str, Any]] = list(script["steps"])

    def applies(step: Mapping[str, Any], index: int, default: Sequence[int] | None) -> bool:
        chosen = step.get("sessions", default)
        return chosen is None or index in chosen

    async def scenario(session: AvatarSession, ctx: ScenarioContext) -> None:
        waiting: dict[int, Expectation] = {}

        def expectation(step: Mapping[str, Any]) -> Expectation:
            timeout = float(step.get("timeout", EXPECT_TIMEOUT))
            return ctx.expectation(step["expect"], timeout=timeout, where=step.get("where"))

        try:
            for position, step in enumerate(steps):
                if "expect" in step:
                    waiter = waiting.pop(position, None)
                    if waiter is None and position == 0 and applies(step, ctx.index, None):
                        waiter = expectation(step)
                    if waiter is not None:
                        await waiter
                    continue
                # register the expectations that follow, before the step that causes them
                for ahead in range(position + 1, len(steps)):
                    nxt = steps[ahead]
                    if "expect" not in nxt:
                        break
                    if applies(nxt, ctx.index, None):
                        waiting[ahead] = expectation(nxt)
                if "say" in step:
                    await ctx.turn(step["say"], timeout=step.get("timeout"))
                elif "pause" in step:
                    await ctx.pause(float(step["pause"]))
                elif "fault" in step and applies(step, ctx.index, (0,)):
                    await ctx.fault(step["fault"], **dict(step.get("args") or {}))
        finally:
            for waiter in waiting.values():
                waiter.cancel()

    scenario.__qualname__ = scenario.__name__ = f"script:{script.get('name', 'unnamed')}"
    return scenario
