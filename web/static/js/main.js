// Dashboard entry point: builds the panels from the robot description, wires them
// to the session and renders the latest snapshot at most ten times a second (a state change at once).
//
// Every panel has setState(snapshot | null); null means "no connection": it greys
// out and keeps its last values. Telemetry can arrive faster than the screen
// refreshes: each message only replaces `latest` (and feeds the plots' buffers);
// one requestAnimationFrame renders whatever is newest (latest wins), no sooner than
// RENDER_PERIOD_MS after the last one unless the robot's state changed.

import { session, clockOffsetMs } from "./session.js";
import { createGauges } from "./gauges.js";
import { createPlots } from "./plots.js";
import { createDrive } from "./drive.js";
import { createControls } from "./controls.js";
import { createConnection, createHealth, createStateBadge } from "./status.js";
import { createEventLog } from "./events.js";
import { createAcquisition } from "./acquisition.js";
import { createLinkPanel } from "./link.js";

const $ = (sel) => document.querySelector(sel);

function readRobot() {
  try {
    return JSON.parse($("#robot-description").textContent) || {};
  } catch {
    return {};
  }
}

// ---------------------------------------------------------------------- render statistics
// performance.measure around the render and the message handling; the entries are
// cleared at once (a 10-minute session must not grow the timeline) and folded into
// `stats`, which bench/bench_dashboard.py reads.

const RING = 2048;
const stats = {
  messages: 0,
  renders: 0,
  renderMs: new Float64Array(RING),
  handleMs: new Float64Array(RING),
  renderTotalMs: 0,
  handleTotalMs: 0,
  reset() {
    this.messages = this.renders = 0;
    this.renderTotalMs = this.handleTotalMs = 0;
  },
  snapshot() {
    const take = (ring, n) => Array.from(ring.subarray(0, Math.min(n, RING)));
    return {
      messages: this.messages,
      renders: this.renders,
      renderTotalMs: this.renderTotalMs,
      handleTotalMs: this.handleTotalMs,
      renderMs: take(this.renderMs, this.renders),
      handleMs: take(this.handleMs, this.messages),
    };
  },
};

function measure(name, startMark) {
  const m = performance.measure(name, startMark);
  performance.clearMarks(startMark);
  performance.clearMeasures(name);
  return m ? m.duration : 0;
}

// ---------------------------------------------------------------------- panels

const robot = readRobot();
// A robot that does not take `speed` (GET /api/robot → commands, the registry's: an arm or a platform moves
// from its own panels, partials/arms.html) gets no speeds from the drive keys. drive.js still sends the
// heartbeats while running and owns the Space e-stop; its joystick and sliders are hidden (body.no-speed).
const takesSpeed = !Array.isArray(robot.commands) || robot.commands.includes("speed");
if (!takesSpeed) {
  window.addEventListener("keydown", (e) => {
    if (/^(Arrow(Up|Down|Left|Right)|Key[WASD])$/.test(e.code)) e.stopImmediatePropagation();
  }, { capture: true });
}
const log = createEventLog({ list: $("#events"), panel: $("#events-panel") });
const drive = createDrive({ root: $("#controls-panel"), onEstop: (src) => controls.estop(src), takesSpeed });
const controls = createControls({
  root: $("#controls-panel"), dialog: $("#reset-dialog"), estopButton: $("#estop"), log, drive,
});
const badge = createStateBadge({ badge: $("#state-badge"), banner: $("#estop-banner") });
const connection = createConnection({ el: $("#connection"), banner: $("#conn-banner") });
const health = createHealth({ root: $("#health-panel") });
const gauges = createGauges({ container: $("#gauges"), panel: $("#gauges-panel") });
const plots = createPlots({
  container: $("#plots"), panel: $("#plots-panel"), windowSelect: $("#plot-window"), onChannels: () => subscribe(),
});
const acquisition = createAcquisition({ panel: $("#acquisition-panel"), form: $("#acq-form"), log });
const linkPanel = createLinkPanel({ root: $("#link-panel"), badge: $("#governor-badge"), video: () => video });
const panels = [badge, controls, drive, health, linkPanel, gauges, plots, log, acquisition];
let video = null;

// ---------------------------------------------------------------------- subscription (issue 20 §5)
// The dashboard asks for what it shows: the gauges' and plots' channels, the channels a panel declares
// (channels()), the robot's external ones (vision: the map's markers), every snapshot field (the status, link,
// mission and map panels read them), at SUBSCRIBE_RATE_HZ, delta-encoded (docs/networks.md: 0.19 Mbit/s
// instead of 1.1 without permessage-deflate). It re-subscribes when a plot's channels change.
const SUBSCRIBE_RATE_HZ = 20;

function subscribe() {
  const names = new Set([...gauges.channels(), ...plots.channels()]);
  for (const p of panels) if (p && typeof p.channels === "function") for (const n of p.channels()) names.add(n);
  const r = session.robot || robot;
  for (const src of Object.values(r.external || {})) {
    for (const c of (src && src.channels) || []) if (c && c.name) names.add(c.name);
  }
  const rate = Number(r.telemetry_rate_hz) > 0 ? Math.min(SUBSCRIBE_RATE_HZ, r.telemetry_rate_hz) : SUBSCRIBE_RATE_HZ;
  session.setSubscription({ channels: [...names].sort(), fields: "*", rate_hz: rate, encoding: "delta" });
}

let channelsKey = "";
function buildFromRobot(r) {
  const key = JSON.stringify(r.channels || []);
  if (key === channelsKey) return;
  channelsKey = key;
  gauges.build(r.channels);
  plots.build(r.channels, r.profile || r.name || null);
  acquisition.setLabels(r.channels);
  drive.setLimits(r);
  if (r.name) $("#robot-name").textContent = r.name;
  subscribe();
}
buildFromRobot(robot);

function setAll(snap) {
  for (const p of panels) p.setState(snap);
}
setAll(null);

// ---------------------------------------------------------------------- render loop

let latest = null;
let framePending = false;
let renderTimer = null;
let renderedAt = -Infinity;
let renderedState;

function render() {
  framePending = false;
  renderTimer = null;
  if (!latest) return;
  renderedAt = performance.now();
  renderedState = latest.state;
  performance.mark("teleop:render:start");
  setAll(latest);
  // uPlot draws in a microtask queued by setData; ours runs after it, so the
  // measure covers the charts' drawing too.
  queueMicrotask(() => {
    const ms = measure("teleop:render", "teleop:render:start");
    stats.renderMs[stats.renders % RING] = ms;
    stats.renders += 1;
    stats.renderTotalMs += ms;
  });
}

// Values change at the telemetry rate (up to 50 Hz), but nobody reads a figure that changes more than ten times
// a second, and every render is style, layout and paint of the whole page. So the panels are drawn at most every
// RENDER_PERIOD_MS, except that a change of the robot's state (an e-stop, a stop, a fault) is drawn at the next
// animation frame, without that wait. The plots still get every snapshot. Measured on an idle robot (headless
// Chromium, 2-core machine): ~20 renders a second cost ~36 % of a core, ten ~26 % (docs/dashboard.md).
const RENDER_PERIOD_MS = 100;

function scheduleRender(urgent) {
  if (framePending && !(urgent && renderTimer !== null)) return;
  if (renderTimer !== null) clearTimeout(renderTimer);
  framePending = true;
  const wait = urgent ? 0 : renderedAt + RENDER_PERIOD_MS - performance.now();
  if (wait <= 0) {
    renderTimer = null;
    requestAnimationFrame(render);
  } else {
    renderTimer = setTimeout(() => { renderTimer = null; requestAnimationFrame(render); }, wait);
  }
}

session.on("telemetry", (snap) => {
  performance.mark("teleop:message:start");
  latest = snap;
  drive.noteState(snap.state);
  plots.push(snap);
  scheduleRender(snap.state !== renderedState);
  const ms = measure("teleop:message", "teleop:message:start");
  stats.handleMs[stats.messages % RING] = ms;
  stats.messages += 1;
  stats.handleTotalMs += ms;
});

session.on("hello", ({ robot: r, state }) => {
  if (r) buildFromRobot(r);
  subscribe();                          // its external channels may have changed (sent only if it did)
  latest = state;
  if (state) {
    drive.noteState(state.state);
    setAll(state);
  }
  acquisition.reload();
  if (video && video.setState) video.setState({ connected: true, robot: r });
});

session.on("disconnect", ({ wasConnected }) => {
  latest = null;
  setAll(null);
  if (video && video.setState) video.setState(null);
  if (wasConnected) log.local({ trigger: "connection", message: "connection to the robot lost", kind: "error" });
});

session.on("error", ({ command, error }) => {
  // Errors of awaited commands are shown by their caller; these are fire-and-forget ones.
  if (command === "start" || command === "stop" || command === "reset" || command === "estop") return;
  noteAsyncError(command, error);
});

// Speed/heartbeat errors come at up to 20 Hz: log each kind once per 2 s.
const lastErrorAt = new Map();
function noteAsyncError(command, error) {
  const key = `${command}|${error.code}`;
  const now = performance.now();
  if (now - (lastErrorAt.get(key) || -Infinity) < 2000) return;
  lastErrorAt.set(key, now);
  log.local({ trigger: command || "command", message: `${error.code || "error"}: ${error.message || ""}`, kind: "error" });
}

// ---------------------------------------------------------------------- video slot
// video.js belongs to the video engineer: createVideoPanel(container, {clockOffset}).
// The dashboard works without it.

async function loadVideo() {
  const slot = $("#video-panel");
  const placeholder = slot.querySelector(".video-placeholder");
  if (robot.video && robot.video.enabled === false) {
    placeholder.textContent = "Video is disabled in this profile.";
    return;
  }
  try {
    const mod = await import("./video.js");
    placeholder.remove();
    video = mod.createVideoPanel(slot, { clockOffset: () => session.monoOffsetMs }) || null;
    if (video && video.setState && !session.connected) video.setState(null);
  } catch (err) {
    placeholder.textContent = "Video is not available.";
    console.info("teleop: no video panel:", err && err.message);
  }
}
loadVideo();

// ---------------------------------------------------------------------- optional panels
// <section data-panel-module="x.js" data-panel-factory="createX"> in a template partial:
// the module is imported here and its panel joins the others (setState per frame, null
// on disconnect). A missing or broken module leaves its section saying so. A form's submit
// button is served `disabled data-until-loaded`: clicked before its module had bound the
// form, it would submit natively and reload the page (seen on a loaded machine).

async function loadOptionalPanels() {
  for (const root of document.querySelectorAll("[data-panel-module]")) {
    const file = root.dataset.panelModule;
    const factory = root.dataset.panelFactory;
    if (!/^[\w-]+\.js$/.test(file)) continue;     // same folder only
    try {
      const mod = await import(`./${file}`);
      const panel = mod[factory]({ root, robot: session.robot || robot, session, clockOffset: clockOffsetMs });
      for (const b of root.querySelectorAll("[data-until-loaded]")) {
        b.disabled = false;
        b.removeAttribute("data-until-loaded");
      }
      if (panel && typeof panel.setState === "function") {
        panels.push(panel);
        panel.setState(session.connected ? latest : null);
      }
    } catch (err) {
      root.classList.add("stale");
      console.warn(`teleop: panel ${file} not loaded:`, err);
    }
  }
}
loadOptionalPanels();

// ---------------------------------------------------------------------- page lifecycle

window.addEventListener("pagehide", () => session.stop());
window.addEventListener("pageshow", (e) => {
  if (e.persisted) session.start();
});

// Frames per second, for the bench: counts requestAnimationFrame callbacks over a
// short window. Not always on: an endless rAF loop would cost power on a tablet.
stats.measureFps = (windowMs = 5000) => new Promise((resolve) => {
  let frames = 0;
  const t0 = performance.now();
  const tick = (now) => {
    frames += 1;
    if (now - t0 < windowMs) requestAnimationFrame(tick);
    else resolve((frames * 1000) / (now - t0));
  };
  requestAnimationFrame(tick);
});

// A small handle for tests, the bench and the browser console.
window.teleop = Object.freeze({ session, stats, drive, controls, connection, plots, clockOffsetMs });

session.start();
