// The project's own browser client of the staging backend (PROTOCOL.md §1-§2): Socket.IO
// control plane, ASR uplink over the socket (the fake microphone), STV downlink over WHEP.
// The browser's own RTCPeerConnection; no code from the service's reference client.
// A dropped socket: recovered in place by socket.io-client (connection-state recovery), else
// the session is opened again on the reconnected socket, same thread (PROTOCOL.md §4.2, §4.4).
// Driven by tests/browser/test_browser_client.py through window.client.
"use strict";

const seen = [];          // every inbound event: [name, payload]
const waiters = [];       // {name, resolve}
const state = {
  videoFrames: 0, videoWidth: 0, asrIce: "new", stvIce: "new", socketId: null,
  recovered: null, reconnects: 0, rebuilds: 0, threadId: null, openedAt: 0, errors: [],
};
let socket = null;
let asr = null;
let stv = null;
let room = null;
let mic = null;
let token = null;
let counting = false;     // one frame counter on the <video>, whichever stream it shows

function log(line) { document.getElementById("log").textContent += line + "\n"; }

function onEvent(name, payload) {
  seen.push([name, payload]);
  if (name === "agent_raw_text" && !state.threadId) {
    // The thread rides the first turn's first delta (§3.4); every later join sends it.
    try { state.threadId = JSON.parse(payload.delta).threadId || null; } catch { /* not JSON */ }
  }
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

async function connectAsr() {
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
  state.videoFrames = 0;  // frames decoded on this subscription
  if (!counting) {
    counting = true;
    const count = () => {
      state.videoFrames += 1;
      state.videoWidth = video.videoWidth;
      video.requestVideoFrameCallback(count);
    };
    video.requestVideoFrameCallback(count);
  }
}

// PROTOCOL.md §2 from the join on: the first connect, and the cold rebuild (§4.4) on the
// reconnected socket (a new server session, the same thread).
async function open() {
  const mark = seen.length;
  state.openedAt = mark;
  room = randId(12);
  const thread = state.threadId ? { threadId: state.threadId } : {};
  socket.emit("join", {
    room, channel: room, userAgent: navigator.userAgent, userAgentHints: null,
    kaltura: { ...thread, ks: token, force_experience: "avatar_only", capabilities: { avatar: "on", generate_followup_questions: "on" } },
  });
  await Promise.all([next("clientConfiguration", 5000, mark), next("joinComplete", 20000, mark)]);
  socket.emit("stvNewSession", { room_id: room });
  socket.emit("checkAvailability", {});
  const session = await next("stvNewSession", 30000, mark);
  await next("showAgent", 10000, mark);
  await next("askPermissions", 10000, mark);
  await connectAsr();
  await connectStv(session.webrtc_url);
  socket.emit("approvedPermissions", { room });
  return session.webrtc_url;
}

// The old server session is gone with its media: close both peers, release the WHEP
// resource (the server may have done it already), open the session again.
async function rebuild() {
  asr?.close();
  stv?.close();
  if (state.whepLocation) fetch(state.whepLocation, { method: "DELETE" }).catch(() => {});
  await open();
  state.rebuilds += 1;
  log("rebuilt cold");
}

function onConnect() {
  const again = state.socketId !== null;
  state.socketId = socket.id;
  state.recovered = socket.recovered;
  if (!again) return;
  state.reconnects += 1;
  log(socket.recovered ? "recovered in place" : "recovery refused: rebuilding");
  if (!socket.recovered) rebuild().catch((err) => state.errors.push(`rebuild: ${err}`));
}

window.client = {
  state, seen,
  // PROTOCOL.md §2: the connect sequence, events in the order the service expects them.
  async connect(url, key) {
    token = key;
    mic = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true }, video: false,
    });
    socket = io(url, {
      path: "/socket.io", transports: ["websocket"], reconnection: true, reconnectionAttempts: 5,
      auth: { token }, query: { partnerId: "", billed_client: "", stickyId: randId(16), level: "published", debugMode: true },
    });
    socket.onAny(onEvent);
    socket.on("connect", onConnect);
    socket.on("asr-ice-candidate", (c) => {
      asr?.addIceCandidate({ candidate: c.candidate, sdpMLineIndex: c.sdpMLineIndex ?? 0 }).catch(() => {});
    });
    await next("onServerConnected", 10000);
    const webrtcUrl = await open();
    log("connected");
    return webrtcUrl;
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
