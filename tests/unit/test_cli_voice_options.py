"""``talk --voice``'s options: device choice by index or name, and the usage errors of
options that clash with it (exit 2 before anything is opened)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from avatar_sdk._cli.main import main
from avatar_sdk._cli.voice import device_choice


def test_a_device_is_an_index_when_all_digits_else_a_name() -> None:
    assert device_choice(None) is None and device_choice(" ") is None
    assert device_choice("3") == 3 and device_choice(" 12 ") == 12
    assert device_choice("USB Audio") == "USB Audio" and device_choice("hw:1") == "hw:1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--voice", "--say", "hi"], "--voice talks through the devices: drop --say"),
        (["--voice", "--no-media"], "drop --no-media"),
        (["--voice", "--record", "x.wav"], "drop --record"),
        (["--input", "1"], "--input, --output and --no-echo-cancellation need --voice"),
        (["--no-echo-cancellation"], "need --voice"),
    ],
)
def test_options_that_clash_with_voice_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(
        main, ["talk", "http://127.0.0.1:9", "--insecure", *args], env={"AVATAR_TOKEN": "t"}
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
