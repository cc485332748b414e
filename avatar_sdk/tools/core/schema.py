"""Argument schemas of client-side tools (PROTOCOL.md §3.6), pure.

Arguments are validated with the ``jsonschema`` library against the schema a handler was
registered with; the schema itself is checked (and compiled) once, at registration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

import referencing
import referencing.jsonschema
from jsonschema import Draft7Validator, Draft202012Validator, TypeChecker, validators
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing.exceptions import Unresolvable

from ...errors import AvatarError, ErrorCode
from ...wire.errors import preview

#: At most this many schema errors are reported for one call (the rest are counted).
MAX_SCHEMA_ERRORS: Final = 20
#: Longest single error message: messages quote the offending value, which the brain wrote.
_MESSAGE_LIMIT: Final = 200
#: Keys whose values are data, not subschemas: a ``"$ref"`` inside them is not a reference.
_DATA_KEYS: Final = frozenset({"enum", "const", "default", "examples"})


class ArgsSchema:
    """A client-side tool's argument schema, checked and compiled once at registration.

    Full JSON Schema via the ``jsonschema`` library: the draft named by ``$schema``
    (2020-12 when absent). Two deliberate departures from a stock validator: ``number``
    must be finite (Python's ``json`` reads ``NaN``/``Infinity``, JSON has neither), and
    ``$ref`` never leaves the schema (no remote retrieval: a tool call must not make the
    SDK fetch URLs). ``format`` is an annotation, as the specification's default.
    """

    __slots__ = ("_validator",)

    def __init__(self, tool: str, schema: Mapping[str, Any]) -> None:
        """Raises ``AvatarError(INVALID_ARGUMENT)`` naming what is wrong with ``schema``."""
        contents = _plain_json(tool, schema)
        dialect = contents.get("$schema")
        if dialect is not None and not isinstance(dialect, str):
            raise _bad_schema(tool, "$schema must be a string")
        cls = validators.validator_for(contents, default=Draft202012Validator)
        # validator_for falls back to the default for an unknown $schema; asking with two
        # different defaults tells a known dialect from a typo without private tables.
        if dialect is not None and cls is not validators.validator_for(
            contents, default=Draft7Validator
        ):
            raise _bad_schema(tool, f"unknown $schema {preview(dialect)}")
        try:
            cls.check_schema(contents)
        except SchemaError as exc:
            raise _bad_schema(tool, f"at {exc.json_path}: {_cut(exc.message)}") from None
        _check_refs(tool, contents)
        self._validator = _finite_numbers(cls)(contents, registry=referencing.Registry())

    def errors(self, args: Any) -> list[str]:
        """Readable errors of ``args`` (``"<json path>: <message>"``); empty when valid."""
        try:
            found = sorted(self._validator.iter_errors(args), key=lambda e: e.json_path)
        except Unresolvable as exc:  # a $ref under a nested $id, only resolvable now
            return [f"$: schema $ref {preview(str(exc.ref))} cannot be resolved"]
        errors = [f"{e.json_path}: {_cut(e.message)}" for e in found[:MAX_SCHEMA_ERRORS]]
        if len(found) > MAX_SCHEMA_ERRORS:
            errors.append(f"$: {len(found) - MAX_SCHEMA_ERRORS} more error(s)")
        return errors


def _bad_schema(tool: str, detail: str) -> AvatarError:
    return AvatarError(
        ErrorCode.INVALID_ARGUMENT, f"schema of tool {preview(tool)} is invalid: {detail}"
    )


def _cut(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


def _plain_json(tool: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A private plain-JSON copy: later changes to the caller's dict cannot alter a
    checked schema, and mappings of any kind become the dicts the validator expects."""
    if not isinstance(schema, Mapping):
        raise _bad_schema(tool, f"must be a mapping, not {type(schema).__name__}")

    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return dict(value)
        raise TypeError(f"{type(value).__name__} is not JSON")

    try:
        copied: dict[str, Any] = json.loads(json.dumps(schema, default=plain, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _bad_schema(tool, f"not JSON ({_cut(str(exc))})") from None
    return copied


def _check_refs(tool: str, schema: dict[str, Any]) -> None:
    """Every ``$ref`` outside nested ``$id`` scopes must resolve within the schema itself
    (a dangling or remote reference would fail every call, so it fails registration)."""
    resource = referencing.Resource.from_contents(
        schema, default_specification=referencing.jsonschema.DRAFT202012
    )
    resolver = referencing.Registry().resolver_with_root(resource)

    def walk(node: Any, root: bool) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, False)
        if not isinstance(node, dict) or (not root and isinstance(node.get("$id"), str)):
            return  # a nested $id re-bases its references: left to validation time
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                raise _bad_schema(tool, f"$ref {preview(ref)} cannot be resolved") from None
        for key, value in node.items():
            if key not in _DATA_KEYS:
                walk(value, False)

    walk(schema, True)


@cache
def _finite_numbers(cls: type[Validator]) -> type[Validator]:
    """``cls`` whose ``number`` type excludes NaN and the infinities."""

    def is_finite_number(checker: TypeChecker, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        # An int is finite however large (float() of a huge int would overflow).
        return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))

    checker = cls.TYPE_CHECKER.redefine("number", is_finite_number)
    # types-jsonschema leaves extend() untyped; it returns a validator class like create().
    extended: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
        cls, type_checker=checker
    )
    return extended
