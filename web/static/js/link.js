// The link panel and the top bar's governor badge (issue 20 §4): what the operator's link is like, measured.
//
// - round trip and jitter: this page's pings (min-RTT clock offset, session.js);
// - telemetry age: now on the server's monotonic clock (client clock + offset) − the snapshot's mono_t;
// - commands dropped: acks that said "dropped" (stale: too old when they reached the robot; reordered);
// - clock sync: whether the server could read this page's stamps yet (until then: arrival-time rules);
// - telemetry via: the path of the last snapshot shown (the WebRTC data channel while the video is WebRTC);
// - the latency governor: the snapshot's link.governor ("speed capped: link 420 ms" in the top bar);
// - a verdict, good / degraded / bad, from the round trip and the telemetry age (thresholds below, the
//   governor's defaults: docs/networks.md).

import { session } from "./session.js";
import { formatNumber, setText } from "./format.js";

const DEGRADED_MS = 150;   // a round trip or telemetry age above this: degraded
const BAD_MS = 400;        // above this: bad (operators' performance plateaus there)

function fields(root) {
  const out = {};
  for (const el of root.querySelectorAll("[data-field]")) out[el.dataset.field] = el;
  return out;
}

export function verdict(rttMs, ageMs) {
  const worst = Math.max(Number.isFinite(rttMs) ? rttMs : 0, Number.isFinite(ageMs) ? ageMs : 0);
  if (!Number.isFinite(rttMs) && !Number.isFinite(ageMs)) return "unknown";
  return worst > BAD_MS ? "bad" : worst > DEGRADED_MS ? "degraded" : "good";
}

export function createLinkPanel({ root, badge }) {
  const f = fields(root);
  return {
    setState(snap) {
      root.classList.toggle("stale", snap === null);
      if (!snap) {
        badge.hidden = true;
        return;
      }
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
      setText(f.sync, session.syncs >= 2 ? "synced" : "not synced (arrival-time rules)");
      if (f.telemetry_via) setText(f.telemetry_via, session.telemetryVia);
      const cmdAge = Number.isFinite(link.command_age_s) ? link.command_age_s * 1000 : null;
      setText(f.command_age, cmdAge === null ? "—" : formatNumber(cmdAge, 0));
      const state = gov.enabled === false ? "off" : gov.state || "—";
      const delayMs = Number.isFinite(gov.delay_s) ? gov.delay_s * 1000 : null;
      setText(f.governor, state === "capped" ? `capped to ${Math.round((gov.scale ?? 1) * 100)} %` : state);
      const v = verdict(rtt, ageMs);
      setText(f.verdict, v);
      f.verdict.className = `verdict verdict-${v}`;
      const capped = state === "capped" || state === "stop";
      badge.hidden = !capped;
      if (capped) {
        setText(badge, state === "stop" ? `stopped: link ${Math.round(delayMs ?? 0)} ms`
          : `speed capped: link ${Math.round(delayMs ?? 0)} ms`);
      }
    },
  };
}

function jitterOf(samples) {
  if (!samples || samples.length < 2) return null;
  const r = samples.map((s) => s.rtt);
  const mean = r.reduce((a, b) => a + b, 0) / r.length;
  return Math.sqrt(r.reduce((a, b) => a + (b - mean) ** 2, 0) / r.length);
}
