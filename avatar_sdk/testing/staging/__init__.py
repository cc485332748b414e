"""The staging backend: a protocol-faithful conversation backend for tests, in parts.

:mod:`.server` (``StagingServer``) assembles it and hands each part only the state it
uses (the narrow protocols of :mod:`.state`): the conversations (:mod:`.conversation`),
their scripted brain (:mod:`.brain`, :mod:`.vad`), the fault switches (:mod:`.faults`),
the media peers (:mod:`.media`, :mod:`.asr_peer`, :mod:`.rtc_util`, :mod:`.packet_loss`),
the avatar-session service (:mod:`.scripted`), the genie chat endpoint (:mod:`.converse`),
the HTTP control API (:mod:`.control`) and the Socket.IO server with connection-state
recovery (:mod:`.csr_server`, :mod:`.silence`). Import the public names from
:mod:`avatar_sdk.testing`.
"""
