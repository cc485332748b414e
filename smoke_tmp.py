import asyncio, time, logging, sys
from avatar_sdk import AvatarSession, SessionConfig
from avatar_sdk.media import ToneSource
from avatar_sdk.testing import NetworkLab
import os
CFG = SessionConfig(overall_connect_timeout=10.0, asr_timeout=5.0, media_recovery_timeout=5.0, watch_network=os.environ.get("WATCH","1")=="1")
async def main(kind):
    async with NetworkLab() as lab, lab.staging() as staging:
        with lab.client():
            t=time.monotonic()
            async with AvatarSession(staging.url, staging.token, audio=ToneSource(), allow_insecure_transport=True, config=CFG) as s:
                evs=[]
                for n in ("reconnecting","reconnected","media_recovering","media_recovered","network_changed","turn_resent", "state_changed"):
                    s.on(n, lambda e: evs.append((round(time.monotonic()-t0,2), e.name, {k: v for k, v in e.data.items() if k in ("tier","channel","reason","detail","state","method","duration")})))
                w = s.expect("agent_turn_ended", timeout=10)
                await s.speak("hello")
                await w
                t0=time.monotonic()
                if kind == "addr":
                    await lab.change_address()
                elif kind == "flap":
                    await lab.flap(float(sys.argv[2]))
                elif kind == "reset":
                    f = await lab.reject("tcp"); await asyncio.sleep(float(sys.argv[2])); await f.off()
                elif kind == "icmp":
                    f = await lab.reject("udp"); await asyncio.sleep(float(sys.argv[2])); await f.off()
                else:
                    f = await lab.blackhole(protocol=kind); await asyncio.sleep(float(sys.argv[2])); await f.off()
                w = s.expect("agent_turn_ended", timeout=40)
                await s.speak("again")
                await w
                print("turn 2 ok", round(time.monotonic()-t0,2), s.state)
                for i in range(200):
                    if s.state == "connected": break
                    await asyncio.sleep(0.1)
                print("settled", round(time.monotonic()-t0,2), s.state)
                for e in evs: print(e)
if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
