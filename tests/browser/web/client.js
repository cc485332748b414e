// The project's own browser client of the staging backend (PROTOCOL.md §1-§2): Socket.IO
// control plane, ASR uplink over the socket (the fake microphone), STV downlink over WHEP.
// The browser's own RTCPeerConnection; no code from the service's reference client.
// Driven by tests/browser/test_browser_client.py through window.client.
"use strict";

const seen = [];          // every inbound event: [name, payload]
const waiters = [];       // {name, resolve}
const state = {
  videoFrames: 0, videoWidth: 0, asrIce: "new", stvIce: "new", socketId: null,
  recovered: null, errors: [],
};
let socket = null;
let asr = null;
let stv = null;
let room = null;

function log(line) { document.getElementById("log").textContent += line + "\n"; }

function onEvent(name, payload) {
  seen.push([name, payload]);
  for (const w of waiters.slice()) {
    if (w.name === name) { waiters.splice(waiters.indexOf(w), 1); w.resolve(payload); }
  }
}

// The next `name` not yet taken (from `since`, an index into `seen`), within `ms`.
function next(name, ms, since = 0) {
  const found = seen.slice(since).find(([n]) => n === name);
  if (found) return Promise.resolve(found[1]);
  return new Promise((resolve, reject) => {
    const w = { name, resolve };
    waiters.push(w);
    setTimeout(() => {
      const i = waiters.indexOf(w);
      if (i >= 0) { waiters.splice(i, 1); reject(new Error(`timed out waiting for ${name}`)); }
    }, ms);
  });
}

function randId(n) {
  const abc = "abcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from({ length: n }, () => abc[Math.floor(Math.random() * abc.length)]).join("");
}

async function gathered(pc, ms) {
  if (pc.iceGatheringState === "complete") return;
  await new Promise((resolve) => {
    const done = () => { if (pc.iceGatheringState === "complete") resolve(); };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, ms);
  });
}

async function connectAsr(mic) {
  const mark = seen.length;
  socket.emit("asr-webrtc-init", { sessionId: socket.id });
  await next("asr-webrtc-ready", 30000, mark);
  asr = new RTCPeerConnection({ iceServers: [], iceTransportPolicy: "all", bundlePolicy: "max-bundle" });
  for (const track of mic.getAudioTracks()) asr.addTrack(track, mic);
  asr.onicecandidate = (e) => {
    if (e.candidate) socket.emit("asr-webrtc-ice-candidate", { candidate: e.candidate.toJSON() });
  };
  asr.oniceconnectionstatechange = () => { state.asrIce = asr.iceConnectionState; };
  await offerAsr(false);
}

async function offerAsr(isReconnect) {
  const offer = await asr.createOffer();
  await asr.setLocalDescription(offer);
  const mark = seen.length;
  socket.emit("asr-webrtc-offer", { offer: { type: offer.type, sdp: offer.sdp }, is_reconnect: isReconnect });
  const { answer } = await next("asr-webrtc-answer", 30000, mark);
  await asr.setRemoteDescription(answer);
}

async function connectStv(url) {
  stv = new RTCPeerConnection({ iceServers: [], bundlePolicy: "max-bundle" });
  stv.addTransceiver("video", { direction: "recvonly" });
  stv.addTransceiver("audio", { direction: "recvonly" });
  stv.oniceconnectionstatechange = () => { state.stvIce = stv.iceConnectionState; };
  const video = document.getElementById("avatar");
  const playing = new Promise((resolve) => {
    stv.ontrack = (e) => {
      if (video.srcObject !== e.streams[0]) {
        video.srcObject = e.streams[0];
        video.play().catch((err) => state.errors.push(`play: ${err}`));
      }
      resolve();
    };
  });
  await stv.setLocalDescription(await stv.createOffer());
  await gathered(stv, 2000);  // the staging's WHEP takes no trickle
  const reply = await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/sdp" }, body: stv.localDescription.sdp,
  });
  if (reply.status !== 201) throw new Error(`WHEP ${reply.status}: ${await reply.text()}`);
  state.whepLocation = new URL(reply.headers.get("Location"), url).href;
  await stv.setRemoteDescription({ type: "answer", sdp: await reply.text() });
  await playing;
  const count = () => {
    state.videoFrames += 1;
    state.videoWidth = video.videoWidth;
    video.requestVideoFrameCallback(count);
  };
  video.requestVideoFrameCallback(count);
}

window.client = {
  state, seen,
  // PROTOCOL.md §2: the connect sequence, events in the order the service expects them.
  async connect(url, token) {
    const mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true }, video: false,
    });
    room = randId(12);
    socket = io(url, {
      path: "/socket.io", transports: ["websocket"], reconnection: true, reconnectionAttempts: 5,
      auth: { token }, query: { partnerId: "", billed_client: "", stickyId: randId(16), level: "published", debugMode: true },
    });
    socket.onAny(onEvent);
    socket.on("connect", () => { state.socketId = socket.id; state.recovered = socket.recovered; });
    socket.on("asr-ice-candidate", (c) => {
      asr?.addIceCandidate({ candidate: c.candidate, sdpMLineIndex: c.sdpMLineIndex ?? 0 }).catch(() => {});
    });
    await next("onServerConnected", 10000);
    socket.emit("join", {
      room, channel: room, userAgent: navigator.userAgent, userAgentHints: null,
      kaltura: { ks: token, force_experience: "avatar_only", capabilities: { avatar: "on", generate_followup_questions: "on" } },
    });
    await Promise.all([next("clientConfiguration", 5000), next("joinComplete", 20000)]);
    socket.emit("stvNewSession", { room_id: room });
    socket.emit("checkAvailability", {});
    const session = await next("stvNewSession", 30000);
    await next("showAgent", 10000);
    await next("askPermissions", 10000);
    await connectAsr(mic);
    await connectStv(session.webrtc_url);
    socket.emit("approvedPermissions", { room });
    log("connected");
    return session.webrtc_url;
  },
  // A typed turn; resolves with the avatar's answer (stvFinishedTalking's agentContent).
  async say(text) {
    const mark = seen.length;
    socket.emit("onTextEntered", { text, isFinal: true });
    return (await next("stvFinishedTalking", 20000, mark)).agentContent;
  },
  next,
  // The avatar's voice as the browser plays it: the inbound audio's energy so far.
  async voice() {
    let energy = 0, samples = 0;
    (await stv.getStats()).forEach((r) => {
      if (r.type === "inbound-rtp" && r.kind === "audio") { energy = r.totalAudioEnergy; samples = r.totalSamplesReceived; }
    });
    const video = document.getElementById("avatar");
    return { energy, samples, paused: video.paused, muted: video.muted, time: video.currentTime };
  },
  async uplinkSent() {
    let packets = 0;
    (await asr.getStats()).forEach((r) => { if (r.type === "outbound-rtp") packets = r.packetsSent; });
    return packets;
  },
  // The browser's own ICE restart of the uplink, signalled as the service expects (§1.2).
  async restartIce() {
    asr.restartIce();
    await offerAsr(true);
  },
};
