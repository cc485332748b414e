"""A client-side tool: the agent asks the app to open a filing, the app does it and answers.

The handler is registered with a JSON Schema: a call whose arguments do not match it never
reaches the handler (a ``tool_call_invalid`` event says why instead). A tool the agent
waits for carries a ``call_id``; ``respond_to_tool`` sends the result back.

Run it as is against the embedded staging backend (its brain is scripted to call the
tool)::

    .venv/bin/python examples/tool_handler.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from avatar_sdk import AvatarSession, Event
from avatar_sdk.testing import StagingServer
from avatar_sdk.wire.segments import SPOKEN_TYPES

OPEN_FILING_SCHEMA = {
    "type": "object",
    "properties": {"doc": {"type": "string", "enum": ["10-K", "10-Q", "8-K"]}},
    "required": ["doc"],
    "additionalProperties": False,
}


def install_tools(session: AvatarSession) -> None:
    """Register the app's tools on ``session``."""

    async def open_filing(args: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
        result = {"doc": args["doc"], "pages": 112, "opened": True}  # the app's real work here
        if call["call_id"]:  # the agent waits for the result
            ack = await session.respond_to_tool(call["call_id"], result)
            print(f"[tool] acknowledged {call['call_id']}: {ack['reason']}")
        return result  # also reported as a tool_call_result event

    session.on_tool_call("open_filing", open_filing, schema=OPEN_FILING_SCHEMA)
    session.on("tool_call", lambda e: print(f"[tool] {e.data['name']} {e.data['args']}"))
    session.on("tool_call_invalid", lambda e: print(f"[tool] refused: {e.data['errors']}"))


async def ask(session: AvatarSession, question: str, words: list[str], then: str) -> None:
    """Speak ``question``; print the answer once the turn and the ``then`` event are in."""
    words.clear()
    answered = session.expect("agent_turn_ended", timeout=30)  # registered before speaking
    handled = session.expect(then, timeout=30)
    print("you:   ", question)
    await session.speak(question)
    await answered
    await handled
    print("avatar:", "".join(words).strip())


async def main() -> None:
    async with StagingServer() as staging:
        session = AvatarSession(
            staging.url, staging.token, genie_url=staging.genie_url, media=False,
            allow_insecure_transport=True,
        )  # fmt: skip
        install_tools(session)
        words: list[str] = []

        def say(event: Event) -> None:
            if event.data.get("spoken", event.data["type"] in SPOKEN_TYPES):
                words.append(event.data["content"])

        session.on("agent_text", say)
        greeting = session.expect("agent_turn_ended", timeout=30)
        async with session:
            await greeting
            # The scripted agent: a valid call it waits for, then one with a bad argument.
            staging.brain.tool_calls(['open_filing {"doc": "10-K"}'], then="Opened the 10-K.",
                                     wait_for_response=True)  # fmt: skip
            staging.brain.tool_calls(['open_filing {"doc": "annual"}'], then="Let me retry.")
            await ask(session, "Open the annual report.", words, then="tool_call_result")
            await ask(session, "And the other one?", words, then="tool_call_invalid")
        print(f"the backend received {len(staging.tool_responses)} tool response(s)")


if __name__ == "__main__":
    asyncio.run(main())
