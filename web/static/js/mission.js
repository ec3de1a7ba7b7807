// The mission editor (docs/missions.md, issue 23): waypoints on the navigation panel's map, a mission
// sent to the server, and the run followed live.
//
// - Editing (no request): click the map to add a waypoint, drag one to move it, right-click it (or its ✕
//   in the table, or click it and press Delete) to delete it; the table's fields set x, y, a heading to
//   turn to there and a hold.
//   Save/Load as JSON (the POST body itself) or CSV (x_m,y_m,heading_deg,hold_s). A file that does not
//   parse changes nothing and says which line and field are wrong.
// - Running: Run sends POST /api/mission {waypoints, speed_m_s, mode}; Pause, Resume and Cancel send
//   POST /api/mission/pause|resume|cancel. The server decides (409 unless running, 403 for a viewer, the
//   lease): the page only avoids offering what it would refuse, and shows the refusal as it comes.
// - Live: the snapshot's `behavior` (name "mission": phase, leg, legs, progress, distance to go,
//   last_leg, outcome) gives the status and the per-leg results as they are made; the map draws the
//   planned path, the driven path by the fused estimate (est_x_m, est_y_m), the UWB fixes (uwb_x_m,
//   uwb_y_m) and, in the simulator, the true path (snapshot.truth). When the mission ends (it is no
//   longer the behaviour) GET /api/mission gives its outcome — the failure reason — and GET
//   /api/mission/report its every leg.
// - Another client's mission (a second dashboard, a page opened after the start, curl): the snapshot's
//   behaviour has no waypoints (up to 500 of them in every frame), so when the page sees a mission it did not
//   start (a new `id`) it reads GET /api/mission, which carries the plan (waypoints, mode, speed_m_s) and every
//   leg's result so far, and draws that plan; the per-leg results then fill in from the snapshots as for its own.
//
// The editor is locked while a mission runs: the plan on the map is then the one being driven.
// The drawing costs one polyline append per 2 cm moved; nothing else changes per frame.

import { formatNumber, setText } from "./format.js";
import { apiFetch, apiGet, describeError, mayAct, saveBlob, whoAmI } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const MISSION = "/api/mission";
const REPORT = "/api/mission/report";
const MAX_PATH = 5000;        // points kept per driven path
const MAX_FIXES = 600;        // UWB fix dots kept
const MIN_STEP_M = 0.02;      // a path point every 2 cm
const ENDED = new Set(["done", "failed", "cancelled"]);
export const CSV_HEADER = "x_m,y_m,heading_deg,hold_s";

function svgEl(name, attrs = {}, parent = null) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

const r2 = (v) => Math.round(v * 100) / 100;

// ---------------------------------------------------------------------- files (pure)

/** One waypoint checked: {x_m, y_m, heading_deg?, hold_s?}; throws naming ``where`` and the field. */
export function checkWaypoint(w, where) {
  if (!w || typeof w !== "object" || Array.isArray(w)) throw new Error(`${where}: not an object`);
  const known = new Set(["x_m", "y_m", "heading_deg", "hold_s"]);
  for (const k of Object.keys(w)) if (!known.has(k)) throw new Error(`${where}: unknown field ${k}`);
  const out = {};
  for (const k of ["x_m", "y_m"]) {
    if (typeof w[k] !== "number" || !Number.isFinite(w[k])) throw new Error(`${where}: ${k} must be a finite number`);
    out[k] = w[k];
  }
  if (w.heading_deg !== undefined && w.heading_deg !== null) {
    const h = w.heading_deg;
    if (typeof h !== "number" || !(h >= 0 && h <= 360)) throw new Error(`${where}: heading_deg must be in [0, 360]`);
    out.heading_deg = h;
  }
  if (w.hold_s !== undefined && w.hold_s !== null) {
    const s = w.hold_s;
    if (typeof s !== "number" || !(s >= 0 && s <= 3600)) throw new Error(`${where}: hold_s must be in [0, 3600]`);
    if (s > 0) out.hold_s = s;
  }
  return out;
}

/** A mission file's text (JSON or CSV) → {waypoints, mode?, speed_m_s?}; throws saying what is wrong. */
export function parseMission(text, name = "") {
  const trimmed = text.trim();
  const json = /\.json$/i.test(name) || trimmed.startsWith("{") || trimmed.startsWith("[");
  return json ? parseJson(trimmed) : parseCsv(text);
}

function parseJson(text) {
  let doc;
  try { doc = JSON.parse(text); } catch (err) { throw new Error(`not JSON: ${err.message}`); }
  if (Array.isArray(doc)) doc = { waypoints: doc };
  if (!doc || typeof doc !== "object" || !Array.isArray(doc.waypoints)) throw new Error("no waypoints list");
  const out = { waypoints: doc.waypoints.map((w, i) => checkWaypoint(w, `waypoints[${i}]`)) };
  if (doc.mode !== undefined) {
    if (doc.mode !== "drive" && doc.mode !== "step") throw new Error("mode must be drive or step");
    out.mode = doc.mode;
  }
  if (doc.speed_m_s !== undefined && doc.speed_m_s !== null) {
    if (typeof doc.speed_m_s !== "number" || !(doc.speed_m_s > 0)) throw new Error("speed_m_s must be a positive number");
    out.speed_m_s = doc.speed_m_s;
  }
  return out;
}

function parseCsv(text) {
  const lines = text.split(/\r?\n/);
  const out = { waypoints: [] };
  let header = null;
  lines.forEach((raw, n) => {
    const line = raw.trim();
    const where = `line ${n + 1}`;
    if (!line) return;
    if (line.startsWith("#")) {  // "# mode=step speed_m_s=0.2"
      for (const [, k, v] of line.matchAll(/(\w+)=(\S+)/g)) {
        if (k === "mode" && (v === "drive" || v === "step")) out.mode = v;
        if (k === "speed_m_s" && Number(v) > 0) out.speed_m_s = Number(v);
      }
      return;
    }
    const cells = line.split(",").map((c) => c.trim());
    if (!header) {
      header = cells;
      if (!header.includes("x_m") || !header.includes("y_m")) throw new Error(`${where}: the header must name x_m and y_m`);
      const unknown = header.filter((h) => !["x_m", "y_m", "heading_deg", "hold_s"].includes(h));
      if (unknown.length) throw new Error(`${where}: unknown column ${unknown[0]}`);
      return;
    }
    if (cells.length !== header.length) throw new Error(`${where}: ${cells.length} cells, the header has ${header.length}`);
    const w = {};
    header.forEach((h, i) => {
      if (cells[i] === "") return;
      const v = Number(cells[i]);
      if (!Number.isFinite(v)) throw new Error(`${where}: ${h} is not a number: ${cells[i]}`);
      w[h] = v;
    });
    out.waypoints.push(checkWaypoint(w, where));
  });
  if (!header) throw new Error(`empty: a CSV mission starts with the header ${CSV_HEADER}`);
  return out;
}

/** A mission as CSV: a comment with the mode and speed, the header, one waypoint a line. */
export function missionCsv({ waypoints, mode, speed_m_s }) {
  const rows = waypoints.map((w) => [w.x_m, w.y_m, w.heading_deg ?? "", w.hold_s ?? ""].join(","));
  return `# teleop mission: mode=${mode} speed_m_s=${speed_m_s}\n${CSV_HEADER}\n${rows.join("\n")}\n`;
}

// ---------------------------------------------------------------------- the panel

export function createMission({ root, robot }) {
  const $ = (sel) => root.querySelector(sel);
  const form = $("#mission-form");
  const modeSel = $("#mission-mode");
  const speedIn = $("#mission-speed");
  const runBtn = $("#mission-run");
  const pauseBtn = $("#mission-pause");
  const resumeBtn = $("#mission-resume");
  const cancelBtn = $("#mission-cancel");
  const statusEl = $("#mission-status");
  const progressEl = $("#mission-progress");
  const errorEl = $("#mission-error");
  const wpBody = $("#mission-waypoints tbody");
  const legBody = $("#mission-legs tbody");
  const reportLink = $("#mission-report");   // the report page, its legs as CSV, its JSON
  const loadIn = $("#mission-load");
  const hint = $("#mission-hint");

  const limits = (robot && robot.limits) || {};
  const maxSpeed = num(limits.linear_m_s) || 1.0;
  const defaultSpeed = Math.min(maxSpeed, num(robot && robot.mission && robot.mission.speed_m_s) || 0.2);
  speedIn.max = String(maxSpeed);
  speedIn.value = String(defaultSpeed);

  let plan = [];               // the waypoints being edited (or driven, while locked)
  let selected = -1;
  let map = null;
  let layer = null;            // the mission's <g> on the map
  let nodes = null;            // its parts
  let mayRun = true;           // the role allows it (whoAmI)
  let state = null;            // the robot's state ("running", …)
  let connected = false;
  let active = null;           // the snapshot's mission behaviour while one runs
  let ours = false;            // this page started the running mission
  let starting = false;        // this page's Run is in flight
  let settled = false;         // the page has asked the server about the mission there was when it came
  let shownId = null;          // the id of the mission whose plan the map shows (null: the editor's own)
  let busy = false;            // a command in flight
  let legs = new Map();        // leg index → result
  let endShown = true;         // the last mission's end has been fetched and shown
  const paths = { est: [], truth: [], fixes: [] };
  let lastEst = null;
  let lastTruth = null;
  let lastFix = null;

  whoAmI().then((m) => {
    mayRun = mayAct(m, "operator");
    if (!mayRun) {
      for (const b of [runBtn, pauseBtn, resumeBtn, cancelBtn]) b.title = "running a mission needs an operator";
      setText(hint, "Viewers may plan and save a mission; running one needs an operator.");
    }
    refreshButtons();
  });

  function say(text, kind = "") {
    setText(statusEl, text);
    statusEl.dataset.kind = kind;
  }

  function showError(text) {
    errorEl.hidden = !text;
    setText(errorEl, text || "");
  }

  const locked = () => active !== null;

  // ------------------------------------------------------------------ drawing on the map
  function attach(m) {
    if (map) return;
    map = m;
    const [w, h] = map.size_m;
    const r = Math.max(w, h) / 60;
    layer = svgEl("g", { class: "mission" }, map.overlay);
    nodes = {
      r,
      plan: svgEl("polyline", { class: "mission-plan", points: "" }, layer),
      truth: svgEl("polyline", { class: "mission-true", points: "" }, layer),
      est: svgEl("polyline", { class: "mission-driven", points: "" }, layer),
      fixes: svgEl("g", { class: "mission-fixes" }, layer),
      wps: svgEl("g", { class: "mission-wps" }, layer),
    };
    root.closest("body").querySelector("#navigation-panel")?.classList.add("has-mission");
    bindPointer();
    draw();
  }

  function draw() {
    if (!nodes) return;
    nodes.plan.setAttribute("points", plan.map((p) => `${p.x_m},${p.y_m}`).join(" "));
    const g = nodes.wps;
    while (g.childNodes.length > plan.length) g.lastChild.remove();
    plan.forEach((p, i) => {
      let wg = g.childNodes[i];
      if (!wg) {
        wg = svgEl("g", { class: "mission-wp" }, g);
        svgEl("circle", { r: nodes.r }, wg);
        svgEl("line", { class: "mission-wp-heading", x1: 0, y1: 0, x2: 0, y2: 0 }, wg);
        svgEl("text", { "font-size": nodes.r * 1.4, "text-anchor": "middle", transform: `translate(0 ${-nodes.r * 0.5}) scale(1 -1)` }, wg)
          .textContent = "";
      }
      wg.dataset.index = String(i);
      wg.setAttribute("transform", `translate(${p.x_m} ${p.y_m})`);
      wg.querySelector("text").textContent = String(i + 1);
      const tick = wg.querySelector("line");
      if (p.heading_deg !== undefined) {  // compass: 0 north, 90 east
        const a = (p.heading_deg * Math.PI) / 180;
        tick.setAttribute("x2", (2.2 * nodes.r * Math.sin(a)).toFixed(3));
        tick.setAttribute("y2", (2.2 * nodes.r * Math.cos(a)).toFixed(3));
      } else {
        tick.setAttribute("x2", "0");
        tick.setAttribute("y2", "0");
      }
      const res = legs.get(i);
      wg.classList.toggle("selected", i === selected);
      wg.classList.toggle("reached", !!res && res.outcome === "reached");
      wg.classList.toggle("failed", !!res && res.outcome !== undefined && res.outcome !== "reached");
      wg.classList.toggle("current", !!active && active.leg === i && !ENDED.has(active.phase));
    });
  }

  function bindPointer() {
    const svg = map.svg;
    let drag = null;
    let suppressClick = false;
    const wpOf = (e) => e.target.closest && e.target.closest(".mission-wp");
    const field = (p) => {
      const [w, h] = map.size_m;
      return { x_m: r2(Math.min(w, Math.max(0, p.x))), y_m: r2(Math.min(h, Math.max(0, p.y))) };
    };
    svg.addEventListener("pointerdown", (e) => {
      suppressClick = false;
      const wg = wpOf(e);
      if (!wg || e.button !== 0) return;
      suppressClick = true;            // a press on a waypoint selects it; it never adds one
      selected = Number(wg.dataset.index);
      draw();
      if (locked()) return;
      drag = { i: selected, id: e.pointerId };
      svg.setPointerCapture(e.pointerId);
      e.preventDefault();
    });
    svg.addEventListener("pointermove", (e) => {
      if (!drag || e.pointerId !== drag.id) return;
      const p = map.toWorld(e.clientX, e.clientY);
      if (!p) return;
      Object.assign(plan[drag.i], field(p));
      draw();
      fillRow(drag.i);
    });
    const end = (e) => {
      if (!drag || e.pointerId !== drag.id) return;
      drag = null;
      changed();
    };
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
    svg.addEventListener("click", (e) => {
      if (suppressClick || wpOf(e) || locked()) return;
      const p = map.toWorld(e.clientX, e.clientY);
      if (!p) return;
      plan.push(field(p));
      selected = plan.length - 1;
      changed(true);
    });
    // Delete removes the selected waypoint (not while typing in a field: there it edits the text)
    document.addEventListener("keydown", (e) => {
      if (e.key !== "Delete" || selected < 0 || locked() || e.target.closest("input, textarea, select")) return;
      e.preventDefault();
      remove(selected);
    });
    svg.addEventListener("contextmenu", (e) => {
      const wg = wpOf(e);
      if (!wg) return;
      e.preventDefault();
      if (!locked()) remove(Number(wg.dataset.index));
    });
  }

  // ------------------------------------------------------------------ the waypoint table
  const FIELDS = [["x_m", "x", "m", 0.01], ["y_m", "y", "m", 0.01], ["heading_deg", "heading", "°", 1], ["hold_s", "hold", "s", 0.5]];

  function buildRows() {
    wpBody.replaceChildren();
    plan.forEach((p, i) => {
      const tr = document.createElement("tr");
      tr.dataset.index = String(i);
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = String(i + 1);
      tr.appendChild(th);
      for (const [key, label, unit, step] of FIELDS) {
        const td = document.createElement("td");
        const input = document.createElement("input");
        input.type = "number";
        input.step = String(step);
        input.dataset.field = key;
        input.setAttribute("aria-label", `waypoint ${i + 1} ${label} (${unit})`);
        if (key === "heading_deg") { input.min = "0"; input.max = "360"; input.placeholder = "—"; }
        if (key === "hold_s") { input.min = "0"; input.placeholder = "0"; }
        input.addEventListener("change", () => edit(i, key, input));
        td.appendChild(input);
        tr.appendChild(td);
      }
      const td = document.createElement("td");
      const del = document.createElement("button");
      del.type = "button";
      del.className = "btn btn-small mission-del";
      del.textContent = "✕";
      del.setAttribute("aria-label", `delete waypoint ${i + 1}`);
      del.addEventListener("click", () => remove(i));
      td.appendChild(del);
      tr.appendChild(td);
      wpBody.appendChild(tr);
      fillRow(i);
    });
    lockInputs();
  }

  function fillRow(i) {
    const tr = wpBody.children[i];
    if (!tr) return;
    for (const input of tr.querySelectorAll("input")) {
      const v = plan[i][input.dataset.field];
      const text = v === undefined ? "" : String(v);
      if (input.value !== text && document.activeElement !== input) input.value = text;
    }
  }

  function lockInputs() {
    for (const c of wpBody.querySelectorAll("input, button")) c.disabled = locked();
  }

  function edit(i, key, input) {
    const raw = input.value.trim();
    const next = { ...plan[i] };
    if (raw === "" && (key === "heading_deg" || key === "hold_s")) delete next[key];
    else next[key] = Number(raw);
    try {
      plan[i] = checkWaypoint(next, `waypoint ${i + 1}`);
      showError("");
    } catch (err) {
      showError(err.message);
    }
    fillRow(i);
    changed();
  }

  function remove(i) {
    if (i < 0 || i >= plan.length) return;
    plan.splice(i, 1);
    selected = Math.min(selected, plan.length - 1);
    changed(true);
  }

  function changed(rows = false) {
    shownId = null;  // the plan is the editor's own now (adopt() names the mission it shows after this)
    if (rows) buildRows();
    draw();
    refreshButtons();
    root.dispatchEvent(new CustomEvent("mission-plan", { detail: { waypoints: plan.length } }));
  }

  // ------------------------------------------------------------------ files
  function mission() {
    const speed = Number(speedIn.value);
    return { waypoints: plan.map((p) => ({ ...p })), speed_m_s: speed, mode: modeSel.value };
  }

  $("#mission-save-json").addEventListener("click", () => {
    saveBlob(new Blob([JSON.stringify(mission(), null, 2) + "\n"], { type: "application/json" }), "mission.json");
  });
  $("#mission-save-csv").addEventListener("click", () => {
    saveBlob(new Blob([missionCsv(mission())], { type: "text/csv" }), "mission.csv");
  });
  loadIn.addEventListener("change", async () => {
    const f = loadIn.files && loadIn.files[0];
    if (!f) return;
    try {
      load(parseMission(await f.text(), f.name));
      say(`loaded ${f.name}: ${plan.length} waypoint(s)`, "ok");
      showError("");
    } catch (err) {
      showError(`${f.name}: ${err.message} (nothing changed)`);
    }
    loadIn.value = "";
  });
  $("#mission-clear").addEventListener("click", () => {
    if (locked()) return;
    plan = [];
    selected = -1;
    changed(true);
  });
  $("#mission-add").addEventListener("click", () => {
    if (locked()) return;
    const [w, h] = map ? map.size_m : [6, 4];
    const last = plan[plan.length - 1] || (lastEst ? { x_m: lastEst[0], y_m: lastEst[1] } : { x_m: w / 2, y_m: h / 2 });
    plan.push({ x_m: r2(Math.min(w, last.x_m + 0.5)), y_m: r2(last.y_m) });
    selected = plan.length - 1;
    changed(true);
  });

  function load(m) {
    if (locked()) throw new Error("a mission is running");
    plan = m.waypoints.map((w) => ({ ...w }));
    if (m.mode) modeSel.value = m.mode;
    if (m.speed_m_s) speedIn.value = String(m.speed_m_s);
    selected = -1;
    changed(true);
  }

  // ------------------------------------------------------------------ commands
  async function command(path, body, what) {
    busy = true;
    refreshButtons();
    const res = await apiFetch(path, { body });
    busy = false;
    if (res.ok) showError("");
    else showError(`${what} refused: ${describeError(res.error)}`);
    refreshButtons();
    return res;
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = mission();
    if (!body.waypoints.length) { showError("add a waypoint first (click the map)"); return; }
    if (!(body.speed_m_s > 0)) { showError("the speed must be a positive number of m/s"); return; }
    starting = true;  // a snapshot showing it before the reply comes is this page's mission, not another's
    const res = await command(MISSION, body, "run");
    starting = false;
    if (!res.ok) return;
    if (!active) resetRun();  // (the snapshot may have shown the mission first: that reset already)
    ours = true;
    endShown = false;
    const st = res.data && res.data.mission;
    if (st) {
      shownId = st.id ?? null;
      showLive(st);
    }
  });
  pauseBtn.addEventListener("click", () => command(`${MISSION}/pause`, {}, "pause"));
  resumeBtn.addEventListener("click", () => command(`${MISSION}/resume`, {}, "resume"));
  cancelBtn.addEventListener("click", () => command(`${MISSION}/cancel`, {}, "cancel"));

  function refreshButtons() {
    const live = active !== null && !ENDED.has(active.phase);
    const can = mayRun && connected && !busy;
    runBtn.disabled = !(can && state === "running" && !live && plan.length > 0);
    pauseBtn.disabled = !(can && live && !active.paused);
    resumeBtn.disabled = !(can && live && !!active.paused);
    cancelBtn.disabled = !(can && live);
    if (mayRun) runBtn.title = state === "running" ? "" : "Press Start first: a mission runs while the robot is running";
  }

  // ------------------------------------------------------------------ the run
  function resetRun() {
    legs = new Map();
    paths.est = [];
    paths.truth = [];
    paths.fixes = [];
    lastEst = lastTruth = lastFix = null;
    if (nodes) {
      nodes.est.setAttribute("points", "");
      nodes.truth.setAttribute("points", "");
      nodes.fixes.replaceChildren();
    }
    legBody.replaceChildren();
    reportLink.hidden = true;
  }

  function pushPath(list, node, prev, x, y) {
    if (x === null || y === null) return prev;
    if (prev && Math.hypot(x - prev[0], y - prev[1]) < MIN_STEP_M) return prev;
    list.push(`${x.toFixed(3)},${y.toFixed(3)}`);
    if (list.length > MAX_PATH) list.shift();
    if (node) node.setAttribute("points", list.join(" "));
    return [x, y];
  }

  /** A whole driven path at once (the report's [t, x, y] points), drawn once; the last point, or null. */
  function fillPath(list, node, points) {
    let last = null;
    for (const p of Array.isArray(points) ? points : []) {
      const x = num(p[1]);
      const y = num(p[2]);
      if (x === null || y === null || (last && Math.hypot(x - last[0], y - last[1]) < MIN_STEP_M)) continue;
      list.push(`${x.toFixed(3)},${y.toFixed(3)}`);
      last = [x, y];
    }
    if (list.length > MAX_PATH) list.splice(0, list.length - MAX_PATH);
    if (node && last) node.setAttribute("points", list.join(" "));
    return last;
  }

  /** The report's path instead of the watched one, when it has more to show. */
  function replacePath(list, node, points) {
    const watched = list.splice(0);
    const last = fillPath(list, node, points);
    if (list.length >= watched.length) return last;
    list.splice(0, list.length, ...watched);
    if (node) node.setAttribute("points", list.join(" "));
    return null;
  }

  function trackPaths(snap) {
    const v = snap.values || {};
    const ex = num(v.est_x_m);
    const ey = num(v.est_y_m);
    if (ex !== null && ey !== null && !active) lastEst = lastEst || [ex, ey];
    if (!active) return;
    lastEst = pushPath(paths.est, nodes && nodes.est, lastEst, ex, ey);
    const t = snap.truth || {};
    lastTruth = pushPath(paths.truth, nodes && nodes.truth, lastTruth, num(t.x), num(t.y));
    const ux = num(v.uwb_x_m);
    const uy = num(v.uwb_y_m);
    if (ux !== null && uy !== null && (!lastFix || lastFix[0] !== ux || lastFix[1] !== uy)) {
      lastFix = [ux, uy];
      if (nodes) {
        svgEl("circle", { cx: ux.toFixed(3), cy: uy.toFixed(3), r: (nodes.r * 0.35).toFixed(3) }, nodes.fixes);
        if (nodes.fixes.childNodes.length > MAX_FIXES) nodes.fixes.firstChild.remove();
      }
    }
  }

  const cm = (m) => (num(m) === null ? "—" : `${formatNumber(100 * m, 1)} cm`);
  const deg = (d) => (d && num(d.error_deg) !== null ? `${formatNumber(d.error_deg, 1)}°` : "—");

  function noteLeg(res) {
    if (!res || !Number.isInteger(res.leg)) return;
    const before = JSON.stringify(legs.get(res.leg) || null);
    if (before === JSON.stringify(res)) return;
    legs.set(res.leg, res);
    const cells = [
      String(res.leg + 1),
      res.target ? `(${formatNumber(res.target.x_m, 2)}, ${formatNumber(res.target.y_m, 2)})` : "—",
      res.arrival || "—",
      cm(res.arrival_error_m),
      cm(res.true_arrival_error_m),
      cm(res.uwb_fix_error_m),
      deg(res.leg_heading || res.waypoint_heading),
      num(res.duration_s) === null ? "—" : `${formatNumber(res.duration_s, 1)} s`,
      res.outcome || "—",
    ];
    let tr = legBody.querySelector(`tr[data-leg="${res.leg}"]`);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.leg = String(res.leg);
      for (let k = 0; k < cells.length; k++) tr.appendChild(document.createElement("td"));
      const after = [...legBody.children].find((r) => Number(r.dataset.leg) > res.leg);
      legBody.insertBefore(tr, after || null);
    }
    tr.dataset.outcome = res.outcome || "";
    cells.forEach((text, k) => setText(tr.children[k], text));
    draw();
  }

  function showLive(m) {
    const legsText = `leg ${m.leg + 1} of ${m.legs}`;
    const togo = num(m.distance_to_go_m) !== null ? ` · ${formatNumber(m.distance_to_go_m, 2)} m to go` : "";
    const pct = `${formatNumber(100 * (m.progress || 0), 0)} %`;
    const paused = m.paused ? " · PAUSED" : "";
    say(`${m.label ? m.label + ": " : ""}${m.mode} · ${legsText} · ${m.phase}${paused} · ${pct}${togo} · `
      + `${formatNumber(m.elapsed_s, 1)} s`, m.paused ? "paused" : "running");
    progressEl.value = m.progress || 0;
  }

  function showOutcome(m) {
    const outcome = m.outcome || m.phase || "ended";
    const kind = outcome === "finished" ? "ok" : "error";
    say(`${m.label ? m.label + ": " : ""}${outcome} · ${m.legs_done ?? legs.size} of ${m.legs} waypoint(s) reached · `
      + `${formatNumber(m.elapsed_s, 1)} s`, kind);
    progressEl.value = m.progress || 0;
  }

  /** Draw the plan of mission ``m`` (GET /api/mission: waypoints, mode, speed_m_s, results), one this page did
   *  not send; the editor is locked while it runs, so nothing of the operator's is lost mid-edit. */
  function adopt(m) {
    if (!m || !Array.isArray(m.waypoints) || !m.waypoints.length) return;
    plan = m.waypoints.map((w) => {
      const p = { x_m: w.x_m, y_m: w.y_m };
      if (num(w.heading_deg) !== null) p.heading_deg = w.heading_deg;
      if (num(w.hold_s) !== null && w.hold_s > 0) p.hold_s = w.hold_s;
      return p;
    });
    if (m.mode === "drive" || m.mode === "step") modeSel.value = m.mode;
    if (num(m.speed_m_s) !== null) speedIn.value = String(m.speed_m_s);
    selected = -1;
    changed(true);
    shownId = m.id ?? null;
    if (Array.isArray(m.results)) m.results.forEach(noteLeg);
  }

  /** A mission this page did not start is running: its plan and its legs so far from the server. */
  async function fetchPlan(id) {
    const res = await apiGet(MISSION);
    settled = true;
    const m = res.ok && res.data ? res.data.mission : null;
    if (!m || (id !== undefined && m.id !== id) || shownId === m.id) return;
    adopt(m);
    if (res.data.running && active) showLive(active);
  }

  /** The mission ended (or the page came to one that had): its outcome and every leg from the server. */
  async function fetchEnd() {
    try {
      await showEnd();
    } finally {
      settled = true;
    }
  }

  async function showEnd() {
    const res = await apiGet(MISSION);
    const m = res.ok && res.data ? res.data.mission : null;
    if (!m) return;
    // a snapshot older than the start (it came after Run's reply) shows no mission while the server runs it: not
    // an end; the next snapshot without one asks again (a mission can end before any snapshot showed it running)
    if (res.data.running || (!m.outcome && !ENDED.has(m.phase))) {
      endShown = false;
      return;
    }
    // one this page never drew: shown, unless the editor holds a plan of the operator's own
    if (m.id !== shownId && (!plan.length || shownId !== null)) adopt(m);
    showOutcome(m);
    for (const list of [m.results, res.data.results, res.data.legs]) if (Array.isArray(list)) list.forEach(noteLeg);
    if (m.last_leg) noteLeg(m.last_leg);
    const rep = await apiGet(REPORT);
    if (rep.ok && rep.data) {
      for (const leg of rep.data.legs || []) noteLeg(leg);
      // the driven paths from the report, [t, x, y] each: the whole run, where a page opened after the start (or
      // after the end) drew only what it watched
      const driven = rep.data.path || {};
      lastEst = replacePath(paths.est, nodes && nodes.est, driven.estimate) || lastEst;
      lastTruth = replacePath(paths.truth, nodes && nodes.truth, driven.truth) || lastTruth;
      reportLink.hidden = false;
    }
    draw();
  }

  function setState(snap) {
    root.classList.toggle("stale", !snap);
    connected = !!snap;
    if (!snap) {
      refreshButtons();
      return;
    }
    state = snap.state;
    const b = snap.behavior && snap.behavior.name === "mission" ? snap.behavior : null;
    const was = active;
    active = b;
    const fresh = b && (!was || was.id !== b.id);
    if (fresh) {  // a mission began: this page's, or another client's
      const mine = ours && shownId === b.id;  // its reply came before this snapshot: reset then
      if (!mine) { ours = false; resetRun(); }
      endShown = false;
      if (!mine && !starting && shownId !== b.id) fetchPlan(b.id);
    }
    if (was && !b) ours = false;
    if (!!b !== !!was) lockInputs();
    trackPaths(snap);
    if (b) {
      showLive(b);
      if (b.last_leg) noteLeg(b.last_leg);
    } else if (!endShown) {
      endShown = true;
      fetchEnd();
    }
    if (b || was) draw();
    refreshButtons();
  }

  // the map is the navigation panel's: there now, or announced when it comes
  const nav = document.querySelector("#navigation-panel");
  if (nav && nav.teleopMap) attach(nav.teleopMap);
  else document.addEventListener("nav-map-ready", (e) => attach(e.detail.map), { once: true });

  buildRows();
  refreshButtons();
  endShown = false;  // a mission that ran before the page came: its outcome and legs
  const panel = {
    setState,
    /** What the buttons are decided on (for the tests and the console). */
    get debug() {
      return { state, connected, busy, mayRun, active: active && active.phase, plan: plan.length, settled, shownId };
    },
    get plan() { return plan.map((p) => ({ ...p })); },
    load,
  };
  window.teleopMission = panel;
  return panel;
}
