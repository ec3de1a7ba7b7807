// The trajectory runner (docs/arms.md): pick one of the robot's series or a file (CSV with a header
// t_s,axis,… or JSON {"t_s": [...], axis: [...]}), run it (POST /api/trajectory), follow its progress
// from the snapshot's `behavior`, then show the report: per moving axis the mean, RMS and max deviation
// of achieved − commanded, the saturation, the plot (GET /api/trajectory/report.svg) and, for the arm,
// the FAULHABER program of the motion (POST /api/program). Stop and E-STOP cancel a run.

import { formatNumber, setText } from "./format.js";

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

  function say(text, kind = "") {
    setText(status, text);
    status.dataset.kind = kind;
  }

  select.addEventListener("change", () => { file.hidden = select.value !== ""; });
  file.hidden = select.value !== "";

  async function post(url, body, contentType) {
    const res = await fetch(url, { method: "POST", headers: { "content-type": contentType }, body });
    let data = null;
    try { data = await res.json(); } catch { /* not JSON */ }
    return { ok: res.ok, data };
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let res;
    if (select.value) {
      res = await post("/api/trajectory", JSON.stringify({ series: select.value }), "application/json");
    } else {
      const f = file.files && file.files[0];
      if (!f) { say("choose a CSV or JSON file first", "error"); return; }
      const text = await f.text();
      const json = f.name.toLowerCase().endsWith(".json");
      res = await post("/api/trajectory", json ? JSON.stringify({ trajectory: JSON.parse(text) }) : text,
        json ? "application/json" : "text/csv");
    }
    if (res.ok) {
      say(`running ${res.data.trajectory.label} (${res.data.trajectory.points} points, ${formatNumber(res.data.trajectory.duration_s, 2)} s)`, "ok");
      reportBox.hidden = true;
      shownFor = null;
    } else {
      const err = (res.data && res.data.error) || {};
      say(`refused: ${err.message || "error"} (${err.code || "?"})`, "error");
    }
  });

  cancel.addEventListener("click", async () => {
    const res = await post("/api/trajectory/cancel", "{}", "application/json");
    if (!res.ok) say(`cancel refused: ${(res.data && res.data.error && res.data.error.message) || "error"}`, "error");
  });

  async function showReport() {
    const res = await fetch("/api/trajectory/report");
    if (!res.ok) return;
    const rep = await res.json();
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
      const series = select.value || "scara_demo";
      const res = await fetch("/api/program", { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ series, step_s: 0.5 }) });
      if (!res.ok) { say("no program for this motion", "error"); return; }
      const url = URL.createObjectURL(new Blob([await res.text()], { type: "text/plain" }));
      const a = document.createElement("a");
      a.href = url;
      a.download = `faulhaber-${series}.txt`;
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
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
