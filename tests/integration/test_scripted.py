"""ScriptedAvatarSession against the staging avatar-session service, over real HTTP and
WebRTC on loopback: what the avatar says is the audio it was given (checked by its
frequency), in order, cut by interrupt, kept alive, re-subscribed, reclaimed, refused."""

from __future__ import annotations

import asyncio
import io
import logging
import wave
from typing import Any

import av
import numpy as np
import pytest

from avatar_sdk import AvatarError, ErrorCode, ScriptedAvatarSession, ScriptedConfig
from avatar_sdk.scripted import pcm_tone
from avatar_sdk.scripted.audio import encode_mp3
from avatar_sdk.testing import StagingServer
from avatar_sdk.testing.leaks import LeakCheck

from .conftest import until

pytestmark = pytest.mark.asyncio

FAST = ScriptedConfig(media_stall_timeout=1.0, close_timeout=1.0, onset_margin=2.0)


def dominant_frequency(samples: np.ndarray, rate: int = 48_000) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


def to_mono(frame: av.AudioFrame) -> np.ndarray:
    data = frame.to_ndarray()
    if frame.format.is_planar:
        return data[0]
    channels = len(frame.layout.channels)
    return data.reshape(-1, channels)[:, 0]


async def voiced_samples(frames: Any, handle: Any, timeout: float = 10.0) -> np.ndarray:
    """The avatar's voice from its onset until the say finished (frames above a level)."""
    chunks: list[np.ndarray] = []

    async def read() -> None:
        async for frame in frames:
            mono = to_mono(frame)
            if np.sqrt(np.mean(mono.astype(np.float64) ** 2)) > 300:
                chunks.append(mono)
            if handle.finished.done():
                return

    async with asyncio.timeout(timeout):
        await read()
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def scripted(staging: StagingServer, **kwargs: Any) -> ScriptedAvatarSession:
    kwargs.setdefault("allow_insecure_transport", True)
    kwargs.setdefault("config", FAST)
    return ScriptedAvatarSession(
        kwargs.pop("url", staging.agentic_url),
        kwargs.pop("token", staging.admin_token),
        kwargs.pop("visual_id", staging.visual_id),
        **kwargs,
    )


@pytest.mark.parametrize("form", ["mp3", "wav", "pcm", "frames"])
async def test_the_avatar_says_the_tone_it_was_given(
    staging: StagingServer, leak_check: LeakCheck, form: str
) -> None:
    frequency = {"mp3": 440.0, "wav": 660.0, "pcm": 550.0, "frames": 880.0}[form]
    pcm = pcm_tone(frequency, 1.0, rate=16_000 if form == "wav" else 48_000)
    audio: Any
    kwargs: dict[str, Any] = {}
    if form == "mp3":
        audio = encode_mp3(pcm, 48_000)
    elif form == "wav":
        audio = wav_bytes(pcm, 16_000)
    elif form == "pcm":
        audio, kwargs = pcm, {"sample_rate": 48_000}
    else:
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = 48_000
        audio = [frame]
    async with scripted(staging) as session:
        async with session.frames("audio") as frames:
            handle = await session.say(audio, **kwargs)
            assert handle.accepted.done()
            heard = await voiced_samples(frames, handle)
        started = await handle.started
        result = await handle
    assert started is not None and handle.called_at < started < result.at
    assert result.reason == "played" and not result.interrupted
    # On the downlink's arrival times: a loaded machine delays and bunches frames.
    assert 0.6 < result.at - started < 1.8, result.at - started
    assert len(heard) > 0.6 * 48_000
    assert abs(dominant_frequency(heard) - frequency) < 15, dominant_frequency(heard)
    (played,) = staging.scripted.sessions[session.session_id or ""].played
    assert played.turn_id == handle.turn_id and not played.interrupted


async def test_queued_says_start_and_finish_in_order(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        handles = [await session.say(pcm_tone(f, 0.6), sample_rate=48_000) for f in (440, 660, 880)]
        results = [await h for h in handles]
        starts = [await h.started for h in handles]
    assert [r.reason for r in results] == ["played"] * 3
    assert all(s is not None for s in starts)
    times = [t for s, r in zip(starts, results, strict=True) for t in (s, r.at)]
    assert times == sorted(times), times
    played = staging.scripted.sessions[session.session_id or ""].played
    assert [p.turn_id for p in played] == [h.turn_id for h in handles]


async def test_says_made_at_once_are_queued_in_call_order(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        tones = [pcm_tone(f, 0.4) for f in (440, 660, 880)]
        handles = await asyncio.gather(*(session.say(t, sample_rate=48_000) for t in tones))
        results = [await h for h in handles]
    assert [r.reason for r in results] == ["played"] * 3
    assert [r.at for r in results] == sorted(r.at for r in results)
    played = staging.scripted.sessions[session.session_id or ""].played
    assert [p.turn_id for p in played] == [h.turn_id for h in handles]


async def test_interrupt_cuts_the_say_playing(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        handle = await session.say(pcm_tone(440, 5.0), sample_rate=48_000)
        started = await asyncio.wait_for(handle.started, 5)
        assert started is not None
        await session.interrupt()
        result = await asyncio.wait_for(asyncio.shield(handle.finished), 2)
    assert result.interrupted and result.reason == "interrupted"
    assert result.at - started < 4.0
    (played,) = staging.scripted.sessions[session.session_id or ""].played
    assert played.interrupted and played.ended_at - played.started_at < 4.0


async def test_keep_alive_keeps_the_session_past_the_idle_reclaim(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    config = ScriptedConfig(keep_alive_interval=0.25, media_stall_timeout=1.0, close_timeout=1.0)
    async with scripted(staging, config=config) as session:
        staging.scripted.idle_timeout = 2.0  # once started (see the test below)
        backend = staging.scripted.sessions[session.session_id or ""]
        # Past the idle timeout (12 x 0.25 s > 2 s), with only keep-alives: still there.
        assert await until(lambda: backend.keep_alives >= 12, timeout=20)
        assert not backend.ended and session.state == "live"
        handle = await session.say(pcm_tone(440, 0.4), sample_rate=48_000)
        assert (await handle).reason == "played"


async def test_without_keep_alive_the_session_is_reclaimed(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    config = ScriptedConfig(keep_alive_interval=60, media_stall_timeout=1.0, close_timeout=1.0)
    async with scripted(staging, config=config) as session:
        # Shortened once started: a start slowed by load (its subscribe and first frame make
        # no call) must not be reclaimed before it ends.
        staging.scripted.idle_timeout = 0.8
        ended = session.expect("ended", timeout=10)
        event = await ended
        assert event.data["code"] == "session_gone"
        assert session.state == "ended" and session.health().upstream == "failed"
        with pytest.raises(AvatarError) as caught:
            await session.say(pcm_tone(440, 0.2), sample_rate=48_000)
        assert caught.value.code is ErrorCode.CLOSED
    assert staging.scripted.sessions[session.session_id or ""].end_reason == "idle"


async def test_a_reclaimed_session_ends_session_gone_on_its_next_call(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        ended = session.expect("ended", timeout=10)
        assert await staging.faults.reclaim_session(session.session_id) == 1
        event = await ended
        assert event.data["code"] == "session_gone"


async def test_a_killed_whep_peer_is_resubscribed_and_the_voice_resumes(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        recovered = session.expect("media_recovered", timeout=10)
        assert await staging.faults.ice_failure("stv") == 1
        event = await recovered
        assert event.data["method"] == "whep_resubscribe"
        async with session.frames("audio") as frames:
            handle = await session.say(pcm_tone(660, 0.8), sample_rate=48_000)
            heard = await voiced_samples(frames, handle)
        assert (await handle).reason == "played"
        assert abs(dominant_frequency(heard) - 660) < 15
    assert session.resubscribes == 1


async def test_a_say_refused_with_5xx_is_classified_and_not_retried(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        staging.faults.say_refused(503)
        with pytest.raises(AvatarError) as caught:
            await session.say(pcm_tone(440, 0.3), sample_rate=48_000)
        assert caught.value.code is ErrorCode.SERVER_ERROR
        assert [v for v, _ in staging.scripted.requests].count("say-audio") == 1
        handle = await session.say(pcm_tone(440, 0.3), sample_rate=48_000)
        assert (await handle).reason == "played"


async def test_token_expiry_is_announced(staging: StagingServer, leak_check: LeakCheck) -> None:
    # Long enough for a start on a loaded machine: the token's clock runs from create (a
    # fresh-clone run at load 8 found the session gone, WHEP 404, before it subscribed).
    staging.scripted.token_ttl = 10.0
    config = ScriptedConfig(expiry_warning=2.0, media_stall_timeout=1.0, close_timeout=1.0)
    async with scripted(staging, config=config) as session:
        expiring = session.expect("session_expiring", timeout=10)
        event = await expiring
        assert 0 <= event.data["remaining"] <= 2.0
        assert event.data["expires_at"] == session.expires_at
        ended = session.expect("ended", timeout=10)
        assert (await ended).data["code"] == "session_gone"  # the server let it expire


async def test_a_conversation_token_is_refused_with_wrong_token_scope(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    session = scripted(staging, token=staging.token)
    with pytest.raises(AvatarError) as caught:
        await session.start()
    assert caught.value.code is ErrorCode.WRONG_TOKEN_SCOPE
    assert staging.token not in str(caught.value) and staging.token not in repr(caught.value)
    assert session.state == "ended"


async def test_say_text_is_503_and_not_wrapped(staging: StagingServer) -> None:
    import aiohttp  # noqa: PLC0415

    url = staging.agentic_url + "/avatar-session/x/say-text"
    async with aiohttp.ClientSession() as http, http.post(url, json={}) as r:
        assert r.status == 503
    assert not hasattr(ScriptedAvatarSession, "say_text")


async def test_insecure_and_bad_urls_are_refused(staging: StagingServer) -> None:
    with pytest.raises(AvatarError) as caught:
        scripted(staging, allow_insecure_transport=False)
    assert caught.value.code is ErrorCode.INSECURE_TRANSPORT
    for bad in ("", "ftp://x", "not a url", "https://"):
        with pytest.raises(AvatarError) as caught:
            scripted(staging, url=bad)
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT


async def test_a_private_whep_host_is_refused_without_allow_insecure(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    """https agentic URL (so the URL check passes) through a stub that hands a loopback
    WHEP URL: the same host guard as the conversational downlink refuses it."""
    session = scripted(staging, allow_insecure_transport=False, url="https://agentic.example")

    async def fake_post(path: str, what: str, **kwargs: Any) -> Any:
        if what == "create":
            return {"sessionId": "s1", "token": "t" * 20}
        if what == "init-client":
            return {"whepUrl": "https://127.0.0.1:9/rtc/v1/whep/?stream=x"}
        raise AvatarError(ErrorCode.SESSION_GONE, what)

    session._post = fake_post  # type: ignore[method-assign]
    with pytest.raises(AvatarError) as caught:
        await session.start()
    assert caught.value.code is ErrorCode.INSECURE_TRANSPORT


async def test_secrets_stay_out_of_logs_reprs_and_errors(
    staging: StagingServer, leak_check: LeakCheck, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    staging.faults.say_refused(500)
    async with scripted(staging) as session:
        session_token = staging.scripted.sessions[session.session_id or ""].token
        texts = [repr(session), str(session.health())]
        with pytest.raises(AvatarError) as caught:
            await session.say(pcm_tone(440, 0.2), sample_rate=48_000)
        texts += [str(caught.value), repr(caught.value)]
        texts.append(repr(session._created))
    texts += [r.getMessage() for r in caplog.records]
    for secret in (staging.admin_token, session_token):
        assert not any(secret in t for t in texts)


async def test_bad_audio_is_refused_in_bounded_time(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    async with scripted(staging) as session:
        for bad, kwargs in (
            (b"", {}),
            (b"\x00garbage" * 10, {}),
            (np.zeros(100, dtype=np.float32), {"sample_rate": 48_000}),
            (np.zeros(100, dtype=np.int16), {}),
            ("text", {}),
            (pcm_tone(440, 0.2), {"sample_rate": 48_000, "duration": -1}),
        ):
            with pytest.raises(AvatarError) as caught:
                await asyncio.wait_for(session.say(bad, **kwargs), 5)
            assert caught.value.code is ErrorCode.INVALID_ARGUMENT
        assert session.state == "live"


async def test_no_onset_resolves_the_handle_with_a_reason(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    """Silent audio: the avatar never voices it, and the handle resolves anyway."""
    async with scripted(staging) as session:
        handle = await session.say(np.zeros(9600, dtype=np.int16), sample_rate=48_000)
        result = await asyncio.wait_for(asyncio.shield(handle.finished), 6)
        assert result.reason == "no_onset" and await handle.started is None


async def test_a_recording_carries_what_the_avatar_said(
    staging: StagingServer, leak_check: LeakCheck, tmp_path: Any
) -> None:
    path = tmp_path / "avatar.mkv"
    async with scripted(staging) as session:
        recorder = session.record(path)
        await recorder.start()
        handle = await session.say(pcm_tone(660, 1.0), sample_rate=48_000)
        assert (await handle).reason == "played"
        await recorder.stop()
    from avatar_sdk.scripted.audio import decode_pcm  # noqa: PLC0415

    recorded = decode_pcm(path.read_bytes())
    loud = recorded[np.abs(recorded) > 2000]
    assert len(loud) > 0.3 * 48_000
    window = recorded[np.argmax(np.abs(recorded) > 2000) :][: 48_000 // 2]
    assert abs(dominant_frequency(window) - 660) < 15


async def test_staging_serve_speaks_the_avatar_session_protocol() -> None:
    """``avatar-sdk staging serve`` hands out the agentic URL, admin token and visual id;
    the say fault is driven over its HTTP control API."""
    import json  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import aiohttp  # noqa: PLC0415

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "avatar_sdk._cli", "staging", "serve", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        info = json.loads(await asyncio.wait_for(proc.stdout.readline(), 20))
        session = ScriptedAvatarSession(
            info["agentic_url"], info["admin_token"], info["visual_id"],
            allow_insecure_transport=True, config=FAST,
        )  # fmt: skip
        async with session:
            async with aiohttp.ClientSession() as http:
                url = f"{info['url']}/_control/faults/say_refused"
                async with http.post(url, json={"status": 502}) as resp:
                    assert resp.status == 200
            with pytest.raises(AvatarError) as caught:
                await session.say(pcm_tone(440, 0.3), sample_rate=48_000)
            assert caught.value.code is ErrorCode.SERVER_ERROR
            handle = await session.say(pcm_tone(440, 0.3), sample_rate=48_000)
            assert (await handle).reason == "played"
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 130
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_404_on_a_call_ends_the_session_gone(
    staging: StagingServer, leak_check: LeakCheck
) -> None:
    """The server forgot the session (its peers still up): the next call's 404 ends it."""
    async with scripted(staging) as session:
        staging.scripted.sessions[session.session_id or ""].ended = True
        ended = session.expect("ended", timeout=5)
        with pytest.raises(AvatarError) as caught:
            await session.keep_alive()
        assert caught.value.code is ErrorCode.SESSION_GONE
        assert (await ended).data["code"] == "session_gone"
        assert session.health().upstream == "failed"
