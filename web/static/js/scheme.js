// The live kinematic scheme (docs/arms.md): /api/robot.svg inlined once, then animated from the joint
// telemetry by changing `transform` attributes only — never by rebuilding the DOM (seeds/001 §5).
//
// Two kinds, from GET /api/robot's `scheme`:
// - "bodies": a planar body description (the SCARA arm). scheme.channels maps a body number to the
//   telemetry channel of its joint; each body's <g id="body-N"> gets bodyTransform(body, q), the same
//   string robotics.description.body_transform prints on the server (numbers as String(Number(v.toFixed(3)))).
// - "stewart": the platform's top and front views; each leg is translate(b) rotate(a) scale(L 1) from its
//   base joint to its platform joint, the platform matrix(R_view, t_view) (the exact projection of its plane),
//   as server/gateway/robot_svg.py stewart_transforms computes them.
//
// setState(null) greys the panel and keeps the last picture. The cost of each update is measured
// (stats: bench/bench_arms_dashboard.py reads window.teleopScheme.stats).

import { apiGet, describeError } from "./api.js";

const fmt = (v) => String(Number(v.toFixed(3)));
const DEG = 180 / Math.PI;

/** The transform of a body's <g> for joint value q (SI), as robotics.description.body_transform gives it. */
export function bodyTransform(body, q) {
  let dx = 0;
  let dy = 0;
  let a = 0;
  if (body.joint === 0) dx = q;
  else if (body.joint === 1) a = q;
  else {
    [dx, dy] = q;
    if (body.joint === 3) a = q[2];
  }
  return `translate(${fmt((body.origin[0] + dx) * 1000)} ${fmt((body.origin[1] + dy) * 1000)}) `
    + `rotate(${fmt(a * (180 / Math.PI))})`;
}

/** R_base_platform = Rx(roll)·Ry(pitch)·Rz(yaw) (DESIGN.md), rows. */
export function rotationXyz(roll, pitch, yaw) {
  const cr = Math.cos(roll); const sr = Math.sin(roll);
  const cp = Math.cos(pitch); const sp = Math.sin(pitch);
  const cy = Math.cos(yaw); const sy = Math.sin(yaw);
  return [
    [cp * cy, -cp * sy, sp],
    [cr * sy + sr * sp * cy, cr * cy - sr * sp * sy, -sr * cp],
    [sr * sy - cr * sp * cy, sr * cy + cr * sp * sy, cr * cp],
  ];
}

const VIEWS = { top: [0, 1], front: [0, 2] };

/** Element id → transform of the Stewart scheme for a pose {x_m, …, yaw_rad}. */
export function stewartTransforms(geometry, pose) {
  const t = [pose.x_m || 0, pose.y_m || 0, pose.z_m || 0];
  const R = rotationXyz(pose.roll_rad || 0, pose.pitch_rad || 0, pose.yaw_rad || 0);
  const out = {};
  const base = geometry.base_joints_m;
  const top = geometry.platform_joints_m.map((p) => [0, 1, 2].map((k) => t[k] + R[k][0] * p[0] + R[k][1] * p[1] + R[k][2] * p[2]));
  for (const [view, [u, v]] of Object.entries(VIEWS)) {
    out[`platform-${view}`] = `matrix(${R[u][0].toFixed(5)} ${R[v][0].toFixed(5)} ${R[u][1].toFixed(5)} `
      + `${R[v][1].toFixed(5)} ${fmt(t[u] * 1000)} ${fmt(t[v] * 1000)})`;
    for (let i = 0; i < base.length; i++) {
      const dx = (top[i][u] - base[i][u]) * 1000;
      const dy = (top[i][v] - base[i][v]) * 1000;
      out[`leg-${i + 1}-${view}`] = `translate(${fmt(base[i][u] * 1000)} ${fmt(base[i][v] * 1000)}) `
        + `rotate(${fmt(Math.atan2(dy, dx) * DEG)}) scale(${fmt(Math.hypot(dx, dy))} 1)`;
    }
  }
  return out;
}

const POSE = ["x_m", "y_m", "z_m", "roll_rad", "pitch_rad", "yaw_rad"];
const RING = 2048;

export function createScheme({ root, robot }) {
  const host = root.querySelector(".scheme-body");
  const hint = root.querySelector("#scheme-hint");
  const scheme = (robot && robot.scheme) || {};
  let svg = null;
  let targets = [];       // [{el, last}] per animated element
  let update = null;      // (values) -> void
  let pending = null;     // a snapshot that arrived before the SVG
  const stats = {
    updates: 0, changed: 0, totalMs: 0, ms: new Float64Array(RING),
    reset() { this.updates = this.changed = 0; this.totalMs = 0; },
    snapshot() {
      return { updates: this.updates, changed: this.changed, totalMs: this.totalMs,
        ms: Array.from(this.ms.subarray(0, Math.min(this.updates, RING))) };
    },
  };

  function set(target, value) {
    if (target.last !== value) {
      target.el.setAttribute("transform", value);
      target.last = value;
      stats.changed += 1;
    }
  }

  function buildBodies() {
    const byNumber = new Map((scheme.bodies || []).map((b) => [String(b.number), b]));
    for (const [number, channel] of Object.entries(scheme.channels || {})) {
      const el = svg.querySelector(`#body-${number}`);
      const body = byNumber.get(number);
      if (el && body) targets.push({ el, body, channel, last: el.getAttribute("transform") });
    }
    update = (values) => {
      for (const tg of targets) {
        const q = values[tg.channel];
        if (typeof q === "number" && Number.isFinite(q)) set(tg, bodyTransform(tg.body, q));
      }
    };
  }

  function buildStewart() {
    const geometry = robot.geometry;
    const byId = new Map();
    for (const el of svg.querySelectorAll(".leg, .platform")) {
      const tg = { el, last: el.getAttribute("transform") };
      byId.set(el.id, tg);
      targets.push(tg);
    }
    update = (values) => {
      if (values.pose_valid === 0) return;          // forward kinematics failed: keep the last picture
      const pose = {};
      for (const k of POSE) {
        const v = values[k];
        if (typeof v !== "number" || !Number.isFinite(v)) return;
        pose[k] = v;
      }
      for (const [id, transform] of Object.entries(stewartTransforms(geometry, pose))) {
        const tg = byId.get(id);
        if (tg) set(tg, transform);
      }
    };
  }

  async function load() {
    try {
      const res = await apiGet("/api/robot.svg", { as: "text" });
      if (!res.ok) throw new Error(`GET /api/robot.svg: ${describeError(res.error)}`);
      const doc = new DOMParser().parseFromString(res.data, "image/svg+xml");
      if (doc.documentElement.nodeName !== "svg") throw new Error("not an SVG document");
      svg = document.importNode(doc.documentElement, true);
      svg.classList.add("scheme-svg");
      host.replaceChildren(svg);
      if (scheme.kind === "stewart") buildStewart();
      else buildBodies();
      if (scheme.warnings && scheme.warnings.length) hint.textContent = `Description: ${scheme.warnings.join("; ")}`;
      root.dispatchEvent(new CustomEvent("scheme-ready", { bubbles: true, detail: { svg } }));
      if (pending) setState(pending);
    } catch (err) {
      host.textContent = `No scheme: ${err.message}`;
      root.classList.add("stale");
    }
  }

  function setState(snap) {
    root.classList.toggle("stale", !snap);
    if (!snap || !snap.values) return;
    if (!update) {
      pending = snap;
      return;
    }
    const t0 = performance.now();
    update(snap.values);
    const ms = performance.now() - t0;
    stats.ms[stats.updates % RING] = ms;
    stats.updates += 1;
    stats.totalMs += ms;
  }

  load();
  const panel = { setState, stats, get svg() { return svg; }, get targets() { return targets.length; } };
  window.teleopScheme = panel;
  return panel;
}
