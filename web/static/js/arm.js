// The SCARA arm's panel (docs/arms.md): joint sliders, click-to-move in the workspace, readouts.
//
// The workspace (GET /api/robot `workspace`: per elbow, the outline robotics.kinematics.scara's
// Scara.workspace gives for the soft joint limits) is drawn into the live scheme (scheme.js) under the
// arm; a click there sends a `tool` target (inverse kinematics with the elbow chosen here) at that point.
// Sliders send a `joints` target when released. Commands go over the session's socket and are refused
// by the server with the reason (beyond the limits, unreachable, not running…), which is shown here.

import { session } from "./session.js";
import { formatNumber, setText } from "./format.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const DEG = 180 / Math.PI;

export function createArm({ root, robot }) {
  const limits = robot.limits || {};
  const status = root.querySelector("#arm-status");
  const sliders = [...root.querySelectorAll("input[type=range][data-joint]")];
  const field = (name) => root.querySelector(`[data-field="${name}"]`);
  const dragging = new Set();
  let target = null;   // the click marker
  let last = null;

  function say(text, kind = "") {
    setText(status, text);
    status.dataset.kind = kind;
  }

  async function send(type, fields, what) {
    const res = await session.command(type, fields);
    if (res.ok) say(`${what}: accepted`, "ok");
    else say(`${what} refused: ${res.error.message || res.error.code} (${res.error.code})`, "error");
    return res;
  }

  // ---------------------------------------------------------------- sliders
  for (const s of sliders) {
    const [lo, hi] = limits[s.dataset.joint] || [-Math.PI, Math.PI];
    s.min = (lo * DEG).toFixed(1);
    s.max = (hi * DEG).toFixed(1);
    s.value = "0";
    const out = root.querySelector(`#${s.id.replace("slider", "out")}`);
    const show = () => { out.value = `${Number(s.value).toFixed(1)}°`; };
    s.addEventListener("input", () => { dragging.add(s); show(); });
    s.addEventListener("change", () => {
      dragging.delete(s);
      const q = Object.fromEntries(sliders.map((x) => [x.dataset.joint, Number(x.value) / DEG]));
      send("joints", q, `joints ${sliders.map((x) => `${Number(x.value).toFixed(1)}°`).join(", ")}`);
    });
    s.addEventListener("blur", () => dragging.delete(s));
    show();
  }

  function elbow() {
    const r = root.querySelector("input[name=elbow]:checked");
    return r ? Number(r.value) : 1;
  }

  // ---------------------------------------------------------------- the workspace in the scheme
  function attach(svg) {
    const scene = svg.querySelector("#scene") || svg;
    if (scene.querySelector(".workspace")) return;
    const g = document.createElementNS(SVG_NS, "g");
    g.setAttribute("class", "workspace");
    for (const [e, outline] of Object.entries(robot.workspace || {})) {
      const p = document.createElementNS(SVG_NS, "path");
      p.setAttribute("d", "M" + outline.map(([x, y]) => `${(x * 1000).toFixed(1)} ${(y * 1000).toFixed(1)}`).join(" L") + " Z");
      p.setAttribute("class", `workspace-elbow elbow-${e === "1" ? "up" : "down"}`);
      p.setAttribute("fill-rule", "nonzero");
      g.appendChild(p);
    }
    scene.insertBefore(g, scene.firstChild);
    target = document.createElementNS(SVG_NS, "circle");
    target.setAttribute("class", "tool-target");
    target.setAttribute("r", "12");
    target.setAttribute("visibility", "hidden");
    scene.appendChild(target);
    svg.classList.add("clickable");
    svg.addEventListener("click", (e) => {
      const ctm = scene.getScreenCTM();
      if (!ctm) return;
      const pt = new DOMPoint(e.clientX, e.clientY).matrixTransform(ctm.inverse());
      const x = pt.x / 1000;
      const y = pt.y / 1000;
      target.setAttribute("cx", pt.x.toFixed(1));
      target.setAttribute("cy", pt.y.toFixed(1));
      target.setAttribute("visibility", "visible");
      send("tool", { x_m: x, y_m: y, elbow: elbow() },
        `tool to (${formatNumber(x * 1000, 0)}, ${formatNumber(y * 1000, 0)}) mm, elbow ${elbow() > 0 ? "+1" : "−1"}`);
    });
  }
  const ready = window.teleopScheme && window.teleopScheme.svg;
  if (ready) attach(ready);
  document.addEventListener("scheme-ready", (e) => attach(e.detail.svg));

  // ---------------------------------------------------------------- readouts
  function describeSetpoint(sp) {
    if (!sp || !sp.kind) return "—";
    const src = sp.source ? ` (${sp.source})` : "";
    switch (sp.kind) {
      case "joints": case "follow":
        return `${sp.kind} ${formatNumber(sp.q1_rad * DEG, 1)}°, ${formatNumber(sp.q2_rad * DEG, 1)}°${src}`;
      case "tool":
        return `tool ${formatNumber(sp.x_m * 1000, 0)}, ${formatNumber(sp.y_m * 1000, 0)} mm, elbow ${sp.elbow > 0 ? "+1" : "−1"}${src}`;
      case "jog":
        return `jog ${formatNumber(sp.q1_rad_s * DEG, 1)}, ${formatNumber(sp.q2_rad_s * DEG, 1)} °/s${src}`;
      case "tool_jog":
        return `tool jog ${formatNumber(sp.vx_m_s * 1000, 0)}, ${formatNumber(sp.vy_m_s * 1000, 0)} mm/s${src}`;
      default:
        return `${sp.kind}${src}`;
    }
  }

  function setState(snap) {
    root.classList.toggle("stale", !snap);
    if (!snap || !snap.values) return;
    const v = snap.values;
    if (v === last) return;
    last = v;
    setText(field("q1"), formatNumber(v.q1_rad * DEG, 1));
    setText(field("q2"), formatNumber(v.q2_rad * DEG, 1));
    setText(field("x"), formatNumber(v.tool_x_m * 1000, 0));
    setText(field("y"), formatNumber(v.tool_y_m * 1000, 0));
    setText(field("setpoint"), describeSetpoint(snap.setpoint));
    for (const s of sliders) {
      const q = v[s.dataset.joint];
      if (!dragging.has(s) && document.activeElement !== s && Number.isFinite(q)) {
        s.value = (q * DEG).toFixed(1);
        root.querySelector(`#${s.id.replace("slider", "out")}`).value = `${(q * DEG).toFixed(1)}°`;
      }
    }
  }

  return { setState };
}
