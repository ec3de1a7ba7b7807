// Commands on the WebRTC data channels (server/gateway/webrtc/commands.py): "control" is unordered with
// no retransmission (speed and heartbeats: the latest wins, nothing waits behind a lost packet), "estop" is
// reliable and ordered. Both carry seq (increasing per channel) and sent_t (this clock, s), issue 20 §2; the
// server syncs its clock to this one over "control" ({"type": "sync"}), so it drops what is too old or reordered.
// Attached to the session (session.setCommandChannel): while open, speed and heartbeats go here instead of
// the socket, and an e-stop goes here and on the socket (and over HTTP, controls.js) at once.

import { applyDelta } from "../session.js";

const KEYS_KEPT = 8;  // keyframes kept for patches that name them (the server keeps as many)

function nowMs() {
  return performance.timeOrigin + performance.now();
}

export function openCommandChannels(pc, session) {
  const control = pc.createDataChannel("control", { ordered: false, maxRetransmits: 0 });
  const estop = pc.createDataChannel("estop", { ordered: true });
  const seq = { control: 0, estop: 0 };
  const counts = { control: 0, estop: 0, replies: 0, syncs: 0 };
  const onReply = (e) => {
    if (typeof e.data !== "string") return;
    if (e.data.startsWith('{"type":"sync"')) {
      // the peer's clock sync (server/gateway/webrtc/commands.py): our receive and send times on sent_t's clock
      let msg;
      try { msg = JSON.parse(e.data); } catch { return; }
      const t2 = nowMs() / 1000;
      if (control.readyState === "open") control.send(JSON.stringify({ type: "sync", t1: msg.t1, t2, t3: nowMs() / 1000 }));
      counts.syncs += 1;
      return;
    }
    counts.replies += 1;
    session.deliver(e.data);
  };
  control.onmessage = onReply;
  estop.onmessage = onReply;
  const channel = {
    send(msg) {
      const ch = msg.type === "estop" ? estop : (msg.type === "speed" || msg.type === "heartbeat") ? control : null;
      if (!ch || ch.readyState !== "open") return false;
      const name = ch === estop ? "estop" : "control";
      seq[name] += 1;
      ch.send(JSON.stringify({ ...msg, seq: seq[name], sent_t: nowMs() / 1000 }));
      counts[name] += 1;
      return true;
    },
    get open() {
      return control.readyState === "open" && estop.readyState === "open";
    },
    counts,
    close() {
      if (session.commandChannel === channel) session.setCommandChannel(null);
      control.close();
      estop.close();
    },
  };
  const attach = () => { if (channel.open) session.setCommandChannel(channel); };
  const detach = () => { if (session.commandChannel === channel) session.setCommandChannel(null); };
  control.onopen = estop.onopen = attach;
  control.onclose = estop.onclose = detach;
  return channel;
}

// Telemetry on the "telemetry" data channel (server/gateway/webrtc/telemetry.py), unordered with no retransmission,
// each snapshot one zlib stream (inflated here, so the messages may finish out of order: the session shows the newest by mono_t):
// a lost snapshot stays lost and none waits behind it (TCP's head-of-line blocking made the socket's p99 age on
// 4g 231 ms). Each keyframe is acknowledged ({"type": "key_ack"}) and every patch names the acknowledged keyframe it
// applies to ("base"), so any message that arrives decodes alone. The session shows the newest snapshot of this
// channel and the socket (which drops to 2 Hz while this one delivers: session.setTelemetryChannel).
async function inflate(buf) {
  const stream = new Blob([buf]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Response(stream).text();
}

export function openTelemetryChannel(pc, session) {
  const dc = pc.createDataChannel("telemetry", { ordered: false, maxRetransmits: 0 });
  const keys = new Map();
  const counts = { keyframes: 0, patches: 0, orphans: 0, shown: 0, errors: 0, bytes: 0 };  // bytes: as received
  let subscribed = "";
  const channel = {
    get open() { return dc.readyState === "open"; },
    counts,
    subscribe(sub) {
      const key = JSON.stringify(sub);
      if (!sub || key === subscribed || dc.readyState !== "open") return;
      subscribed = key;
      keys.clear();
      dc.send(JSON.stringify({ type: "subscribe", ...sub }));
    },
    close() { detach(); dc.close(); },
  };
  dc.binaryType = "arraybuffer";
  dc.onmessage = async (e) => {
    counts.bytes += typeof e.data === "string" ? e.data.length : e.data.byteLength;
    let msg;
    try {
      // snapshots come as one zlib stream each (binary), replies as text
      msg = JSON.parse(typeof e.data === "string" ? e.data : await inflate(e.data));
    } catch {
      counts.errors += 1;
      return;
    }
    if (msg.type === "error") {
      counts.errors += 1;
      console.warn("teleop: the telemetry channel refused a message:", msg.error);
      return;
    }
    if (msg.type !== "telemetry") return;
    let snap;
    if (Number.isInteger(msg.key)) {
      keys.set(msg.key, msg.data);
      for (const k of keys.keys()) if (keys.size > KEYS_KEPT) keys.delete(k);
      if (dc.readyState === "open") dc.send(JSON.stringify({ type: "key_ack", key: msg.key }));
      counts.keyframes += 1;
      snap = msg.data;
    } else {
      const base = keys.get(msg.base);
      if (!base) { counts.orphans += 1; return; }
      counts.patches += 1;
      snap = applyDelta(base, msg.data, msg.deleted);
    }
    if (session.deliverSnapshot(snap) !== false) counts.shown += 1;
  };
  const attach = () => { subscribed = ""; session.setTelemetryChannel(channel); channel.subscribe(session.subscription); };
  const detach = () => { if (session.telemetryChannel === channel) session.setTelemetryChannel(null); };
  dc.onopen = attach;
  dc.onclose = detach;
  return channel;
}
