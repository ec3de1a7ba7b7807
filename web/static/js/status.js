// Status that cannot be missed: the state badge, the e-stop and connection banners,
// connection figures (RTT, telemetry age) and the link/loop health panel.

import { session } from "./session.js";
import { formatCause, formatNumber, setPrefixedClass, setText } from "./format.js";

// The badge names a state ("E-STOPPED"); the E-STOP button next to it names an action.
const STATE_LABELS = { idle: "idle", running: "running", stopping: "stopping", estop: "E-STOPPED", fault: "fault" };
const TELEMETRY_STALE_MS = 1000;

function fields(root) {
  const out = {};
  for (const el of root.querySelectorAll("[data-field]")) out[el.dataset.field] = el;
  return out;
}

/** Top-bar badge + e-stop banner. setState(snapshot | null). The badge is marked stale (class
 *  `snapshot-stale`) while no snapshot has come for TELEMETRY_STALE_MS: the state it shows is the last one
 *  known, not the robot's now (a frozen runtime kept showing "running"). */
export function createStateBadge({ badge, banner }) {
  const f = fields(badge);
  const b = fields(banner);
  let cause = "";
  let shown = false;
  function markStale() {
    const ageMs = performance.now() - session.lastTelemetryMs;
    const stale = shown && session.connected && ageMs > TELEMETRY_STALE_MS;
    if (badge.classList.contains("snapshot-stale") !== stale) badge.classList.toggle("snapshot-stale", stale);
    badge.title = stale ? `no new state for ${formatNumber(ageMs / 1000, 1)} s: this is the last one known` : cause;
  }
  setInterval(markStale, 250);
  return {
    setState(snap) {
      const s = snap ? snap.state : "unknown";
      shown = snap !== null;
      setPrefixedClass(badge, "state-", s);
      setText(f.state, snap ? STATE_LABELS[s] || s : "no data");
      cause = snap && (s === "estop" || s === "fault") ? formatCause(snap.cause) : "";
      setText(f.cause, cause);
      markStale();
      const show = snap !== null && (s === "estop" || s === "fault");
      if (banner.hidden === show) banner.hidden = !show;
      if (show) {
        setText(b.title, s === "fault" ? "Fault:" : "E-stop latched:");
        setText(b.cause, cause || "cause not reported");
        banner.classList.toggle("fault", s === "fault");
      }
    },
  };
}

/** Connection indicator and the "connection lost" banner; refreshed on a timer, not per frame. */
export function createConnection({ el, banner }) {
  const f = fields(el);
  const b = fields(banner);
  let everConnected = false;

  function refresh() {
    const now = performance.now();
    let cls;
    let text;
    if (session.connected) {
      const ageMs = now - session.lastTelemetryMs;
      cls = ageMs > TELEMETRY_STALE_MS ? "stale" : "connected";
      text = cls === "stale" ? "telemetry stalled" : "connected";
      everConnected = true;
    } else if (session.status === "closed") {
      cls = "disconnected";
      text = "closed";
    } else if (session.status === "connecting") {
      cls = everConnected ? "disconnected" : "connecting";
      text = "connecting…";
    } else {
      cls = "disconnected";
      const s = Math.max(0, (session.retryAt - now) / 1000);
      text = `disconnected — retry in ${s.toFixed(1)} s`;
    }
    setPrefixedClass(el, "conn-", cls);
    setText(f.text, text);
    setText(f.rtt, session.connected && session.rttMs !== null ? `${formatNumber(session.rttMs, 0)} ms` : "—");
    // Age of the newest snapshot: server time now − its timestamp, once the clock offset is known.
    let age = "—";
    if (session.connected && session.latest) {
      const t = session.latest.t;
      const ageMs = session.clockOffsetMs !== null && Number.isFinite(t)
        ? session.serverNowMs() - t * 1000
        : now - session.lastTelemetryMs;
      age = `${formatNumber(Math.max(0, ageMs), 0)} ms`;
    }
    setText(f.age, age);
    const lost = everConnected && !session.connected;
    if (banner.hidden === lost) banner.hidden = !lost;
    if (lost) {
      setText(b.detail, session.status === "connecting"
        ? `Reconnecting (attempt ${session.attempt})…`
        : `Reconnecting in ${Math.max(0, (session.retryAt - now) / 1000).toFixed(1)} s (attempt ${session.attempt + 1}).`);
    }
    document.body.classList.toggle("disconnected", lost);
    document.body.classList.toggle("conn-connecting", !everConnected && !session.connected);
  }
  setInterval(refresh, 200);
  session.on("status", refresh);
  refresh();
  return { refresh };
}

/** Link and loop figures. setState(snapshot | null). */
export function createHealth({ root }) {
  const f = fields(root);
  const mark = (el, cls) => {
    el.classList.toggle("bad", cls === "bad");
    el.classList.toggle("warnish", cls === "warn");
  };
  return {
    setState(snap) {
      if (root.classList.contains("stale") !== (snap === null)) root.classList.toggle("stale", snap === null);
      if (!snap) return;
      const loop = snap.loop || {};
      const link = snap.link || {};
      setText(f.measured_hz, formatNumber(loop.measured_hz, 1));
      setText(f.rate_hz, formatNumber(loop.rate_hz, 0));
      if (Number.isFinite(loop.measured_hz) && Number.isFinite(loop.rate_hz)) {
        const r = loop.measured_hz / loop.rate_hz;
        mark(f.measured_hz, r < 0.9 ? "bad" : r < 0.98 ? "warn" : "");
      }
      setText(f.overruns, String(loop.overruns ?? "—"));
      mark(f.overruns, loop.overruns > 0 ? "warn" : "");
      setText(f.missed, String(loop.missed ?? "—"));
      setText(f.jitter, formatNumber(loop.jitter_p99_us, 0));
      setText(f.realtime, String(loop.realtime ?? "—"));
      // The link age only matters while running; idle, nobody needs to heartbeat.
      setText(f.link_age, snap.state === "running" || snap.state === "stopping" ? formatNumber(link.age_s, 2) : "—");
      setText(f.link_timeout, formatNumber(link.timeout_s, 2));
      if (Number.isFinite(link.age_s) && Number.isFinite(link.timeout_s)) {
        mark(f.link_age, snap.state === "running" && link.age_s > link.timeout_s * 0.6 ? "warn" : "");
      }
      setText(f.dropped, String(session.dropped.total));
      setText(f.offset, session.clockOffsetMs === null ? "—" : formatNumber(session.clockOffsetMs, 1));
      const sp = snap.setpoint || {};
      setText(f.setpoint, `${formatNumber(sp.linear, 2)} m/s · ${formatNumber(sp.angular, 2)} rad/s`);
    },
  };
}
