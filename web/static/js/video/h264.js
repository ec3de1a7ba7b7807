// H.264 over the websocket (server/gateway/video/h264_ws.py): /ws/video?codec=h264, each frame's NAL units
// after 4-byte lengths, decoded with WebCodecs onto a <canvas>; acked once decoded (the server's window
// and rate control run on the acks). WebCodecs needs a secure context (https, or http on localhost).
//
//   h264Available() → {ok, why}
//   const t = startH264({ canvas, onFrame, onText, onFail }); t.close(); t.stats()

import { parseFrame } from "./jpeg.js";
import { lagMs } from "./lag.js";

export async function h264Available() {
  if (!window.isSecureContext) return { ok: false, why: "H.264 over the websocket needs a secure context (https or localhost)" };
  if (typeof VideoDecoder === "undefined") return { ok: false, why: "this browser has no WebCodecs VideoDecoder" };
  try {
    const r = await VideoDecoder.isConfigSupported({ codec: "avc1.42E01F", optimizeForLatency: true });
    if (!r.supported) return { ok: false, why: "this browser cannot decode H.264 baseline with WebCodecs" };
  } catch (err) {
    return { ok: false, why: `WebCodecs: ${err && err.message}` };
  }
  return { ok: true, why: "" };
}

function units(view) {
  const out = [];
  let i = 0;
  while (i + 4 <= view.length) {
    const n = ((view[i] << 24) | (view[i + 1] << 16) | (view[i + 2] << 8) | view[i + 3]) >>> 0;
    out.push(view.subarray(i + 4, i + 4 + n));
    i += 4 + n;
  }
  return out;
}

/** avcC (ISO 14496-15) from an SPS and a PPS. */
function avcC(sps, pps) {
  const out = new Uint8Array(11 + sps.length + pps.length);
  out.set([1, sps[1], sps[2], sps[3], 0xff, 0xe1, sps.length >> 8, sps.length & 0xff], 0);
  out.set(sps, 8);
  out.set([1, pps.length >> 8, pps.length & 0xff], 8 + sps.length);
  out.set(pps, 11 + sps.length);
  return out;
}

function hex2(b) {
  return b.toString(16).padStart(2, "0");
}

export function startH264({ canvas, onFrame, onText, onFail }) {
  const ctx = canvas.getContext("2d");
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}/ws/video?codec=h264`);
  ws.binaryType = "arraybuffer";
  let closed = false;
  let configured = "";
  let waitingKey = true;
  const pending = new Map();     // timestamp → header
  const st = { frames: 0, errors: 0, keyframes: 0, bytes: 0, rate: null };
  const decoder = new VideoDecoder({
    output(frame) {
      const header = pending.get(frame.timestamp);
      pending.delete(frame.timestamp);
      if (canvas.width !== frame.displayWidth || canvas.height !== frame.displayHeight) {
        canvas.width = frame.displayWidth;
        canvas.height = frame.displayHeight;
      }
      ctx.drawImage(frame, 0, 0);
      frame.close();
      st.frames += 1;
      if (header) {
        onFrame({ source: canvas, width: canvas.width, height: canvas.height, displayMs: performance.timeOrigin + performance.now(),
          captureMs: header.mono_t * 1000, header });
        ack(header.seq, performance.now() - header.arrivedAt);
      }
    },
    error(err) {
      st.errors += 1;
      configured = "";
      waitingKey = true;
      if (st.errors > 20) fail(`H.264 decoding keeps failing: ${err && err.message}`);
    },
  });

  function fail(why) {
    if (closed) return;
    close();
    onFail(why);
  }

  // hold_ms: how long this page held the frame (arrival → decoded); lag_ms: how late its event loop runs.
  // The server's rate control takes both out of the round trip (a starved browser is not a full path).
  function ack(seq, holdMs) {
    if (ws.readyState !== WebSocket.OPEN) return;
    ws.send(JSON.stringify({ type: "ack", seq, hold_ms: Math.min(60000, Math.max(0, Math.round(holdMs))),
      lag_ms: Math.min(60000, lagMs()) }));
  }

  function onBinary(buf) {
    const arrivedAt = performance.now();
    let header;
    let body;
    try {
      ({ header, jpeg: body } = parseFrame(buf));
    } catch {
      st.errors += 1;
      return;
    }
    st.bytes += body.length;
    const nals = units(body);
    if (header.keyframe) {
      const sps = nals.find((u) => (u[0] & 0x1f) === 7);
      const pps = nals.find((u) => (u[0] & 0x1f) === 8);
      if (sps && pps) {
        const codec = `avc1.${hex2(sps[1])}${hex2(sps[2])}${hex2(sps[3])}`;
        const key = `${codec}/${header.width}x${header.height}/${sps.join(",")}`;
        if (key !== configured || decoder.state !== "configured") {
          decoder.configure({ codec, description: avcC(sps, pps), optimizeForLatency: true });
          configured = key;
        }
      }
      waitingKey = false;
      st.keyframes += 1;
    }
    header.arrivedAt = arrivedAt;
    if (waitingKey || decoder.state !== "configured") {
      ack(header.seq, performance.now() - arrivedAt);
      return;
    }
    const ts = Math.round(header.mono_t * 1e6);
    pending.set(ts, header);
    if (pending.size > 64) pending.delete(pending.keys().next().value);
    decoder.decode(new EncodedVideoChunk({ type: header.keyframe ? "key" : "delta", timestamp: ts, data: body }));
  }

  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      let msg;
      try { msg = JSON.parse(ev.data); } catch { return; }
      if (msg.type === "rate") st.rate = msg.data;
      onText(msg);
    } else {
      onBinary(ev.data);
    }
  };
  ws.onclose = () => { if (!closed) fail("the H.264 video socket closed"); };

  function close() {
    if (closed) return;
    closed = true;
    try { ws.close(1000, "closed"); } catch { /* closing */ }
    try { decoder.close(); } catch { /* closed */ }
  }

  return { close, stats: async () => ({ ...st }) };
}
