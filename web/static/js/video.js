// Video panel: camera frames from /ws/video into an <img>, one frame in flight.
//
// Wire format (docs/video.md): each binary message is a 4-byte big-endian header
// length n, n bytes of JSON {type:"frame", seq, capture_t, width, height, ...}, then
// the JPEG. The panel shows the JPEG through an object URL (revoked as soon as the
// image has decoded) and only then acks it with {type:"ack", seq}: the server sends
// the next frame after the ack, so a slow or hidden page gets fewer, fresh frames
// instead of a backlog. A hidden tab holds its ack until it is visible again.
// Text messages: {type:"status", data:{state, error, retries, next_retry_s, settings}}
// and {type:"error", error:{code, message}}.
//
// Latency shown = client time + clockOffset() − capture time, where clockOffset()
// returns server − client in ms (the telemetry session measures it), so it is the
// age of the picture when it reached the screen.
//
// Marker overlays (docs/vision.md): while the vision pipeline runs (GET /api/vision), a "Markers"
// switch (remembered in localStorage) opens /ws/vision and draws each result over the picture in an
// SVG whose viewBox is the frame's pixels: the outline and id of every decoded marker, and its axes
// (x red, y green, z blue, half a side long). Elements are reused and only their attributes change.
// A result older than VISION_STALE_MS is hidden (the picture moved on; vision did not).
//
// API: const panel = createVideoPanel(container, { clockOffset: () => ms });
//   panel.setState(null)     grey out (the dashboard lost the server); the panel's own
//                            socket keeps reconnecting with backoff
//   panel.setState({...})    connection back: reconnect now if the video socket is down
//   panel.stats()            {frames, fps, latencyMs, seq, width, height, state, errors}
//   panel.visionStats()      {available, on, connected, results, seq, markers: [ids drawn]}
//   panel.close()            close the socket, revoke URLs, remove the DOM

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 8000;
const STALE_AFTER_MS = 2000;   // no frame for this long while the camera is "ok": grey out
const OVERLAY_EVERY_MS = 250;  // overlay text refresh (readable, and cheap)
const FPS_WINDOW_MS = 2000;
const VISION_STALE_MS = 1000;  // hide the overlay of a result older than this
const VISION_KEY = "teleop.video.markers";
const SVGNS = "http://www.w3.org/2000/svg";

const STYLE_ID = "video-panel-style";
const STYLE = `
.vp { margin: 0; position: relative; }
.vp-frame { position: relative; background: #000; border-radius: 6px; overflow: hidden;
  aspect-ratio: var(--vp-aspect, 4 / 3); }
.vp-img { display: block; width: 100%; height: 100%; object-fit: contain; }
.vp-overlay { position: absolute; top: 6px; right: 6px; display: flex; gap: 8px; padding: 2px 8px;
  border-radius: 4px; background: rgba(0, 0, 0, .6); color: #fff; font: 600 .8rem/1.5 ui-monospace, monospace;
  font-variant-numeric: tabular-nums; pointer-events: none; }
.vp-status { position: absolute; left: 0; right: 0; bottom: 0; margin: 0; padding: 6px 10px;
  background: rgba(0, 0, 0, .75); color: #fff; font-size: .85rem; }
.vp-status[hidden] { display: none; }
.vp.vp-stale .vp-img, .vp.vp-disconnected .vp-img { filter: grayscale(1) brightness(.45); }
.vp.vp-disconnected .vp-overlay, .vp.vp-stale .vp-overlay { opacity: .6; }
.vp.vp-state-retrying .vp-status, .vp.vp-stale .vp-status { color: #f3b619; }
.vp.vp-state-failed .vp-status, .vp.vp-disconnected .vp-status { color: #ffb3ae; }
.vp-vision { position: absolute; inset: 0; width: 100%; height: 100%; pointer-events: none; }
.vp-vision[hidden] { display: none; }
.vp-vision .vp-marker polygon { fill: rgba(57, 255, 20, .12); stroke: #39ff14; }
.vp-vision .vp-marker.vp-unknown polygon { fill: none; stroke: #f3b619; stroke-dasharray: 4 3; }
.vp-vision .vp-marker text { fill: #39ff14; font: 700 16px ui-monospace, monospace; paint-order: stroke;
  stroke: #000; stroke-width: 3px; }
.vp-vision .vp-marker.vp-unknown text { fill: #f3b619; }
.vp-vision .ax-x { stroke: #ff4040; } .vp-vision .ax-y { stroke: #40ff40; } .vp-vision .ax-z { stroke: #4090ff; }
.vp-switch { position: absolute; top: 6px; left: 6px; padding: 2px 8px; border-radius: 4px; border: 0;
  background: rgba(0, 0, 0, .6); color: #fff; font: 600 .8rem/1.5 system-ui, sans-serif; cursor: pointer; }
.vp-switch[hidden] { display: none; }
.vp-switch[aria-pressed="true"] { background: rgba(20, 110, 20, .8); }
`;

function ensureStyle() {
  if (typeof document === "undefined" || document.getElementById(STYLE_ID)) return;
  const el = document.createElement("style");
  el.id = STYLE_ID;
  el.textContent = STYLE;
  document.head.appendChild(el);
}

function nowMs() {
  return performance.timeOrigin + performance.now();
}

function defaultUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/ws/video`;
}

function svgEl(tag, attrs = {}, parent = null) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function setAttr(node, name, value) {
  if (node.getAttribute(name) !== value) node.setAttribute(name, value);
}

function visionUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/ws/vision`;
}

/** The marker overlay: an SVG over the picture fed by /ws/vision while its switch is on. */
function createVisionOverlay(frame, { strokePx = 2 } = {}) {
  const svg = svgEl("svg", { class: "vp-vision", "aria-hidden": "true", preserveAspectRatio: "xMidYMid meet",
    viewBox: "0 0 640 480" });
  svg.hidden = true;
  frame.appendChild(svg);
  const button = el("button", "vp-switch", { type: "button", "aria-pressed": "false",
    title: "Draw the fiducial markers the vision pipeline finds" });
  button.textContent = "Markers";
  button.hidden = true;
  frame.appendChild(button);
  const pool = [];
  let on = localStorage.getItem(VISION_KEY) !== "off";
  let available = false;
  let ws = null;
  let attempt = 0;
  let retryTimer = null;
  let closed = false;
  let shownAt = 0;
  const st = { results: 0, seq: 0, markers: [], connected: false };

  function group(i) {
    while (pool.length <= i) {
      const g = svgEl("g", { class: "vp-marker" }, svg);
      const poly = svgEl("polygon", { "stroke-width": strokePx }, g);
      const axes = ["x", "y", "z"].map((a) => svgEl("line", { class: `ax-${a}`, "stroke-width": strokePx + 1 }, g));
      const text = svgEl("text", {}, g);
      pool.push({ g, poly, axes, text });
    }
    return pool[i];
  }

  function draw(d) {
    setAttr(svg, "viewBox", `0 0 ${d.width} ${d.height}`);
    const markers = d.markers || [];
    markers.forEach((m, i) => {
      const p = group(i);
      p.g.removeAttribute("display");
      p.g.classList.toggle("vp-unknown", !m.known);
      setAttr(p.g, "data-id", String(m.id));
      setAttr(p.poly, "points", m.corners.map((c) => `${c[0]},${c[1]}`).join(" "));
      const axes = m.axes || null;
      p.axes.forEach((line, k) => {
        if (!axes) {
          setAttr(line, "display", "none");
          return;
        }
        line.removeAttribute("display");
        setAttr(line, "x1", String(axes[0][0]));
        setAttr(line, "y1", String(axes[0][1]));
        setAttr(line, "x2", String(axes[k + 1][0]));
        setAttr(line, "y2", String(axes[k + 1][1]));
      });
      const top = m.corners.reduce((a, c) => (c[1] < a[1] ? c : a), m.corners[0]);
      setAttr(p.text, "x", String(top[0]));
      setAttr(p.text, "y", String(Math.max(16, top[1] - 6)));
      const label = m.known ? `${m.id} · ${m.range_m.toFixed(2)} m` : `${m.id}?`;
      if (p.text.textContent !== label) p.text.textContent = label;
    });
    for (let i = markers.length; i < pool.length; i += 1) setAttr(pool[i].g, "display", "none");
    st.results += 1;
    st.seq = d.seq;
    st.markers = markers.map((m) => m.id);
    shownAt = performance.now();
    svg.hidden = !on;
  }

  function disconnect() {
    clearTimeout(retryTimer);
    retryTimer = null;
    if (ws) {
      const sock = ws;
      ws = null;
      sock.close(1000, "overlay off");
    }
    st.connected = false;
    svg.hidden = true;
  }

  function connect() {
    if (closed || ws || !on || !available) return;
    const sock = new WebSocket(visionUrl());
    ws = sock;
    sock.onopen = () => {
      attempt = 0;
      st.connected = true;
    };
    sock.onmessage = (ev) => {
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (msg.type === "vision" && msg.data) draw(msg.data);
    };
    sock.onclose = () => {
      if (ws !== sock) return;
      ws = null;
      st.connected = false;
      svg.hidden = true;
      if (closed || !on) return;
      attempt += 1;
      const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (attempt - 1));
      retryTimer = setTimeout(() => { retryTimer = null; probe(); }, base * (0.75 + Math.random() * 0.5));
    };
  }

  function render() {
    button.hidden = !available;
    button.setAttribute("aria-pressed", on ? "true" : "false");
  }

  async function probe() {
    // the pipeline may be off (or not yet running): ask before opening its socket
    try {
      const r = await fetch("/api/vision", { credentials: "same-origin", cache: "no-store" });
      const body = r.ok ? await r.json() : null;
      available = !!(body && body.enabled && !body.reason);
    } catch {
      available = false;
    }
    render();
    if (available && on) connect();
  }

  button.addEventListener("click", () => {
    on = !on;
    localStorage.setItem(VISION_KEY, on ? "on" : "off");
    render();
    if (on) connect();
    else disconnect();
  });

  const ticker = setInterval(() => {
    if (!svg.hidden && performance.now() - shownAt > VISION_STALE_MS) svg.hidden = true;
  }, 250);

  probe();
  return {
    reconnect() {
      if (!ws && on && !retryTimer) probe();
    },
    stats() {
      return { available, on, ...st, visible: !svg.hidden };
    },
    close() {
      closed = true;
      clearInterval(ticker);
      disconnect();
    },
  };
}

function el(tag, className, attrs = {}) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

const decoder = new TextDecoder();

/** Split one binary message into its JSON header and the JPEG bytes. */
export function parseFrame(buffer) {
  const view = new DataView(buffer);
  const n = view.getUint32(0, false);
  const header = JSON.parse(decoder.decode(new Uint8Array(buffer, 4, n)));
  return { header, jpeg: new Uint8Array(buffer, 4 + n) };
}

export function createVideoPanel(container, { clockOffset = () => 0, url = null } = {}) {
  ensureStyle();
  const root = el("figure", "vp vp-disconnected", { "aria-label": "Robot camera" });
  const frame = el("div", "vp-frame");
  const img = el("img", "vp-img", { alt: "Robot camera (live)", decoding: "async" });
  const overlay = el("div", "vp-overlay", { "aria-hidden": "true" });
  const fpsEl = el("span", "vp-fps");
  const latEl = el("span", "vp-lat");
  const sizeEl = el("span", "vp-size");
  const statusEl = el("p", "vp-status", { role: "status", "aria-live": "polite" });
  overlay.append(fpsEl, latEl, sizeEl);
  frame.append(img, overlay, statusEl);
  root.append(frame);
  container.appendChild(root);
  const vision = createVisionOverlay(frame);
  setText(fpsEl, "– fps");
  setText(latEl, "– ms");

  const wsUrl = url || defaultUrl();
  let ws = null;
  let closed = false;
  let attempt = 0;
  let retryTimer = null;
  let dashboardUp = true;       // false after setState(null)
  let socketUp = false;
  let camera = null;            // last status data from the server
  let cameraAt = 0;             // when it arrived (ms), for the retry countdown
  let decoding = false;
  let shownUrl = null;          // object URL being decoded/shown (revoked on load)
  let heldAck = null;           // seq to ack once the tab is visible again
  let lastFrameAt = 0;
  let lastOverlayAt = 0;
  let message = "";
  const times = [];             // display times (ms) in the fps window
  const s = { frames: 0, fps: 0, latencyMs: null, seq: 0, width: 0, height: 0, errors: 0 };

  // ------------------------------------------------------------------ status line and classes

  function statusText() {
    if (!dashboardUp) return "Disconnected from the robot";
    if (!socketUp) return attempt ? `Video reconnecting (attempt ${attempt})…` : "Video connecting…";
    if (message) return message;
    if (!camera) return "Waiting for video…";
    const err = camera.error ? `: ${camera.error}` : "";
    switch (camera.state) {
      case "ok":
        return lastFrameAt && nowMs() - lastFrameAt > STALE_AFTER_MS
          ? `No video for ${((nowMs() - lastFrameAt) / 1000).toFixed(0)} s` : "";
      case "retrying":
        if (!camera.retries) return "Camera starting…";
        if (camera.next_retry_s == null) return `Camera unavailable, retry ${camera.retries}${err}`;
        return `Camera unavailable, retry ${camera.retries} in ` +
          `${Math.max(0, camera.next_retry_s - (nowMs() - cameraAt) / 1000).toFixed(1)} s${err}`;
      case "failed":
        return `Camera failed${err}`;
      case "stopped":
        return `Video stopped${err}`;
      default:
        return `Camera ${camera.state}${err}`;
    }
  }

  function render() {
    const stale = socketUp && dashboardUp && (
      (camera && camera.state !== "ok") || (lastFrameAt > 0 && nowMs() - lastFrameAt > STALE_AFTER_MS));
    root.classList.toggle("vp-disconnected", !dashboardUp || !socketUp);
    root.classList.toggle("vp-stale", !!stale);
    for (const st of ["ok", "retrying", "failed", "stopped"]) {
      root.classList.toggle(`vp-state-${st}`, !!camera && camera.state === st);
    }
    const text = statusText();
    statusEl.hidden = !text;
    setText(statusEl, text);
  }

  function renderOverlay(force) {
    const t = nowMs();
    if (!force && t - lastOverlayAt < OVERLAY_EVERY_MS) return;
    lastOverlayAt = t;
    setText(fpsEl, `${s.fps.toFixed(1)} fps`);
    setText(latEl, s.latencyMs == null ? "– ms" : `${Math.max(0, s.latencyMs).toFixed(0)} ms`);
    setText(sizeEl, s.width ? `${s.width}×${s.height}` : "");
    latEl.title = "capture to screen, including decode";
  }

  // ------------------------------------------------------------------ frames

  function ack(seq) {
    if (document.hidden) {
      heldAck = seq; // no credit back while nobody watches: the server stops sending
      return;
    }
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "ack", seq }));
  }

  function revokeShown() {
    if (shownUrl) URL.revokeObjectURL(shownUrl);
    shownUrl = null;
  }

  function onFrame(buffer) {
    let header;
    let jpeg;
    try {
      ({ header, jpeg } = parseFrame(buffer));
    } catch (err) {
      s.errors += 1;
      message = "Bad video frame from the server";
      render();
      return;
    }
    if (decoding) revokeShown(); // should not happen with one credit; never leak a URL anyway
    decoding = true;
    const objectUrl = URL.createObjectURL(new Blob([jpeg], { type: "image/jpeg" }));
    shownUrl = objectUrl;
    img.src = objectUrl;
    const done = (ok) => {
      if (shownUrl === objectUrl) revokeShown(); // the decoded picture stays on screen
      decoding = false;
      if (closed) return;
      if (ok) shown(header);
      else s.errors += 1;
      ack(header.seq); // a frame that failed to decode must not stall the stream
    };
    img.decode().then(() => done(true), () => done(false));
  }

  function shown(header) {
    const t = nowMs();
    const offset = Number(clockOffset()) || 0;
    s.frames += 1;
    s.seq = header.seq;
    s.latencyMs = t + offset - header.capture_t * 1000;
    if (header.width !== s.width || header.height !== s.height) {
      s.width = header.width;
      s.height = header.height;
      frame.style.setProperty("--vp-aspect", `${header.width} / ${header.height}`);
    }
    times.push(t);
    while (times.length && t - times[0] > FPS_WINDOW_MS) times.shift();
    s.fps = times.length > 1 ? ((times.length - 1) * 1000) / (times[times.length - 1] - times[0]) : 0;
    const wasStale = lastFrameAt && t - lastFrameAt > STALE_AFTER_MS;
    lastFrameAt = t;
    message = "";
    renderOverlay(false);
    if (wasStale || root.classList.contains("vp-stale")) render();
  }

  // ------------------------------------------------------------------ socket

  function onText(data) {
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return;
    }
    if (msg.type === "status" && msg.data) {
      camera = msg.data;
      cameraAt = nowMs();
      if (camera.state !== "ok") {
        times.length = 0;
        s.fps = 0;
        s.latencyMs = null;
        renderOverlay(true);
      }
      message = "";
      render();
    } else if (msg.type === "error" && msg.error) {
      s.errors += 1;
      message = `Video error: ${msg.error.message || msg.error.code}`;
      render();
    }
  }

  function connect() {
    if (closed || ws) return;
    clearTimeout(retryTimer);
    retryTimer = null;
    const sock = new WebSocket(wsUrl);
    sock.binaryType = "arraybuffer";
    ws = sock;
    sock.onopen = () => {
      attempt = 0;
      socketUp = true;
      render();
    };
    sock.onmessage = (ev) => {
      if (typeof ev.data === "string") onText(ev.data);
      else onFrame(ev.data);
    };
    sock.onclose = () => {
      if (ws !== sock) return;
      ws = null;
      socketUp = false;
      camera = null;
      decoding = false;
      heldAck = null;
      if (closed) return;
      attempt += 1;
      const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (attempt - 1));
      retryTimer = setTimeout(connect, base * (0.75 + Math.random() * 0.5));
      render();
    };
    render();
  }

  function onVisibility() {
    if (!document.hidden && heldAck != null) {
      const seq = heldAck;
      heldAck = null;
      ack(seq);
    }
  }

  const ticker = setInterval(() => {
    if (lastFrameAt && nowMs() - lastFrameAt > STALE_AFTER_MS) {
      if (s.fps !== 0) {
        s.fps = 0;
        times.length = 0;
        renderOverlay(true);
      }
      render();
    } else if (camera && camera.state === "retrying") {
      render(); // the countdown
    }
  }, 500);

  document.addEventListener("visibilitychange", onVisibility);
  connect();
  render();

  return {
    element: root,
    setState(partial) {
      if (closed) return;
      if (partial == null) {
        dashboardUp = false;
      } else {
        dashboardUp = true;
        if (!ws) {
          attempt = 0;
          connect();
        }
        vision.reconnect();
      }
      render();
    },
    stats() {
      return { ...s, state: camera ? camera.state : null, connected: socketUp };
    },
    visionStats() {
      return vision.stats();
    },
    close() {
      closed = true;
      clearInterval(ticker);
      clearTimeout(retryTimer);
      document.removeEventListener("visibilitychange", onVisibility);
      vision.close();
      if (ws) ws.close(1000, "panel closed");
      ws = null;
      revokeShown();
      img.removeAttribute("src");
      root.remove();
    },
  };
}
