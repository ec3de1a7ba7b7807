// WebRTC transport (server/gateway/webrtc/signalling.py): signalling on /ws/webrtc (same login, same
// rules), one offer with every candidate gathered, the answer; the picture in a <video>; each displayed
// frame reported through requestVideoFrameCallback (its expected display time, and its capture time when
// the server gave the RTP clock); the command data channels attached to the session.
//
//   const t = startWebRtc({ video, session, onFrame, onRate, onFail, onState });
//   t.close(); t.stats()

import { openCommandChannels, openTelemetryChannel } from "./datachannels.js";
import { lagMs } from "./lag.js";
import { wsUrl } from "../api.js";

const CONNECT_TIMEOUT_MS = 8000;   // no connection by then: UDP is probably blocked
const FIRST_FRAME_MS = 10000;
const GATHER_MS = 3000;
const HEALTH_EVERY_MS = 1000;  // this page's own lag, for the server's rate control (video/lag.js)

function signallingUrl() {
  // localStorage "teleop.video.peer" = "aiortc": the bench's plain aiortc sender (server [debug] routes only).
  // Under the page's base path: on a robot's page served by the hub, the hub relays the signalling to the robot
  // (server/hub/dashboard.py) and the media goes browser <-> robot directly.
  const peer = localStorage.getItem("teleop.video.peer") === "aiortc" ? "?peer=aiortc" : "";
  return wsUrl(`/ws/webrtc${peer}`);
}

export function startWebRtc({ video, session, onFrame, onRate = () => {}, onFail, onState = () => {} }) {
  let closed = false;
  let pc = null;
  let channels = null;
  let telemetry = null;   // the "telemetry" data channel (snapshots without head-of-line blocking)
  let receiver = null;
  let rtpOrigin = null;
  let frames = 0;
  let config = null;
  const st = { state: "signalling", codec: null, rate: null, framesDecoded: 0, bytes: 0, rtt: null };
  const ws = new WebSocket(signallingUrl());
  const connectTimer = setTimeout(() => fail("no WebRTC connection within 8 s (UDP blocked?)"), CONNECT_TIMEOUT_MS);
  let frameTimer = null;
  lagMs();  // start measuring now
  const healthTimer = setInterval(() => {
    if (ws.readyState === WebSocket.OPEN && pc) ws.send(JSON.stringify({ type: "health", lag_ms: Math.min(60000, lagMs()) }));
  }, HEALTH_EVERY_MS);

  function fail(why) {
    if (closed) return;
    close();
    onFail(why);
  }

  function onVideoFrame(now, meta) {
    if (closed) return;
    frames += 1;
    clearTimeout(frameTimer);
    frameTimer = null;
    const displayMs = performance.timeOrigin + (meta.expectedDisplayTime || now);
    let captureMs = null;
    if (rtpOrigin !== null && Number.isFinite(meta.rtpTimestamp)) {
      captureMs = (((meta.rtpTimestamp - rtpOrigin) % 2 ** 32) + 2 ** 32) % 2 ** 32 / 90;  // mod 2^32 ticks
    }
    onFrame({ source: video, width: meta.width, height: meta.height, displayMs, captureMsMod: captureMs });
    video.requestVideoFrameCallback(onVideoFrame);
  }

  async function offer() {
    pc = new RTCPeerConnection({ iceServers: config.ice_servers, iceTransportPolicy: config.ice_transport_policy });
    pc.addTransceiver("video", { direction: "recvonly" });
    channels = openCommandChannels(pc, session);
    telemetry = openTelemetryChannel(pc, session);
    pc.ontrack = (e) => {
      receiver = e.receiver;
      try { receiver.jitterBufferTarget = config.jitter_buffer_target_ms; } catch { /* older browser */ }
      video.srcObject = new MediaStream([e.track]);
      video.play().catch(() => {});
      video.requestVideoFrameCallback(onVideoFrame);
    };
    pc.onconnectionstatechange = () => {
      st.state = pc.connectionState;
      onState(st.state);
      if (st.state === "connected") {
        clearTimeout(connectTimer);
        if (!frames) frameTimer = setTimeout(() => fail("WebRTC connected but no picture within 10 s"), FIRST_FRAME_MS);
      } else if (st.state === "failed") {
        fail("the WebRTC connection failed (the path was lost)");
      }
    };
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((resolve) => {
      if (pc.iceGatheringState === "complete") resolve();
      pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === "complete") resolve(); };
      setTimeout(resolve, GATHER_MS);
    });
    // the socket may have closed while ICE gathered (the page leaving, the server gone): its onclose handles that
    if (!closed && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "offer", sdp: pc.localDescription.sdp }));
  }

  ws.onmessage = async (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch { return; }
    if (msg.type === "webrtc_config") {
      config = msg.data;
      offer().catch((err) => fail(`WebRTC offer failed: ${err && err.message}`));
    } else if (msg.type === "answer") {
      st.codec = msg.codec || null;
      try {
        await pc.setRemoteDescription({ type: "answer", sdp: msg.sdp });
      } catch (err) {
        fail(`WebRTC answer refused: ${err && err.message}`);
      }
    } else if (msg.type === "rate") {
      st.rate = msg.data.rate;
      if (Number.isFinite(msg.data.rtp_origin)) rtpOrigin = msg.data.rtp_origin;
      onRate(msg.data);
    } else if (msg.type === "error") {
      fail(`WebRTC refused: ${(msg.error && msg.error.message) || "error"}`);
    }
  };
  ws.onclose = () => { if (!closed) fail("the WebRTC signalling socket closed"); };

  function close() {
    if (closed) return;
    closed = true;
    clearTimeout(connectTimer);
    clearInterval(healthTimer);
    clearTimeout(frameTimer);
    if (channels) channels.close();
    if (telemetry) telemetry.close();
    try { ws.close(1000, "closed"); } catch { /* closing */ }
    if (pc) pc.close();
    video.srcObject = null;
  }

  return {
    close,
    async stats() {
      if (!pc) return { ...st };
      const report = await pc.getStats();
      let pairId = null;
      report.forEach((s) => { if (s.type === "transport" && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId; });
      const pair = pairId ? report.get(pairId) : null;
      // the candidate types of the pair in use ("host", "srflx", "prflx", "relay": a TURN relay)
      st.selectedPair = pair ? { local: (report.get(pair.localCandidateId) || {}).candidateType || null,
        remote: (report.get(pair.remoteCandidateId) || {}).candidateType || null } : null;
      report.forEach((s) => {
        if (s.type === "inbound-rtp" && s.kind === "video") {
          st.framesDecoded = s.framesDecoded;
          st.bytes = s.bytesReceived;
          st.freezeCount = s.freezeCount;
          st.totalFreezesDuration = s.totalFreezesDuration;
          st.jitterBufferMs = s.jitterBufferEmittedCount ? (1000 * s.jitterBufferDelay) / s.jitterBufferEmittedCount : null;
          st.frameWidth = s.frameWidth;
          st.frameHeight = s.frameHeight;
          st.packetsLost = s.packetsLost;
          st.packetsReceived = s.packetsReceived;
        }
      });
      st.channels = channels ? { ...channels.counts, open: channels.open } : null;
      st.telemetry = telemetry ? { ...telemetry.counts, open: telemetry.open } : null;
      return { ...st };
    },
  };
}
