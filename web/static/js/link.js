// The link panel and the top bar's governor badge (issue 20 §4): what the operator's link is like, measured.
//
// - round trip and jitter: this page's pings (min-RTT clock offset, session.js);
// - telemetry age: now on the server's monotonic clock (client clock + offset) − the snapshot's mono_t;
// - commands dropped: acks that said "dropped" (stale: too old when they reached the robot; reordered);
// - clock sync: whether the server could read this page's stamps yet (until then: arrival-time rules);
// - telemetry via: the path of the last snapshot shown (the WebRTC data channel while the video is WebRTC);
// - the latency governor: the snapshot's link.governor ("speed capped: link 420 ms" in the top bar);
// - video age (capture → shown, the video panel's) and what this page receives, per stream: telemetry (its JSON,
//   socket and data channel) and video (the transport's bytes), kbit/s over the last second or more; the video's
//   RTP loss (WebRTC only: a websocket's TCP hides its retransmissions from the page); and the telemetry
//   socket's retransmitted share as the robot's kernel counts it (each server sync carries it: session.tcpLink);
// - a verdict, good / degraded / bad, from the round trip and the telemetry age (thresholds from the robot
//   description, in config: docs/networks.md).

import { session } from "./session.js";
import { formatNumber, setText } from "./format.js";

// a round trip or telemetry age above `degraded` ms: degraded; above `bad`: bad. The robot description's
// link_verdict_ms (config: telemetry.link_degraded_ms, link_bad_ms); these are its defaults (a recording made
// before it existed has none)
export const VERDICT_MS = Object.freeze({ degraded: 150, bad: 400 });

function fields(root) {
  const out = {};
  for (const el of root.querySelectorAll("[data-field]")) out[el.dataset.field] = el;
  return out;
}

export function verdict(rttMs, ageMs, limits = VERDICT_MS) {
  const worst = Math.max(Number.isFinite(rttMs) ? rttMs : 0, Number.isFinite(ageMs) ? ageMs : 0);
  if (!Number.isFinite(rttMs) && !Number.isFinite(ageMs)) return "unknown";
  return worst > limits.bad ? "bad" : worst > limits.degraded ? "degraded" : "good";
}

function limitsOf(robot) {
  const l = robot && robot.link_verdict_ms;
  return l && Number.isFinite(l.degraded) && Number.isFinite(l.bad) ? l : VERDICT_MS;
}

/** kbit/s of a growing byte counter, over the last ``RATE_WINDOW_MS`` or more (null until there is a window). */
const RATE_WINDOW_MS = 1000;
export function rateMeter() {
  let from = null;
  let last = null;
  return (bytes, nowMs) => {
    if (from === null || bytes < from.bytes) from = { bytes, t: nowMs };  // first, or a counter that restarted
    if (nowMs - from.t >= RATE_WINDOW_MS) {
      last = ((bytes - from.bytes) * 8) / (nowMs - from.t);  // bits per ms = kbit/s
      from = { bytes, t: nowMs };
    }
    return last;
  };
}

export function createLinkPanel({ root, badge, video = () => null }) {
  const f = fields(root);
  const telemetryRate = rateMeter();
  const videoRate = rateMeter();
  const channelRate = rateMeter();
  let videoStats = null;       // the video transport's last figures (polled once a second: getStats is async)
  let polling = false;
  let polledAt = -Infinity;
  let videoKbit = null;
  let channelKbit = null;      // the WebRTC telemetry channel's (as of the last poll)
  function pollVideo(nowMs) {
    const v = video();
    if (!v || !v.transportStats) {
      videoStats = null;
      videoKbit = null;
      channelKbit = null;
      return;
    }
    if (polling || nowMs - polledAt < RATE_WINDOW_MS) return;
    polling = true;
    polledAt = nowMs;
    v.transportStats().then((st) => {
      videoStats = st;
      const now = performance.now();
      if (st && Number.isFinite(st.bytes)) videoKbit = videoRate(st.bytes, now);
      channelKbit = st && st.telemetry ? channelRate(st.telemetry.bytes || 0, now) : null;
    }, () => { videoStats = null; }).finally(() => { polling = false; });
  }
  function showStreams(nowMs) {
    pollVideo(nowMs);
    const socketKbit = telemetryRate(session.rxBytes, nowMs);
    const tkbit = socketKbit === null ? null : socketKbit + (channelKbit || 0);
    setText(f.telemetry_kbit, tkbit === null ? "—" : formatNumber(tkbit, 0));
    setText(f.video_kbit, videoStats && videoKbit !== null ? formatNumber(videoKbit, 0) : "—");
    const lost = videoStats && Number.isFinite(videoStats.packetsLost) ? videoStats.packetsLost : null;
    const got = videoStats && Number.isFinite(videoStats.packetsReceived) ? videoStats.packetsReceived : null;
    setText(f.video_loss, lost === null || got === null || lost + got <= 0 ? "—"
      : formatNumber((100 * Math.max(0, lost)) / (lost + got), 1));
    const v = video();
    const age = v && v.stats ? v.stats().latencyMs : null;
    setText(f.video_age, Number.isFinite(age) ? formatNumber(age, 0) : "—");
  }
  // The panel is drawn with each render, and renders follow the snapshots: while none comes (a stalled link, a
  // frozen runtime) the last snapshot is drawn again every HOLD_REFRESH_MS, so the telemetry age and the
  // verdict keep growing, and the kbit/s fall, instead of freezing at their last values.
  const HOLD_REFRESH_MS = 500;
  let lastSnap = null;
  let drawnAt = -Infinity;
  setInterval(() => {
    if (lastSnap && performance.now() - drawnAt >= HOLD_REFRESH_MS) draw(lastSnap);
  }, HOLD_REFRESH_MS);
  function draw(snap) {
    drawnAt = performance.now();
    const link = snap.link || {};
    const gov = link.governor || {};
    const rtt = session.rttMs;
    const ageMs = session.snapshotAgeMs(snap);
    const jitter = jitterOf(session.offsetSamples);
    setText(f.rtt, rtt === null ? "—" : formatNumber(rtt, 0));
    setText(f.jitter, jitter === null ? "—" : formatNumber(jitter, 0));
    setText(f.telemetry_age, ageMs === null ? "—" : formatNumber(ageMs, 0));
    setText(f.stale, String(session.commandsDropped.stale));
    setText(f.reordered, String(session.commandsDropped.reordered));
    const tcp = session.tcpLink;
    if (f.tcp_retrans) setText(f.tcp_retrans, tcp && Number.isFinite(tcp.retrans_pct) ? formatNumber(tcp.retrans_pct, 1) : "—");
    if (f.telemetry_kbit) showStreams(performance.now());
    setText(f.sync, session.syncs >= 2 ? "synced" : "not synced (arrival-time rules)");
    if (f.telemetry_via) setText(f.telemetry_via, session.telemetryVia);
    const cmdAge = Number.isFinite(link.command_age_s) ? link.command_age_s * 1000 : null;
    setText(f.command_age, cmdAge === null ? "—" : formatNumber(cmdAge, 0));
    const state = gov.enabled === false ? "off" : gov.state || "—";
    const delayMs = Number.isFinite(gov.delay_s) ? gov.delay_s * 1000 : null;
    setText(f.governor, state === "capped" ? `capped to ${Math.round((gov.scale ?? 1) * 100)} %` : state);
    const v = verdict(rtt, ageMs, limitsOf(session.robot));
    setText(f.verdict, v);
    f.verdict.className = `verdict verdict-${v}`;
    const capped = state === "capped" || state === "stop";
    badge.hidden = !capped;
    if (capped) {
      setText(badge, state === "stop" ? `stopped: link ${Math.round(delayMs ?? 0)} ms`
        : `speed capped: link ${Math.round(delayMs ?? 0)} ms`);
    }
  }
  return {
    setState(snap) {
      root.classList.toggle("stale", snap === null);
      lastSnap = snap;
      if (!snap) {
        badge.hidden = true;
        return;
      }
      draw(snap);
    },
  };
}

function jitterOf(samples) {
  if (!samples || samples.length < 2) return null;
  const r = samples.map((s) => s.rtt);
  const mean = r.reduce((a, b) => a + b, 0) / r.length;
  return Math.sqrt(r.reduce((a, b) => a + (b - mean) ** 2, 0) / r.length);
}
