// Video panel: the robot's camera over the best transport this browser and this path allow.
//
// Transports, tried in this order in "auto" (docs/video.md):
//   1. WebRTC (video/webrtc.js): H.264 or VP8 over UDP with the server's own rate control, and the
//      command data channels (speed and heartbeats unordered, the e-stop reliable) attached to the session;
//   2. H.264 over the websocket (video/h264.js): the same encoded stream on TCP, decoded with WebCodecs,
//      where UDP is blocked; needs a secure context (https, or http on localhost);
//   3. JPEG over the websocket (video/jpeg.js): one frame in flight, for LAN, scripts, old browsers.
// The bar under the picture says which one runs and why (what failed before it), and lets the operator
// force one (remembered in localStorage "teleop.video.transport").
//
// The age of the picture, capture → displayed, on the robot's monotonic clock (clockOffset() = robot's
// monotonic clock − this page's clock, ms, from the telemetry socket's pong; null until the first pong: no age
// is shown until then), so a wall-clock step on either side moves no age. Read from the capture-time strip in the picture itself when the camera draws one (the sim camera:
// video/strip.js), else from the frame's capture stamp (JPEG and H.264 headers; WebRTC: the RTP
// timestamp and the clock the server sends). Over 0.5 s the picture says DELAYED; with no new picture
// for 1 s it greys out and says for how long ("frozen"), so no freeze goes unannounced. The first picture of
// a new transport after one was shown (the dashboard reconnected, a transport fell back) says
// "RECONNECTED · new picture after n s" for 2 s: the scene may have jumped.
//
// Marker overlays (docs/vision.md): while the vision pipeline runs (GET /api/vision), a "Markers"
// switch (remembered in localStorage) opens /ws/vision and draws each result over the picture in an
// SVG whose viewBox is the frame's pixels. A result older than VISION_STALE_MS is hidden.
//
// API: const panel = createVideoPanel(container, { clockOffset: () => ms | null });
//   panel.setState(null | {...})   grey out / back: reconnect now if the video is down
//   panel.stats()                  {transport, mode, why, frames, fps, latencyMs, ageSource, width, height, ...}
//   panel.ages(from)               glass-to-glass ages (ms) recorded since index `from` (bench, tests)
//   panel.setTransport(mode)       "auto" | "webrtc" | "h264" | "jpeg"
//   panel.transportStats()         the running transport's own figures (WebRTC getStats, rate control)
//   panel.visionStats(), panel.close()

import { apiGet } from "./api.js";
import { Backoff } from "./reconnect.js";
import { session } from "./session.js";
import { readStrip, unwrapMs } from "./video/strip.js";
import { startWebRtc } from "./video/webrtc.js";
import { h264Available, startH264 } from "./video/h264.js";
import { startJpeg, parseFrame } from "./video/jpeg.js";

export { parseFrame };

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 8000;
const FROZEN_AFTER_MS = 1000;  // no new picture for this long: grey out, say so
const DELAYED_AFTER_MS = 500;  // a picture older than this: "DELAYED n ms"
const MARK_MS = 2000;          // how long the first picture after a reconnect is marked as such
const OVERLAY_EVERY_MS = 250;
const FPS_WINDOW_MS = 2000;
const AGES_KEPT = 20000;
const VISION_STALE_MS = 1000;
const VISION_KEY = "teleop.video.markers";
const MODE_KEY = "teleop.video.transport";
const MODES = ["auto", "webrtc", "h264", "jpeg"];
const LABEL = { webrtc: "WebRTC", h264: "H.264/websocket", jpeg: "JPEG/websocket" };
const SVGNS = "http://www.w3.org/2000/svg";
const RTP_PERIOD_MS = 2 ** 32 / 90;

function nowMs() {
  return performance.timeOrigin + performance.now();
}

function jpegUrl() {
  return `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}/ws/video`;
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
  const retry = new Backoff({ minMs: BACKOFF_MIN_MS, maxMs: BACKOFF_MAX_MS, jitter: 0.25 });
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
    retry.cancel();
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
      retry.reset();
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
      retry.schedule(probe);
    };
  }

  function render() {
    button.hidden = !available;
    button.setAttribute("aria-pressed", on ? "true" : "false");
  }

  async function probe() {
    // the pipeline may be off (or not yet running): ask before opening its socket
    try {
      const res = await apiGet("/api/vision");
      const body = res.ok ? res.data : null;
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
      if (!ws && on && !retry.pending) probe();
    },
    stats() {
      return { available, on, ...st, visible: !svg.hidden };
    },
    close() {
      closed = true;
      clearInterval(ticker);
      clearTimeout(markTimer);
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

export function createVideoPanel(container, { clockOffset = () => null, url = null } = {}) {
  const root = el("figure", "vp vp-disconnected", { "aria-label": "Robot camera" });
  const frame = el("div", "vp-frame");
  const video = el("video", "vp-media vp-webrtc", { muted: "", playsinline: "", autoplay: "" });
  video.muted = true;
  const canvas = el("canvas", "vp-media vp-h264", { "aria-label": "Robot camera (live, H.264)" });
  const img = el("img", "vp-img vp-media vp-jpeg", { alt: "Robot camera (live)", decoding: "async" });
  const overlay = el("div", "vp-overlay", { "aria-hidden": "true" });
  const transportEl = el("span", "vp-transport");
  const fpsEl = el("span", "vp-fps");
  const latEl = el("span", "vp-lat", { title: "capture to screen, on the robot's clock" });
  const sizeEl = el("span", "vp-size");
  const delayedEl = el("span", "vp-delayed", { role: "status" });
  delayedEl.hidden = true;
  const reconnectedEl = el("span", "vp-reconnected", { role: "status" });
  reconnectedEl.hidden = true;
  const statusEl = el("p", "vp-status", { role: "status", "aria-live": "polite" });
  overlay.append(transportEl, fpsEl, latEl, sizeEl);
  frame.append(video, canvas, img, overlay, delayedEl, reconnectedEl, statusEl);
  const bar = el("div", "vp-bar");
  const select = el("select", "vp-mode", { "aria-label": "Video transport" });
  for (const m of MODES) {
    const o = el("option", "", { value: m });
    o.textContent = m === "auto" ? "Auto" : LABEL[m];
    select.appendChild(o);
  }
  const whyEl = el("span", "vp-why");
  bar.append(select, whyEl);
  root.append(frame, bar);
  container.appendChild(root);
  const vision = createVisionOverlay(frame);
  setText(fpsEl, "– fps");
  setText(latEl, "– ms");

  let mode = MODES.includes(localStorage.getItem(MODE_KEY)) ? localStorage.getItem(MODE_KEY) : "auto";
  select.value = mode;
  let transport = null;        // {kind, handle}
  let why = "";                // why this transport (what failed before it)
  const failures = [];         // this round's failed transports and why
  let closed = false;
  let dashboardUp = true;
  let camera = null;
  let cameraAt = 0;
  let message = "";
  let lastFrameAt = 0;
  let lastOverlayAt = 0;
  let rate = null;
  const retry = new Backoff({ minMs: BACKOFF_MIN_MS, maxMs: BACKOFF_MAX_MS, jitter: 0.25 });
  const times = [];
  const ages = [];
  let agesBase = 0;
  const s = { frames: 0, fps: 0, latencyMs: null, ageSource: null, seq: 0, width: 0, height: 0, errors: 0,
    freezes: 0, maxGapMs: 0, delayedShown: 0, reconnectMarks: 0 };
  let markNext = false;         // a new transport after a picture was shown: mark its first frame
  let markTimer = null;

  // ------------------------------------------------------------------ transports

  function stopTransport() {
    if (transport) transport.handle.close();
    transport = null;
    root.classList.remove("vp-t-webrtc", "vp-t-h264", "vp-t-jpeg");
  }

  function use(kind, handle, reason) {
    transport = { kind, handle };
    markNext = s.frames > 0;
    why = reason;
    for (const k of ["webrtc", "h264", "jpeg"]) root.classList.toggle(`vp-t-${k}`, k === kind);
    setText(transportEl, LABEL[kind]);
    setText(whyEl, `${LABEL[kind]}${reason ? ` — ${reason}` : ""}`);
    whyEl.title = whyEl.textContent;
    render();
  }

  function failed(kind, reason) {
    if (closed) return;
    failures.push(`${LABEL[kind]}: ${reason}`);
    stopTransport();
    if (mode === "auto") {
      const order = ["webrtc", "h264", "jpeg"];
      next(order[order.indexOf(kind) + 1] || "jpeg");
    } else {
      message = `${LABEL[kind]} failed: ${reason}; retrying`;
      render();
      retry.schedule(() => start());
    }
  }

  async function next(kind) {
    if (closed || !dashboardUp) return;
    const reason = failures.join("; ") || (mode === "auto" ? "the best transport here" : "chosen by the operator");
    if (kind === "webrtc") {
      if (typeof RTCPeerConnection === "undefined") { failed("webrtc", "this browser has no WebRTC"); return; }
      use("webrtc", startWebRtc({ video, session, onFrame: shown, onRate: (d) => { rate = d.rate; },
        onFail: (r) => failed("webrtc", r), onState: () => render() }), reason);
    } else if (kind === "h264") {
      const ok = await h264Available();
      if (closed) return;
      if (!ok.ok) { failed("h264", ok.why); return; }
      use("h264", startH264({ canvas, onFrame: shown, onText, onFail: (r) => failed("h264", r) }), reason);
    } else {
      use("jpeg", startJpeg({ img, url: url || jpegUrl(), onFrame: shown, onText, onClose: () => {
        stopTransport();
        camera = null;
        render();
        retry.schedule(() => start());
      } }), reason);
    }
  }

  function start() {
    stopTransport();
    failures.length = 0;
    message = "";
    next(mode === "auto" ? "webrtc" : mode);
  }

  select.addEventListener("change", () => {
    mode = select.value;
    localStorage.setItem(MODE_KEY, mode);
    retry.reset();
    start();
  });

  // ------------------------------------------------------------------ frames

  function shown(f) {
    const t = nowMs();
    if (markNext) markReconnect(lastFrameAt ? t - lastFrameAt : null);
    const offset = clockOffset();
    const synced = offset !== null && offset !== undefined && Number.isFinite(Number(offset));
    const robotNow = synced ? f.displayMs + Number(offset) : NaN;
    let age = null;
    let src = null;
    const strip = !synced ? null : readStrip(f.source, f.width || f.source.videoWidth || f.source.naturalWidth,
      f.height || f.source.videoHeight || f.source.naturalHeight);
    if (strip !== null) {
      age = robotNow - unwrapMs(strip, robotNow);
      src = "strip";
    } else if (!synced) {
      // no pong yet: no age rather than one on another clock
    } else if (Number.isFinite(f.captureMs)) {
      age = robotNow - f.captureMs;
      src = "stamp";
    } else if (Number.isFinite(f.captureMsMod)) {
      let base = robotNow - (((robotNow - f.captureMsMod) % RTP_PERIOD_MS) + RTP_PERIOD_MS) % RTP_PERIOD_MS;
      if (robotNow - base > RTP_PERIOD_MS / 2) base += RTP_PERIOD_MS;
      age = robotNow - base;
      src = "rtp";
    }
    if (lastFrameAt) {
      const gap = t - lastFrameAt;
      if (gap > s.maxGapMs) s.maxGapMs = gap;
      if (gap > FROZEN_AFTER_MS) s.freezes += 1;
    }
    s.frames += 1;
    if (f.header) s.seq = f.header.seq;
    s.latencyMs = age;
    s.ageSource = src;
    if (age !== null) {
      ages.push(age);
      if (ages.length > AGES_KEPT) { ages.shift(); agesBase += 1; }
    }
    const w = f.width || 0;
    const h = f.height || 0;
    if (w && (w !== s.width || h !== s.height)) {
      s.width = w;
      s.height = h;
      frame.style.setProperty("--vp-aspect", `${w} / ${h}`);
    }
    times.push(t);
    while (times.length && t - times[0] > FPS_WINDOW_MS) times.shift();
    s.fps = times.length > 1 ? ((times.length - 1) * 1000) / (times[times.length - 1] - times[0]) : 0;
    const wasFrozen = root.classList.contains("vp-stale");
    lastFrameAt = t;
    message = "";
    const delayed = age !== null && age > DELAYED_AFTER_MS;
    if (delayed !== !delayedEl.hidden) {
      delayedEl.hidden = !delayed;
      if (delayed) s.delayedShown += 1;
    }
    if (delayed) setText(delayedEl, `DELAYED ${Math.round(age)} ms`);
    renderOverlay(false);
    if (wasFrozen) render();
  }

  /** The first picture of a new transport after one was shown (a reconnect, a fallback): say so for a while. */
  function markReconnect(gapMs) {
    markNext = false;
    s.reconnectMarks += 1;
    setText(reconnectedEl, gapMs === null ? "RECONNECTED · new picture"
      : `RECONNECTED · new picture after ${(gapMs / 1000).toFixed(1)} s`);
    reconnectedEl.hidden = false;
    clearTimeout(markTimer);
    markTimer = setTimeout(() => { reconnectedEl.hidden = true; }, MARK_MS);
  }

  function onText(msg) {
    if (msg.type === "status" && msg.data) {
      camera = msg.data;
      cameraAt = nowMs();
      message = "";
      render();
    } else if (msg.type === "rate" && msg.data) {
      rate = msg.data;
    } else if (msg.type === "error" && msg.error) {
      s.errors += 1;
      message = `Video error: ${msg.error.message || msg.error.code}`;
      render();
    } else if (msg.type === "open") {
      retry.reset();
      render();
    }
  }

  // ------------------------------------------------------------------ status line, overlay, classes

  function statusText() {
    if (!dashboardUp) return "Disconnected from the robot";
    if (!transport) return retry.pending ? `Video reconnecting (attempt ${retry.attempt})…` : "Video connecting…";
    if (message) return message;
    const frozenMs = lastFrameAt ? nowMs() - lastFrameAt : 0;
    if (camera && camera.state !== "ok") {
      const err = camera.error ? `: ${camera.error}` : "";
      if (camera.state === "retrying") {
        if (!camera.retries) return "Camera starting…";
        if (camera.next_retry_s == null) return `Camera unavailable, retry ${camera.retries}${err}`;
        return `Camera unavailable, retry ${camera.retries} in ` +
          `${Math.max(0, camera.next_retry_s - (nowMs() - cameraAt) / 1000).toFixed(1)} s${err}`;
      }
      return camera.state === "failed" ? `Camera failed${err}` : camera.state === "stopped" ? `Video stopped${err}`
        : `Camera ${camera.state}${err}`;
    }
    if (frozenMs > FROZEN_AFTER_MS) return `No new picture for ${(frozenMs / 1000).toFixed(1)} s (frozen)`;
    if (!lastFrameAt) return `Waiting for video (${LABEL[transport.kind]})…`;
    return "";
  }

  function render() {
    const frozen = lastFrameAt > 0 && nowMs() - lastFrameAt > FROZEN_AFTER_MS;
    const stale = dashboardUp && !!transport && ((camera && camera.state !== "ok") || frozen);
    root.classList.toggle("vp-disconnected", !dashboardUp || !transport);
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
    const tier = rate && (rate.tier || (rate.rate && rate.rate.tier));
    setText(sizeEl, s.width ? `${s.width}×${s.height}${tier ? ` · ${tier}` : ""}` : "");
  }

  const ticker = setInterval(() => {
    if (lastFrameAt && nowMs() - lastFrameAt > FROZEN_AFTER_MS && s.fps !== 0) {
      s.fps = 0;
      times.length = 0;
      renderOverlay(true);
    }
    render();
  }, 250);

  start();
  render();
  const panel = {
    element: root,
    setState(partial) {
      if (closed) return;
      if (partial == null) {
        dashboardUp = false;
      } else {
        const wasDown = !dashboardUp;
        dashboardUp = true;
        if (!transport || wasDown) { retry.reset(); start(); }
        vision.reconnect();
      }
      render();
    },
    stats() {
      return { ...s, transport: transport ? transport.kind : null, mode, why, failures: [...failures],
        state: camera ? camera.state : null, connected: !!transport, rate };
    },
    ages(from = 0) {
      return { next: agesBase + ages.length, ages: ages.slice(Math.max(0, from - agesBase)) };
    },
    async transportStats() {
      return transport ? { kind: transport.kind, ...(await transport.handle.stats()) } : null;
    },
    setTransport(m) {
      if (!MODES.includes(m)) throw new Error(`transport must be one of ${MODES.join(", ")}`);
      select.value = m;
      select.dispatchEvent(new Event("change"));
    },
    visionStats() {
      return vision.stats();
    },
    close() {
      closed = true;
      clearInterval(ticker);
      clearTimeout(markTimer);
      retry.cancel();
      vision.close();
      stopTransport();
      img.removeAttribute("src");
      root.remove();
    },
  };
  window.teleopVideo = panel;  // tests and the bench read the figures here
  return panel;
}
