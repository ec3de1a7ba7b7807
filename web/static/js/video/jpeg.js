// JPEG over the websocket (/ws/video, docs/video.md): one frame in flight, acked once the <img> has
// decoded it, so a slow or hidden page gets fewer, fresh frames instead of a backlog. For LAN, scripts and
// browsers without WebRTC or WebCodecs. A hidden tab holds its ack until it is visible again.

const decoder = new TextDecoder();

/** Split one binary message into its JSON header and the payload (JPEG, or H.264 NAL units). */
export function parseFrame(buffer) {
  const view = new DataView(buffer);
  const n = view.getUint32(0, false);
  const header = JSON.parse(decoder.decode(new Uint8Array(buffer, 4, n)));
  return { header, jpeg: new Uint8Array(buffer, 4 + n) };
}

export function startJpeg({ img, url, onFrame, onText, onClose }) {
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  let closed = false;
  let shownUrl = null;
  let heldAck = null;
  const st = { frames: 0, errors: 0, bytes: 0, revoked: 0, created: 0 };

  function revoke() {
    if (shownUrl) { URL.revokeObjectURL(shownUrl); st.revoked += 1; }
    shownUrl = null;
  }

  function ack(seq) {
    if (document.hidden) { heldAck = seq; return; }  // no credit back while nobody watches
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "ack", seq }));
  }

  function onVisibility() {
    if (!document.hidden && heldAck != null) { const s = heldAck; heldAck = null; ack(s); }
  }

  function onBinary(buffer) {
    let header;
    let jpeg;
    try {
      ({ header, jpeg } = parseFrame(buffer));
    } catch {
      st.errors += 1;
      onText({ type: "error", error: { message: "Bad video frame from the server" } });
      return;
    }
    st.bytes += jpeg.length;
    revoke();
    const objectUrl = URL.createObjectURL(new Blob([jpeg], { type: "image/jpeg" }));
    st.created += 1;
    shownUrl = objectUrl;
    img.src = objectUrl;
    const done = (ok) => {
      if (shownUrl === objectUrl) revoke(); // the decoded picture stays on screen
      if (closed) return;
      if (ok) {
        st.frames += 1;
        onFrame({ source: img, width: header.width, height: header.height,
          displayMs: performance.timeOrigin + performance.now(), captureMs: header.mono_t * 1000, header });
      } else {
        st.errors += 1;
      }
      ack(header.seq); // a frame that failed to decode must not stall the stream
    };
    img.decode().then(() => done(true), () => done(false));
  }

  ws.onopen = () => onText({ type: "open" });
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      try { onText(JSON.parse(ev.data)); } catch { /* not JSON */ }
    } else {
      onBinary(ev.data);
    }
  };
  ws.onclose = () => {
    document.removeEventListener("visibilitychange", onVisibility);
    if (!closed) onClose();
  };
  document.addEventListener("visibilitychange", onVisibility);

  return {
    close() {
      closed = true;
      document.removeEventListener("visibilitychange", onVisibility);
      try { ws.close(1000, "closed"); } catch { /* closing */ }
      revoke();
    },
    stats: async () => ({ ...st }),
  };
}
