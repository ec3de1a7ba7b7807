// The trajectory runner (docs/arms.md): pick one of the robot's series or a file (CSV with a header
// t_s,axis,… or JSON {"t_s": [...], axis: [...]}), run it (POST /api/trajectory), follow its progress
// from the snapshot's `behavior`, then show the report: per moving axis the mean, RMS and max deviation
// of achieved − commanded, the saturation, the plot (GET /api/trajectory/report.svg) and, for the arm,
// the FAULHABER program of the motion (POST /api/program, saved as a file). Stop and E-STOP cancel a
// run. Every request goes through api.js (the CSRF token under login; a CSV file is sent as text/csv,
// which these two routes accept).

import { formatNumber, setText } from "./format.js";
import { apiFetch, apiGet, describeError, saveBlob } from "./api.js";

const ACTIVE = new Set(["approach", "run", "settle"]);

function scaleOf(axis) {
  if (axis.endsWith("_rad")) return [180 / Math.PI, "°"];
  if (axis.endsWith("_m")) return [1000, "mm"];
  return [1, ""];
}

export function createTrajectory({ root }) {
  const form = root.querySelector("#trajectory-form");
  const select = root.querySelector("#trajectory-series");
  const file = root.querySelector("#trajectory-file");
  const cancel = root.querySelector("#trajectory-cancel");
  const bar = root.querySelector("#trajectory-bar");
  const phase = root.querySelector("#trajectory-phase");
  const status = root.querySelector("#trajectory-status");
  const reportBox = root.querySelector("#trajectory-report");
  const program = root.querySelector("#trajectory-program");
  let running = false;
  let shownFor = null;   // the run whose report is on screen
  let lastLabel = null;
  let lastMotion = null;  // what the last run was sent: its program is for the same motion

  function say(text, kind = "") {
    setText(status, text);
    status.dataset.kind = kind;
  }

  select.addEventListener("change", () => { file.hidden = select.value !== ""; });
  file.hidden = select.value !== "";

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let res;
    let motion;
    if (select.value) {
      motion = { name: select.value, series: select.value };
      res = await apiFetch("/api/trajectory", { body: { series: select.value } });
    } else {
      const f = file.files && file.files[0];
      if (!f) { say("choose a CSV or JSON file first", "error"); return; }
      const text = await f.text();
      const name = f.name.replace(/\.(csv|json)$/i, "");
      if (f.name.toLowerCase().endsWith(".json")) {
        let trajectory;
        try { trajectory = JSON.parse(text); } catch (err) { say(`${f.name} is not JSON: ${err.message}`, "error"); return; }
        motion = { name, columns: trajectory };
        res = await apiFetch("/api/trajectory", { body: { trajectory } });
      } else {
        motion = { name, csv: text };
        res = await apiFetch("/api/trajectory", { raw: text, contentType: "text/csv" });
      }
    }
    if (res.ok) {
      lastMotion = motion;
      say(`running ${res.data.trajectory.label} (${res.data.trajectory.points} points, ${formatNumber(res.data.trajectory.duration_s, 2)} s)`, "ok");
      reportBox.hidden = true;
      shownFor = null;
    } else {
      say(`refused: ${describeError(res.error)}`, "error");
    }
  });

  cancel.addEventListener("click", async () => {
    const res = await apiFetch("/api/trajectory/cancel");
    if (!res.ok) say(`cancel refused: ${describeError(res.error)}`, "error");
  });

  async function showReport() {
    // a snapshot older than the start (it came after the run's reply) shows no run while the server runs it: the
    // next snapshot without one asks again, rather than asking for a report the server has not got yet (409)
    const now = await apiGet("/api/trajectory");
    const run = now.ok && now.data ? now.data.run : null;
    if (!run || !run.outcome || ACTIVE.has(run.phase)) {
      if (run) shownFor = null;
      return;
    }
    const res = await apiGet("/api/trajectory/report");
    if (!res.ok) return;
    const rep = res.data;
    const body = reportBox.querySelector("tbody");
    body.replaceChildren();
    for (const axis of rep.moving_axes.length ? rep.moving_axes : rep.axes) {
      const d = rep.deviation[axis];
      if (!d) continue;
      const [k, unit] = scaleOf(axis);
      const tr = document.createElement("tr");
      tr.dataset.axis = axis;
      for (const text of [axis, `${formatNumber(d.mean * k, 3)} ${unit}`, `${formatNumber(d.rms * k, 3)} ${unit}`,
        `${formatNumber(d.max_abs * k, 3)} ${unit}`]) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    const sat = rep.saturation || {};
    setText(reportBox.querySelector('[data-field="saturation"]'),
      `${rep.outcome}; ${rep.samples} samples; saturated samples: ${sat.samples || 0}`
      + (sat.events && sat.events.length ? `, ${sat.events.length} saturation change(s)` : ""));
    root.querySelector("#trajectory-plot").src = `/api/trajectory/report.svg?t=${Date.now()}`;
    reportBox.hidden = false;
    say(`${rep.label}: ${rep.outcome}`, rep.outcome === "finished" ? "ok" : "error");
    if (program) program.dataset.label = rep.label;
  }

  if (program) {
    program.addEventListener("click", async (e) => {
      e.preventDefault();
      // the motion last run (a series, or the file's columns as JSON or its CSV), else the selected series
      const m = lastMotion || { name: select.value || "scara_demo", series: select.value || "scara_demo" };
      const request = m.csv !== undefined ? { raw: m.csv, contentType: "text/csv" }
        : { body: m.series ? { series: m.series, step_s: 0.5 } : m.columns };
      const res = await apiFetch("/api/program", { ...request, as: "blob" });
      if (!res.ok) { say(`no program for this motion: ${describeError(res.error)}`, "error"); return; }
      saveBlob(res.data, `faulhaber-${m.name}.txt`);
      say(`program for ${m.name} saved`, "ok");
    });
  }

  function setState(snap) {
    root.classList.toggle("stale", !snap);
    if (!snap) return;
    const b = snap.behavior && snap.behavior.name === "trajectory" ? snap.behavior : null;
    running = !!(b && ACTIVE.has(b.phase));
    cancel.disabled = !running;
    if (b) {
      bar.value = b.progress || 0;
      setText(phase, `${b.label}: ${b.phase} ${formatNumber(100 * (b.progress || 0), 0)} %`);
      lastLabel = b.label;
      if (running) shownFor = null;
    } else if (lastLabel !== null && shownFor === null) {
      // the run ended (finished, cancelled, failed): fetch its report once
      shownFor = lastLabel;
      setText(phase, `${lastLabel}: ended`);
      showReport();
    }
  }

  return { setState };
}
