// The experiments panel (docs/missions.md, issue 23): the source papers' experiments as named runs.
//
// GET /api/experiments lists them (name, title, source, the profile their figures need, their
// parameters' defaults); Run sends POST /api/experiments/{name} with the parameters in the box (the
// defaults are the paper's; a box that is not JSON is refused here and nothing is sent). While one runs,
// the snapshot's `behavior` (name "experiment": step, progress, the current sub-behaviour) shows where
// it is; when it ends (or on load, when GET /api/experiments says one ran), its report (GET
// /api/experiments/report) is shown as tables: every figure of ours beside the paper's, row by row ("—"
// where the paper gives none), then the raw rows (trials, steps), with links to the report page (.html,
// with its plots) and its JSON. Cancel experiment sends POST /api/experiments/cancel. A viewer sees the
// list and the reports; Run needs an operator (the server answers 403 otherwise).

import { formatNumber, setText } from "./format.js";
import { apiFetch, apiGet, describeError, mayAct, whoAmI } from "./api.js";

const LIST = "/api/experiments";
const REPORT = "/api/experiments/report";
const CANCEL = "/api/experiments/cancel";
const ENDED = new Set(["done", "failed", "cancelled"]);
const LABELS = ["method", "case", "target_deg", "trials", "experiment"];
// a figure's name with its unit: "mean_deviation_deg" → "mean deviation (°)"
const UNITS = [["_deg2", "deg²"], ["_deg", "°"], ["_cm", "cm"], ["_m_s2", "m/s²"], ["_rad_s", "rad/s"], ["_m", "m"],
  ["_s", "s"]];

export function figureName(key) {
  for (const [suffix, unit] of UNITS) {
    if (key.endsWith(suffix)) return `${key.slice(0, -suffix.length).replace(/_/g, " ")} (${unit})`;
  }
  return key.replace(/_/g, " ");
}

function labelOf(r, k) {
  if (k === "target_deg") return `${cell(r[k])}°`;
  if (k === "trials") return `${r[k]} trial${r[k] === 1 ? "" : "s"}`;
  return cell(r[k]);
}

function cell(v) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") {  // at most 3 decimals (5 under 0.01), no trailing zeros: the paper's 4.64 as 4.64
    return Number.isFinite(v) ? String(Number(v.toFixed(Math.abs(v) < 0.01 ? 5 : 3))) : "—";
  }
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (Array.isArray(v)) return v.map(cell).join(", ");
  if (typeof v === "object") {
    if ("x_m" in v && "y_m" in v) return `(${cell(v.x_m)}, ${cell(v.y_m)})`;
    return Object.entries(v).map(([k, x]) => `${k} ${cell(x)}`).join(", ");
  }
  return String(v);
}

function table(caption, head, rows, cls = "") {
  const t = document.createElement("table");
  t.className = `mission-table ${cls}`;
  const c = document.createElement("caption");
  c.textContent = caption;
  t.appendChild(c);
  const thead = document.createElement("thead");
  const htr = document.createElement("tr");
  for (const h of head) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = h;
    htr.appendChild(th);
  }
  thead.appendChild(htr);
  t.appendChild(thead);
  const body = document.createElement("tbody");
  for (const r of rows) {
    const tr = document.createElement("tr");
    for (const [text, kind] of r) {
      const td = document.createElement("td");
      td.textContent = text;
      if (kind) td.className = kind;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  t.appendChild(body);
  return t;
}

/** Rows {label…, ours: {}, paper: {} | null} → one line per figure: what, figure, ours, paper. */
export function comparisonRows(rows) {
  const out = [];
  for (const r of rows) {
    if (!r || typeof r.ours !== "object" || r.ours === null) continue;
    const label = LABELS.filter((k) => r[k] !== undefined).map((k) => labelOf(r, k)).join(" · ") || "overall";
    const paper = r.paper || {};
    const keys = [...new Set([...Object.keys(r.ours), ...Object.keys(paper)])];
    for (const k of keys) {
      out.push([[label], [figureName(k)], [cell(r.ours[k]), "ours"], [k in paper ? cell(paper[k]) : "—", "paper"]]);
    }
  }
  return out;
}

/** A report's tables: ours beside the paper's (overall, summary, per row), then the plain rows. */
export function reportTables(rep) {
  const out = [];
  const compared = [];
  if (Array.isArray(rep.overall)) compared.push(["Overall: ours beside the paper's", rep.overall]);
  if (rep.summary && rep.summary.ours) compared.push(["Summary: ours beside the paper's", [rep.summary]]);
  if (Array.isArray(rep.rows) && rep.rows.some((r) => r && r.ours)) compared.push(["Row by row", rep.rows]);
  for (const [caption, rows] of compared) {
    const lines = comparisonRows(rows);
    if (lines.length) out.push(table(caption, ["", "figure", "ours", "paper"], lines, "exp-compare"));
  }
  if (rep.summary && rep.summary.paper && rep.summary.paper.note) {
    const p = document.createElement("p");
    p.className = "exp-source";
    p.textContent = `paper: ${rep.summary.paper.note}`;
    out.push(p);
  }
  const plain = (Array.isArray(rep.rows) && rep.rows.length && !rep.rows[0].ours ? rep.rows : null) || rep.trials;
  if (Array.isArray(plain) && plain.length) {
    const keys = [...new Set(plain.flatMap((r) => Object.keys(r)))];
    out.push(table(Array.isArray(rep.trials) && plain === rep.trials ? "Trials" : "Steps", keys.map(figureName),
      plain.map((r) => keys.map((k) => [cell(r[k])]))));
  }
  return out;
}

export function createExperiments({ root }) {
  const list = root.querySelector("#exp-list");
  const status = root.querySelector("#exp-status");
  const bar = root.querySelector("#exp-progress");
  const cancelBtn = root.querySelector("#exp-cancel");
  const reportBox = root.querySelector("#exp-report");
  const errorEl = root.querySelector("#exp-error");
  let mayRun = true;
  let connected = false;
  let state = null;
  let running = null;        // the snapshot's experiment behaviour
  let lastName = null;
  let asking = null;         // the report request in flight (a promise), or null
  let askedAt = 0;           // when the last went (a run not yet ended is asked again at most once a second)
  let reportDue = false;     // a run seen by this page ended: its report is to show (none asked on load: 404 then)
  const runButtons = [];

  function say(text, kind = "") {
    setText(status, text);
    status.dataset.kind = kind;
  }

  function showError(text) {
    errorEl.hidden = !text;
    setText(errorEl, text || "");
  }

  function refresh() {
    const can = mayRun && connected && running === null;
    for (const b of runButtons) {
      b.disabled = !can || state !== "running";
      b.title = !mayRun ? "running an experiment needs an operator"
        : state !== "running" ? "Press Start first: an experiment runs while the robot is running" : "";
    }
    cancelBtn.disabled = !(mayRun && connected && running !== null);
  }

  function item(exp) {
    const li = document.createElement("li");
    li.className = "exp-item";
    li.dataset.name = exp.name;
    const h = document.createElement("h3");
    h.textContent = exp.name;
    const title = document.createElement("p");
    title.textContent = exp.title || "";
    const src = document.createElement("p");
    src.className = "exp-source";
    src.textContent = `${exp.source || ""}${exp.profile ? ` · figures on ${exp.profile}` : ""}`;
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = "parameters (the paper's by default)";
    const box = document.createElement("textarea");
    box.className = "exp-params";
    box.spellcheck = false;
    box.setAttribute("aria-label", `${exp.name} parameters (JSON)`);
    box.value = JSON.stringify(exp.params || {}, null, 1);
    details.append(summary, box);
    const actions = document.createElement("div");
    actions.className = "exp-actions";
    const run = document.createElement("button");
    run.type = "button";
    run.className = "btn btn-start btn-small exp-run";
    run.textContent = "Run";
    run.setAttribute("aria-label", `run ${exp.name}`);
    run.addEventListener("click", () => start(exp.name, box.value));
    runButtons.push(run);
    actions.append(run);
    li.append(h, title, src, details, actions);
    return li;
  }

  async function loadList() {
    const res = await apiGet(LIST);
    if (!res.ok) {
      say(`no experiments: ${describeError(res.error)}`, "error");
      return;
    }
    list.replaceChildren(...(res.data.experiments || []).map(item));
    // GET /api/experiments also says what runs, or ran last: that one's report, once it has ended
    if (res.data.experiment && !res.data.running) showReport();
    refresh();
  }

  async function start(name, text) {
    let params;
    try {
      params = JSON.parse(text || "{}");
      if (!params || typeof params !== "object" || Array.isArray(params)) throw new Error("an object is needed");
    } catch (err) {
      showError(`${name}: the parameters are not a JSON object (${err.message}); nothing was sent`);
      return;
    }
    showError("");
    const res = await apiFetch(`${LIST}/${encodeURIComponent(name)}`, { body: params });
    if (!res.ok) {
      showError(`${name} refused: ${describeError(res.error)}`);
      return;
    }
    lastName = name;
    reportDue = true;
    clearReport();
    say(`${name}: started`, "");
  }

  cancelBtn.addEventListener("click", async () => {
    const res = await apiFetch(CANCEL, { body: {} });
    if (!res.ok) showError(`cancel refused: ${describeError(res.error)}`);
  });

  function clearReport() {
    reportBox.replaceChildren();
    delete reportBox.dataset.experiment;
  }

  async function showReport() {
    const res = await apiGet(REPORT);
    if (!res.ok) return;           // none has run yet
    const rep = res.data;
    const st = rep.status || {};
    // a snapshot taken before the run began can ask for the report of a run still going: not yet, then
    if (st.phase && !ENDED.has(st.phase)) {
      reportDue = true;
      return;
    }
    const h = document.createElement("h3");
    h.textContent = `${rep.experiment || lastName}: ${st.outcome || st.phase || "report"}`;
    const link = (id, href, text) => {
      const a = document.createElement("a");
      a.id = id;
      a.href = href;
      a.target = "_blank";
      a.rel = "noopener";
      a.textContent = text;
      return a;
    };
    const p = document.createElement("p");
    p.className = "exp-source";
    p.append(`${rep.title || ""} — ${rep.source || ""} · `, link("exp-report-link", `${REPORT}.html`, "the report"),
      " · ", link("exp-report-json", REPORT, "JSON"));
    reportBox.replaceChildren(h, p, ...reportTables(rep));
    reportBox.dataset.experiment = rep.experiment || "";
    say(`${rep.experiment || lastName}: ${st.outcome || "ended"}`, st.outcome === "finished" ? "ok" : "error");
    bar.value = st.progress || 0;
  }

  function setState(snap) {
    let asked = null;
    root.classList.toggle("stale", !snap);
    connected = !!snap;
    if (snap) {
      state = snap.state;
      const b = snap.behavior && snap.behavior.name === "experiment" ? snap.behavior : null;
      if (b && !ENDED.has(b.phase)) {
        if (!running) { reportDue = true; askedAt = 0; clearReport(); }
        running = b;
        lastName = b.experiment;
        const cur = b.current ? ` · ${b.current.name}${b.current.phase ? ` ${b.current.phase}` : ""}` : "";
        say(`${b.experiment}: ${b.step || b.phase}${cur} · ${formatNumber(100 * (b.progress || 0), 0)} %`);
        bar.value = b.progress || 0;
      } else {
        running = null;
        if (asking) {
          asked = asking;  // one in flight already (a snapshot from before the run can come late): that one
        } else if (reportDue && Date.now() - askedAt >= 1000) {
          reportDue = false;
          askedAt = Date.now();
          asked = asking = showReport().finally(() => { asking = null; });
        }
      }
    }
    refresh();
    return asked;  // the report request this snapshot started or found in flight, if any (the tests await it)
  }

  whoAmI().then((m) => {
    mayRun = mayAct(m, "operator");
    refresh();
  });
  loadList();
  const panel = { setState, reload: loadList };
  window.teleopExperiments = panel;
  return panel;
}
