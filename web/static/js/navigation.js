// Navigation panel: artificial horizon, compass, field map, and the heading and
// calibration commands. One module, setState(snapshot | null) like every panel.
//
// Conventions (DESIGN.md): yaw is ENU (0 = east, counter-clockwise), compass
// heading = (90° − yaw) mod 360; positive pitch is nose-down, positive roll is
// right side down. The map draws world x east to the right and y north up.
//
// Vision (docs/vision.md): the map draws the fiducial markers of the map (a square with a tick where
// its face looks, its id; filled while the camera sees it), the latest marker fix of the estimator
// (snapshot.estimation.marker_fix: a diamond in a circle of its 1-σ radius, amber when the filter
// refused it), and a "Go to marker" form posts POST /api/go_to_marker (refusals are shown as they
// come, e.g. not_in_view).
//
// Until the magnetometer is calibrated (snapshot.estimation.heading_calibrated false) the
// heading may be ~10° off: the compass carries an "UNCAL" marker and a dashed amber bezel,
// and the warning stands above the heading form, so it is read before a turn is sent.

import { apiFetch, describeError, mayAct, whoAmI } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const DEG = 180 / Math.PI;
const TRAIL = 300;

function el(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// Set an attribute or a text only when it changes: a rover at rest sends the same pose at every snapshot
// (20 a second), and re-setting an SVG transform repaints the drawing each time (the panel was a quarter of
// an idle dashboard's CPU in Chromium). The positions are drawn to the centimetre and the angles to the
// tenth of a degree (a pixel of the map is ~1.5 cm), so sensor noise below that does not repaint either.
function put(node, name, value) {
  const last = node.teleopLast || (node.teleopLast = {});
  if (last[name] === value) return;
  last[name] = value;
  if (name === "text") node.textContent = value;
  else node.setAttribute(name, value);
}

function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

function createHorizon(container) {
  const svg = el("svg", { viewBox: "-50 -50 100 100", class: "nav-horizon", role: "img",
    "aria-label": "Attitude indicator" }, container);
  const clip = el("clipPath", { id: "nav-horizon-clip" }, el("defs", {}, svg));
  el("circle", { r: 48 }, clip);
  const world = el("g", { "clip-path": "url(#nav-horizon-clip)" }, svg);
  const card = el("g", {}, world);
  el("rect", { x: -150, y: -150, width: 300, height: 150, class: "sky" }, card);
  el("rect", { x: -150, y: 0, width: 300, height: 150, class: "ground" }, card);
  el("line", { x1: -150, y1: 0, x2: 150, y2: 0, class: "horizon-line" }, card);
  for (const p of [-20, -10, 10, 20]) {
    const y = -p * 1.5;
    el("line", { x1: -10, y1: y, x2: 10, y2: y, class: "pitch-line" }, card);
  }
  el("path", { d: "M-22 0 H-8 L-4 4 M22 0 H8 L4 4", class: "aircraft" }, svg);
  el("circle", { r: 48, class: "bezel" }, svg);
  const text = el("text", { x: 0, y: 44, class: "nav-readout", "text-anchor": "middle" }, svg);
  return {
    set(roll, pitch) {
      if (roll === null || pitch === null) {
        put(text, "text", "—");
        return;
      }
      // nose-down (positive pitch) moves the horizon up in view; right side down rolls the card
      put(card, "transform", `rotate(${(-roll * DEG).toFixed(1)}) translate(0 ${(-pitch * DEG * 1.5).toFixed(1)})`);
      put(text, "text", `roll ${(roll * DEG).toFixed(1)}°  pitch ${(pitch * DEG).toFixed(1)}°`);
    },
  };
}

function createCompass(container) {
  const svg = el("svg", { viewBox: "-50 -50 100 100", class: "nav-compass", role: "img",
    "aria-label": "Compass" }, container);
  el("circle", { r: 46, class: "bezel" }, svg);
  const cardG = el("g", {}, svg);
  for (let d = 0; d < 360; d += 30) {
    const a = d / DEG;
    el("line", { x1: 40 * Math.sin(a), y1: -40 * Math.cos(a), x2: 45 * Math.sin(a), y2: -45 * Math.cos(a),
      class: "tick" }, cardG);
  }
  for (const [label, d] of [["N", 0], ["E", 90], ["S", 180], ["W", 270]]) {
    const a = d / DEG;
    const t = el("text", { x: 33 * Math.sin(a), y: -33 * Math.cos(a) + 3, "text-anchor": "middle",
      class: label === "N" ? "cardinal north" : "cardinal" }, cardG);
    t.textContent = label;
  }
  const target = el("path", { d: "M0 -46 L-4 -38 L4 -38 Z", class: "target", visibility: "hidden" }, cardG);
  el("path", { d: "M0 -30 L5 0 L0 -5 L-5 0 Z", class: "lubber" }, svg);
  const text = el("text", { x: 0, y: 20, "text-anchor": "middle", class: "nav-readout big" }, svg);
  const uncal = el("g", { class: "uncal-marker", visibility: "hidden" }, svg);
  el("rect", { x: -17, y: 25, width: 34, height: 10, rx: 2 }, uncal);
  el("text", { x: 0, y: 32.5, "text-anchor": "middle" }, uncal).textContent = "UNCAL";
  let calibrated = null;
  return {
    /** true, false, or null (no magnetometer status): only false shows the marker. */
    setCalibrated(value) {
      if (value === calibrated) return;
      calibrated = value;
      const warn = value === false;
      uncal.setAttribute("visibility", warn ? "visible" : "hidden");
      svg.classList.toggle("uncalibrated", warn);
      svg.setAttribute("aria-label", warn ? "Compass (uncalibrated: may be about 10° off)" : "Compass");
    },
    set(heading, targetDeg) {
      if (heading === null) {
        put(text, "text", "—");
        return;
      }
      // the card turns so that the current heading sits under the lubber line at the top
      put(cardG, "transform", `rotate(${(-heading).toFixed(1)})`);
      put(text, "text", `${heading.toFixed(0).padStart(3, "0")}°`);
      if (targetDeg === null) put(target, "visibility", "hidden");
      else {
        put(target, "visibility", "visible");
        put(target, "transform", `rotate(${targetDeg.toFixed(1)})`);
      }
    },
  };
}

function createMap(container, robot) {
  const world = robot.world || {};
  const [w, h] = world.size_m || [6, 4];
  const pad = 0.2;
  const svg = el("svg", { viewBox: `${-pad} ${-pad} ${w + 2 * pad} ${h + 2 * pad}`, class: "nav-map", role: "img",
    "aria-label": "Map of the field" }, container);
  // world y is north (up): flip once, draw in world coordinates
  const g = el("g", { transform: `translate(0 ${h}) scale(1 -1)` }, svg);
  el("rect", { x: 0, y: 0, width: w, height: h, class: "field" }, g);
  for (let x = 1; x < w; x += 1) el("line", { x1: x, y1: 0, x2: x, y2: h, class: "grid" }, g);
  for (let y = 1; y < h; y += 1) el("line", { x1: 0, y1: y, x2: w, y2: y, class: "grid" }, g);
  for (const r of world.ramps || []) {
    el("rect", { x: -r.size[0] / 2, y: -r.size[1] / 2, width: r.size[0], height: r.size[1], class: "ramp",
      transform: `translate(${r.center[0]} ${r.center[1]}) rotate(${r.yaw_deg || 0})` }, g);
  }
  for (const b of world.boxes || []) {
    el("rect", { x: -b.size[0] / 2, y: -b.size[1] / 2, width: b.size[0], height: b.size[1], class: "box",
      transform: `translate(${b.center[0]} ${b.center[1]}) rotate(${b.yaw_deg || 0})` }, g);
  }
  for (const wall of world.walls || []) {
    el("line", { x1: wall.from[0], y1: wall.from[1], x2: wall.to[0], y2: wall.to[1], class: "wall" }, g);
  }
  const anchors = (robot.uwb && robot.uwb.anchors) || [];
  for (const a of anchors) el("rect", { x: a[0] - 0.06, y: a[1] - 0.06, width: 0.12, height: 0.12, class: "anchor" }, g);
  const markerNodes = new Map();
  for (const m of mapMarkers(robot)) {
    // a square on the wall, a tick out of its face (ENU yaw), and the id beside it (text drawn unflipped)
    const mg = el("g", { class: "marker", "data-id": String(m.id),
      transform: `translate(${m.x.toFixed(3)} ${m.y.toFixed(3)}) rotate(${(m.yaw * DEG).toFixed(1)})` }, g);
    const sq = el("rect", { x: -0.06, y: -0.06, width: 0.12, height: 0.12, fill: "none", stroke: "#39ff14",
      "stroke-width": 0.025 }, mg);
    el("line", { x1: 0.06, y1: 0, x2: 0.2, y2: 0, stroke: "#39ff14", "stroke-width": 0.02 }, mg);
    const label = el("text", { x: 0, y: 0, "font-size": 0.16, fill: "#39ff14", "text-anchor": "middle",
      transform: `rotate(${(-m.yaw * DEG).toFixed(1)}) translate(0 -0.14) scale(1 -1)` }, mg);
    label.textContent = String(m.id);
    markerNodes.set(m.id, { sq, seen: false });
  }
  const markerFix = el("g", { class: "marker-fix", visibility: "hidden" }, g);
  const fixSigma = el("circle", { r: 0.1, fill: "none", stroke: "#39ff14", "stroke-width": 0.015,
    "stroke-dasharray": "0.04 0.03" }, markerFix);
  const fixDot = el("path", { d: "M0 -0.07 L0.07 0 L0 0.07 L-0.07 0 Z", fill: "#39ff14" }, markerFix);
  // other modules' drawings in world coordinates (the mission editor, mission.js), under the rover's marks
  const overlay = el("g", { class: "map-overlay" }, g);
  const trail = el("polyline", { points: "", class: "trail" }, g);
  const truth = el("path", { d: "M0.18 0 L-0.12 0.1 L-0.12 -0.1 Z", class: "truth", visibility: "hidden" }, g);
  const est = el("path", { d: "M0.18 0 L-0.12 0.1 L-0.12 -0.1 Z", class: "estimate", visibility: "hidden" }, g);
  const fix = el("circle", { r: 0.05, class: "uwb-fix", visibility: "hidden" }, g);
  const points = [];
  let lastTrail = 0;
  const place = (node, x, y, yaw) => {
    if (x === null || y === null) {
      put(node, "visibility", "hidden");
      return;
    }
    put(node, "visibility", "visible");
    put(node, "transform", `translate(${x.toFixed(2)} ${y.toFixed(2)}) rotate(${((yaw || 0) * DEG).toFixed(1)})`);
  };
  return {
    svg,
    overlay,
    size_m: [w, h],
    /** The world point (x east, y north, m) under a client (screen) point. */
    toWorld(clientX, clientY) {
      const m = g.getScreenCTM();
      if (!m) return null;
      const p = new DOMPoint(clientX, clientY).matrixTransform(m.inverse());
      return { x: p.x, y: p.y };
    },
    setVision(values, fix) {
      for (const [id, node] of markerNodes) {
        const seen = num(values[`marker_${id}_range_m`]) !== null;
        if (seen !== node.seen) {
          node.seen = seen;
          node.sq.setAttribute("fill", seen ? "#39ff14" : "none");
          node.sq.parentNode.classList.toggle("in-view", seen);
        }
      }
      if (!fix || num(fix.x_m) === null || num(fix.y_m) === null) {
        put(markerFix, "visibility", "hidden");
        return;
      }
      const colour = fix.accepted ? "#39ff14" : "#f3b619";
      put(markerFix, "visibility", "visible");
      put(markerFix, "transform", `translate(${fix.x_m.toFixed(2)} ${fix.y_m.toFixed(2)})`);
      put(markerFix, "data-accepted", fix.accepted ? "true" : "false");
      put(fixSigma, "r", Math.max(0.03, Math.min(2, num(fix.sigma_m) || 0.1)).toFixed(2));
      put(fixSigma, "stroke", colour);
      put(fixDot, "fill", colour);
    },
    set(values, truthPose) {
      const ex = num(values.est_x_m);
      const ey = num(values.est_y_m);
      place(est, ex, ey, num(values.yaw_rad));
      const ux = num(values.uwb_x_m);
      const uy = num(values.uwb_y_m);
      if (ux === null || uy === null) put(fix, "visibility", "hidden");
      else {
        put(fix, "visibility", "visible");
        put(fix, "cx", ux.toFixed(2));
        put(fix, "cy", uy.toFixed(2));
      }
      if (truthPose) place(truth, num(truthPose.x), num(truthPose.y), num(truthPose.yaw));
      const px = ex !== null ? ex : truthPose ? num(truthPose.x) : null;
      const py = ey !== null ? ey : truthPose ? num(truthPose.y) : null;
      const now = performance.now();
      if (px !== null && py !== null && now - lastTrail > 200) {
        lastTrail = now;
        const point = `${px.toFixed(2)},${py.toFixed(2)}`;
        if (point !== points[points.length - 1]) {  // at rest the trail does not grow (nor repaint)
          points.push(point);
          if (points.length > TRAIL) points.shift();
          put(trail, "points", points.join(" "));
        }
      }
    },
  };
}

/** The marker map: the vision pipeline's (as declared to the runtime) or the simulated world's. */
function mapMarkers(robot) {
  const declared = robot.external && robot.external.vision && robot.external.vision.markers;
  if (declared && declared.length) return declared.map((m) => ({ id: m.id, x: m.x_m, y: m.y_m, yaw: m.yaw_rad }));
  const world = (robot.world && robot.world.markers) || [];
  return world.filter((m) => Array.isArray(m.position))
    .map((m) => ({ id: m.id, x: m.position[0], y: m.position[1], yaw: ((m.yaw_deg || 0) * Math.PI) / 180 }));
}

function createGoToMarker(root, robot, say) {
  const ids = mapMarkers(robot).map((m) => m.id);
  if (!ids.length) return;
  const form = document.createElement("form");
  form.id = "marker-form";
  form.className = "nav-form";
  form.setAttribute("aria-label", "Drive to a fiducial marker and stop short of it");
  form.innerHTML = `
    <label for="marker-select">Marker</label>
    <select id="marker-select"><option value="">nearest in view</option></select>
    <label for="marker-standoff">stop at</label>
    <input id="marker-standoff" type="number" min="0.2" max="10" step="0.1" value="0.6" required>
    <span>m</span>
    <button type="submit">Go to marker</button>`;
  const select = form.querySelector("#marker-select");
  for (const id of ids) {
    const o = document.createElement("option");
    o.value = String(id);
    o.textContent = String(id);
    select.appendChild(o);
  }
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { standoff_m: Number(form.querySelector("#marker-standoff").value) };
    if (select.value !== "") body.marker_id = Number(select.value);
    try {
      const reply = await post("/api/go_to_marker", body);
      say(`driving to marker ${reply.behavior.marker_id}, stopping ${body.standoff_m} m short`);
    } catch (err) {
      say(err.message, true);
    }
  });
  const anchor = root.querySelector("#nav-status");
  root.insertBefore(form, anchor);
  const legend = root.querySelector(".nav-legend");
  if (legend) {
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = "#39ff14";
    legend.append(sw, "marker / marker fix");
  }
}

async function post(path, body) {
  const res = await apiFetch(path, { body });
  if (!res.ok) throw new Error(describeError(res.error));
  return res.data;
}

export function createNavigation({ root, robot }) {
  const body = root.querySelector(".nav-body");
  const instruments = document.createElement("div");
  instruments.className = "nav-instruments";
  body.appendChild(instruments);
  const horizon = createHorizon(instruments);
  const compass = createCompass(instruments);
  const mapBox = document.createElement("div");
  mapBox.className = "nav-map-box";
  body.appendChild(mapBox);
  const map = createMap(mapBox, robot);
  // the map for modules that draw on it (mission.js): found on the panel, or announced when it comes later
  root.teleopMap = map;
  root.dispatchEvent(new CustomEvent("nav-map-ready", { bubbles: true, detail: { map } }));

  const form = root.querySelector("#heading-form");
  const input = root.querySelector("#heading-input");
  const status = root.querySelector("#nav-status");
  const calButton = root.querySelector("#magcal-button");
  createGoToMarker(root, robot, (text, isError) => say(text, isError));
  const warningEl = root.querySelector("#heading-warning");
  let headingWarning = null;     // the server's sentence while uncalibrated, else null
  const say = (text, isError = false) => {
    put(status, "text", text);
    status.classList.toggle("error", isError);
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const deg = Number(input.value);
    try {
      const reply = await post("/api/heading", { heading_deg: deg });
      const warning = (reply && reply.warning) || headingWarning;
      say(`turning to ${deg.toFixed(0)}°${warning ? " — heading uncalibrated, may be ~10° off" : ""}`);
    } catch (err) {
      say(err.message, true);
    }
  });
  // the calibration stores a setting: admins only (docs/security.md); for anyone else the button says so
  whoAmI().then((m) => {
    if (mayAct(m, "admin")) return;
    calButton.disabled = true;
    calButton.title = "the compass calibration needs an admin";
  });
  calButton.addEventListener("click", async () => {
    try {
      await post("/api/calibration/magnetometer");
      say("magnetometer calibration: turning in place…");
    } catch (err) {
      say(err.message, true);
    }
  });

  function showWarning(text) {
    headingWarning = text || null;
    const show = headingWarning !== null;
    if (warningEl.hidden === show) warningEl.hidden = !show;
    if (show && warningEl.textContent !== `⚠ ${headingWarning}`) warningEl.textContent = `⚠ ${headingWarning}`;
  }

  return {
    setState(snap) {
      root.classList.toggle("stale", !snap);
      if (!snap) return;
      const est = snap.estimation || null;
      const calibrated = est && typeof est.heading_calibrated === "boolean" ? est.heading_calibrated : null;
      compass.setCalibrated(calibrated);
      showWarning(calibrated === false
        ? est.warning || "heading uncalibrated: it may be ~10° off until a magnetometer calibration runs"
        : null);
      const v = snap.values || {};
      horizon.set(num(v.roll_rad), num(v.pitch_rad));
      const b = snap.behavior || null;
      const target = b && num(b.target_deg) !== null ? b.target_deg : null;
      compass.set(num(v.heading_deg), target);
      map.set(v, snap.truth && Object.keys(snap.truth).length ? snap.truth : null);
      map.setVision(v, est && est.marker_fix ? est.marker_fix : null);
      if (b && b.name) {
        const progress = b.progress !== undefined ? ` ${Math.round(100 * b.progress)} %` : "";
        const uncal = b.name === "heading" && calibrated === false ? " (heading uncalibrated: may be ~10° off)" : "";
        say(`${b.name}${progress}${uncal}`);
      }
    },
  };
}
