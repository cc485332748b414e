"""Every span, attribute and metric name the telemetry writes, in one place.

Pure data: no OpenTelemetry import. Names follow the OpenTelemetry semantic conventions
**v1.44.0** (the GenAI conventions, status Development) where they define one
(``gen_ai.*``, ``error.type``, ``server.address``, ``server.port``); everything the
conventions do not cover is ours, under ``avatar.*``. Durations are seconds (unit ``s``),
as the conventions say. ``docs/observability.md`` documents each name; a unit test checks
that page against this module.
"""

from __future__ import annotations

from typing import Final

from ..session.core import latency as figures

#: The semantic-conventions version these names follow, and its schema URL.
SEMCONV_VERSION: Final = "1.44.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
#: The instrumentation scope (tracer and meter name).
SCOPE: Final = "avatar_sdk"

# -- spans -------------------------------------------------------------------------------------
SPAN_SESSION: Final = "avatar.session"
SPAN_CONNECT: Final = "avatar.connect"
#: GenAI: an agent invocation span is named ``invoke_agent`` (no agent name is known).
SPAN_TURN: Final = "invoke_agent"
SPAN_RECOVERY: Final = "avatar.recovery"
#: GenAI: ``execute_tool {gen_ai.tool.name}``.
SPAN_TOOL_PREFIX: Final = "execute_tool"
SPAN_FLEET_RUN: Final = "avatar.fleet.run"
SPAN_FLEET_WORKER: Final = "avatar.fleet.worker"
SPAN_FLEET_SESSION: Final = "avatar.fleet.session"

# -- attributes: semantic conventions ----------------------------------------------------------
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
#: Content attributes: written only with ``capture_content=True``.
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

#: ``gen_ai.operation.name`` values (well-known values of the conventions).
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_EXECUTE_TOOL: Final = "execute_tool"
#: ``gen_ai.tool.type``: a client-side tool runs in the application, like a function.
TOOL_TYPE_FUNCTION: Final = "function"

# -- attributes: ours ------------------------------------------------------------------------
MEDIA_MODE: Final = "avatar.media"  # control | audio | audio_video
SESSION_END_REASON: Final = "avatar.session.end_reason"
SESSION_RECOVERIES: Final = "avatar.session.recoveries"
SESSION_TURNS: Final = "avatar.session.turns"
CONNECT_STEP: Final = "avatar.connect.step"  # the last connect step reached
CONNECT_KIND: Final = "avatar.connect.kind"  # initial | cold_reconnect
TURN_SOURCE: Final = "avatar.turn.source"  # speak | voice
#: A turn's figures, named as everywhere else (:mod:`avatar_sdk.session.core.latency`):
#: ``avatar.turn.<figure>``, the same name for the span attribute and the histogram.
TURN_TEXT_LATENCY: Final = f"avatar.turn.{figures.TEXT}"
TURN_AUDIO_LATENCY: Final = f"avatar.turn.{figures.AUDIO}"
TURN_GENERATED_LATENCY: Final = f"avatar.turn.{figures.GENERATED}"
TURN_PLAYED_LATENCY: Final = f"avatar.turn.{figures.PLAYED}"
TURN_VOICE_TO_VOICE: Final = f"avatar.turn.{figures.VOICE_TO_VOICE}"
#: Figure (the ``turn_latency`` event's field) -> its span attribute and histogram.
TURN_FIGURES: Final[dict[str, str]] = {
    figures.TEXT: TURN_TEXT_LATENCY,
    figures.AUDIO: TURN_AUDIO_LATENCY,
    figures.GENERATED: TURN_GENERATED_LATENCY,
    figures.PLAYED: TURN_PLAYED_LATENCY,
    figures.VOICE_TO_VOICE: TURN_VOICE_TO_VOICE,
}
TURN_INTERRUPTED: Final = "avatar.turn.interrupted"
TURN_INTERRUPT_REASON: Final = "avatar.turn.interrupt_reason"
TURN_RESENT: Final = "avatar.turn.resent"
TURN_RESENT_TIER: Final = "avatar.turn.resent_tier"
TURN_HELD: Final = "avatar.turn.held"  # queued during a recovery before it went out
TURN_SPEECH_ID: Final = "avatar.turn.speech_id"
RECOVERY_TIER: Final = "avatar.recovery.tier"  # socket | media | cold
RECOVERY_REASON: Final = "avatar.recovery.reason"
RECOVERY_ATTEMPTS: Final = "avatar.recovery.attempts"
RECOVERY_DURATION: Final = "avatar.recovery.duration"
RECOVERY_OUTCOME: Final = "avatar.recovery.outcome"  # recovered | escalated | gave_up | ended
RECOVERY_CHANNEL: Final = "avatar.recovery.channel"  # asr | stv (media tier)
RECOVERY_METHOD: Final = "avatar.recovery.method"
TOOL_WAITS: Final = "avatar.tool.waits_for_ack"
TOOL_HANDLER_OK: Final = "avatar.tool.handler_ok"
TOOL_ACK_RESULT: Final = "avatar.tool.ack_result"  # ok, timeout, http_error, ...
TOOL_ACK_STATUS: Final = "avatar.tool.ack_status"
FLEET_SESSION_INDEX: Final = "avatar.fleet.session_index"
FLEET_WORKER: Final = "avatar.fleet.worker"
FLEET_ENGINE: Final = "avatar.fleet.engine"
FLEET_SESSIONS: Final = "avatar.fleet.sessions"
FLEET_STATUS: Final = "avatar.fleet.status"

# -- span events -------------------------------------------------------------------------------
EVENT_FIRST_TEXT: Final = "avatar.first_text"
EVENT_RESENT: Final = "avatar.turn_resent"
EVENT_PROTOCOL_ERROR: Final = "avatar.protocol_error"
EVENT_ERROR: Final = "avatar.error"
EVENT_STEP: Final = "avatar.connect_step"

# -- turn-end reasons --------------------------------------------------------------------------
INTERRUPT_BARGE_IN: Final = "barge_in"  # the server cut the answer (agentInterrupted)
INTERRUPT_CALLED: Final = "interrupt"  # the application called interrupt()
INTERRUPT_NEW_TURN: Final = "new_turn"  # the user spoke again before the answer ended
INTERRUPT_SESSION_ENDED: Final = "session_ended"
INTERRUPT_TOOL_SPIRAL: Final = "tool_spiral"

# -- metrics (histograms in seconds, counters of occurrences) ----------------------------------
METRIC_CONNECT_DURATION: Final = "avatar.connect.duration"
METRIC_RECOVERY_DURATION: Final = "avatar.recovery.duration"
#: Reserved for session renewal (not emitted until the SDK renews sessions).
METRIC_RENEWAL_GAP: Final = "avatar.renewal.gap"
METRIC_RECOVERIES: Final = "avatar.recoveries"
METRIC_TURNS_RESENT: Final = "avatar.turns.resent"
METRIC_EVENTS_DROPPED: Final = "avatar.events.dropped"
METRIC_PROTOCOL_ERRORS: Final = "avatar.protocol_errors"
METRIC_ERRORS: Final = "avatar.errors"

#: Histograms: name -> (unit, description).
HISTOGRAMS: Final[dict[str, tuple[str, str]]] = {
    TURN_TEXT_LATENCY: ("s", "Turn written (or the user's speech ended) to the first spoken text"),
    TURN_AUDIO_LATENCY: ("s", "Turn written (or speech ended) to the first audible avatar frame"),
    TURN_GENERATED_LATENCY: ("s", "Turn written (or speech ended) to the answer generated"),
    TURN_PLAYED_LATENCY: ("s", "Turn written (or speech ended) to the answer's voice played"),
    TURN_VOICE_TO_VOICE: ("s", "End of the user's speech to the first audible avatar frame"),
    METRIC_CONNECT_DURATION: ("s", "connect() to a usable session"),
    METRIC_RECOVERY_DURATION: ("s", "From noticing a loss to usable again, per tier"),
}
#: Counters: name -> (unit, description).
COUNTERS: Final[dict[str, tuple[str, str]]] = {
    METRIC_RECOVERIES: ("{recovery}", "Recoveries started, per tier and outcome"),
    METRIC_TURNS_RESENT: ("{turn}", "Turns resent once after a recovery"),
    METRIC_EVENTS_DROPPED: ("{event}", "Events dropped by slow events() consumers"),
    METRIC_PROTOCOL_ERRORS: ("{error}", "Server frames the SDK could not accept"),
    METRIC_ERRORS: ("{error}", "Classified errors, per error.type (ErrorCode)"),
}
#: Histogram bucket boundaries (seconds): voice latencies sit between 0.1 s and a few s.
LATENCY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
