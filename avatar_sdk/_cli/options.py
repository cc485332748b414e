"""``--set FIELD=VALUE``: any ``SessionConfig`` field from the command line, checked by
``SessionConfig`` itself (so the rules and messages are the library's), plus
``cold_reconnect.FIELD`` for the cold tier's ``RetryPolicy``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from ..config import RetryPolicy, SessionConfig
from ..errors import AvatarError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


#: The environment variable that holds the token when no ``--token-file`` is given.
TOKEN_ENV = "AVATAR_TOKEN"


def read_token(token_file: Path | None) -> str:
    """The token from ``--token-file`` or ``AVATAR_TOKEN``: never a flag value, which would
    land in the shell history and the process list."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(
                f"cannot read {token_file}: {exc.__class__.__name__}", param_hint="--token-file"
            ) from None
        if not token:
            raise click.BadParameter(f"{token_file} is empty", param_hint="--token-file")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise click.UsageError(f"no token: set {TOKEN_ENV} or pass --token-file FILE")
    return token


class OptionError(ValueError):
    """A ``--set`` item that cannot be applied; the message names the field."""


def _convert(owner: str, name: str, default: Any, text: str) -> Any:
    """``text`` as the type of the field's default (its annotation, in effect)."""
    value = text.strip()
    try:
        if isinstance(default, bool):
            if value.lower() in _TRUE:
                return True
            if value.lower() in _FALSE:
                return False
            raise ValueError
        if default is None or name == "hard_tool_spiral_limit":
            return None if value.lower() in ("none", "") else int(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, tuple):
            return tuple(float(part) for part in value.split(",") if part.strip())
        if isinstance(default, str):
            return value
    except ValueError:
        pass
    kind = "a bool" if isinstance(default, bool) else type(default).__name__
    raise OptionError(f"{owner}.{name}: cannot read {text!r} as {kind}")


def session_config(items: Iterable[str], base: SessionConfig | None = None) -> SessionConfig:
    """``base`` (default ``SessionConfig()``) with every ``FIELD=VALUE`` item applied."""
    config = base or SessionConfig()
    changes: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(SessionConfig)}
    policy_fields = {f.name for f in dataclasses.fields(RetryPolicy)}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise OptionError(f"{item!r}: expected FIELD=VALUE")
        if name.startswith("cold_reconnect."):
            sub = name.removeprefix("cold_reconnect.")
            if sub not in policy_fields:
                raise OptionError(f"unknown RetryPolicy field {sub!r}")
            policy[sub] = _convert("RetryPolicy", sub, getattr(config.cold_reconnect, sub), text)
        elif name in fields and name != "cold_reconnect":
            changes[name] = _convert("SessionConfig", name, getattr(config, name), text)
        else:
            raise OptionError(f"unknown SessionConfig field {name!r}")
    try:
        if policy:
            changes["cold_reconnect"] = dataclasses.replace(config.cold_reconnect, **policy)
        return config.with_(**changes) if changes else config
    except AvatarError as error:
        raise OptionError(error.message) from None
