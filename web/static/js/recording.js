// Recordings panel (docs/recording.md) and the REC indicator in the top bar.
//
// The recorder's status is polled once a second while the page is visible
// (GET /api/recordings/status: a few hundred bytes), the list every 5 s and after
// every change. The indicator is red "REC" with the name, length and size while a
// recording is written, amber with the reason when the recorder stopped on an error
// (disk full), and counts the messages it dropped. In replay mode there is no
// recorder: the list shows the replayed file's folder and Record is hidden.
//
// Every request goes through api.js (the CSRF token under login, the password dialog that deleting
// needs, one way to show a refusal). Deleting is for admins: for anyone else the button is not shown
// (the server would answer 403 forbidden).

import { setText } from "./format.js";
import { apiFetch, apiGet, describeError, mayAct, whoAmI } from "./api.js";

const STATUS_PERIOD_MS = 1000;
const LIST_PERIOD_MS = 5000;
// snapshot fields offered in the CSV column chooser besides the robot's channels
const EXTRA_COLUMNS = ["state", "setpoint.linear", "setpoint.angular", "command.linear", "command.angular",
  "link.age_s", "loop.jitter_p99_us"];

async function getJson(path) {
  const res = await apiGet(path);
  if (!res.ok) throw new Error(describeError(res.error));
  return res.data;
}

export function formatBytes(n) {
  if (!Number.isFinite(n)) return "—";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MB`;
  return `${(n / 1024 ** 3).toFixed(2)} GB`;
}

export function formatDuration(s) {
  if (!Number.isFinite(s) || s < 0) return "—";
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = Math.floor(s % 60);
  const two = (v) => String(v).padStart(2, "0");
  return h ? `${h}:${two(m)}:${two(sec)}` : `${m}:${two(sec)}`;
}

function formatStart(t) {
  if (!Number.isFinite(t)) return "—";
  const d = new Date(t * 1000);
  const two = (v) => String(v).padStart(2, "0");
  return `${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

const fileUrl = (file) => `/api/recordings/${encodeURIComponent(file)}`;

export function createRecording({ root, robot, session }) {
  const statusEl = root.querySelector("#rec-status");
  const form = root.querySelector("#rec-form");
  const nameEl = root.querySelector("#rec-name");
  const startBtn = root.querySelector("#rec-start");
  const stopBtn = root.querySelector("#rec-stop");
  const errorEl = root.querySelector("#rec-error");
  const tbody = root.querySelector("#rec-list tbody");
  const emptyEl = root.querySelector("#rec-empty");
  const delDialog = root.querySelector("#rec-delete-dialog");
  const delConfirm = root.querySelector("#rec-delete-confirm");
  const delError = root.querySelector("#rec-delete-error");
  const csvDialog = root.querySelector("#rec-csv-dialog");
  const csvColumns = csvDialog.querySelector('[data-field="columns"]');
  const csvFrom = csvDialog.querySelector("#rec-csv-from");
  const csvTo = csvDialog.querySelector("#rec-csv-to");
  const csvLink = csvDialog.querySelector("#rec-csv-download");
  const csvError = csvDialog.querySelector("#rec-csv-error");

  // the indicator lives in the top bar, next to the robot's name
  const indicator = document.createElement("span");
  indicator.id = "rec-indicator";
  indicator.className = "rec-indicator";
  indicator.setAttribute("role", "status");
  indicator.hidden = true;
  const brand = document.querySelector(".brand");
  if (brand) brand.append(indicator);

  let status = null;        // GET /api/recordings/status, or null (no recorder: replay mode)
  let items = [];
  let replayFile = null;
  let hasRecorder = false;      // known from the first list
  let lastFile = null;
  let busy = false;
  let pendingDelete = null;
  let csvItem = null;
  let mayRecord = true;         // operators and admins (docs/security.md); known once whoAmI answers
  let mayDelete = true;         // admins
  let listed = false;

  function showError(text) {
    errorEl.hidden = !text;
    setText(errorEl, text || "");
  }

  // ---------------------------------------------------------------- status and indicator
  function renderStatus() {
    const st = status;
    root.classList.toggle("rec-none", st === null);
    form.hidden = st === null;
    if (st === null) {
      indicator.hidden = true;
      setText(statusEl, replayFile ? `Replay mode: no recorder. Playing ${replayFile}.` : "No recorder.");
      return;
    }
    const recording = st.state === "recording";
    const named = recording && st.name;
    const item = recording ? items.find((i) => i.file === st.file) : null;
    const started = item && Number.isFinite(item.start_t) ? item.start_t : null;
    const now = session ? session.serverNowMs() / 1000 : Date.now() / 1000;
    const length = started !== null ? Math.max(0, now - started) : null;
    const drops = st.dropped ? ` · ${st.dropped} dropped` : "";
    indicator.classList.toggle("rec-on", recording);
    indicator.classList.toggle("rec-error", st.state === "error");
    if (recording) {
      indicator.hidden = false;
      setText(indicator, `REC ${named ? st.name : "auto"} ${length !== null ? formatDuration(length) : ""} · ${formatBytes(st.bytes)}${drops}`);
      indicator.title = `recording to ${st.file}`;
      setText(statusEl, `Recording ${named ? `"${st.name}"` : "(always on)"} to ${st.file}: ${formatBytes(st.bytes)}, ${st.messages} messages${drops}.`);
    } else if (st.state === "error") {
      indicator.hidden = false;
      setText(indicator, `REC stopped: ${st.error || "error"}${drops}`);
      indicator.title = st.error || "";
      setText(statusEl, `Recorder stopped: ${st.error || "error"}. Press Record to try again.`);
    } else {
      indicator.hidden = true;
      setText(statusEl, `Not recording.${drops}`);
    }
    stopBtn.disabled = busy || !recording || !mayRecord;
    startBtn.disabled = busy || !mayRecord;
    startBtn.title = mayRecord ? "" : "recording needs an operator";
    startBtn.textContent = named ? "New recording" : "Record";
  }

  async function pollStatus() {
    // the list says whether there is a recorder at all (none in replay mode): no polling then
    if (document.visibilityState !== "visible" || !hasRecorder) return;
    const res = await apiGet("/api/recordings/status");
    if (!res.ok) return;
    status = res.data;
    if (status && status.file !== lastFile) {
      lastFile = status.file;
      reloadList();
    }
    renderStatus();
  }

  // ---------------------------------------------------------------- list
  function actionLink(text, href, title, download = false) {
    const a = document.createElement("a");
    a.className = "rec-action";
    a.href = href;
    a.textContent = text;
    a.title = title;
    if (download) a.setAttribute("download", "");
    else a.target = "_blank";
    return a;
  }

  function actionButton(text, title, onClick, cls = "") {
    const b = document.createElement("button");
    b.type = "button";
    b.className = `rec-action ${cls}`;
    b.textContent = text;
    b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }

  function renderList() {
    tbody.replaceChildren();
    emptyEl.hidden = items.length > 0;
    for (const it of items) {
      const tr = document.createElement("tr");
      tr.dataset.file = it.file;
      if (it.active) tr.classList.add("rec-active");
      const cells = [
        formatStart(it.start_t),
        it.named ? it.name : (it.name || "auto"),
        it.active ? "recording" : formatDuration(it.duration_s),
        formatBytes(it.size_bytes),
      ];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      tr.children[1].title = it.file;
      const cell = document.createElement("td");
      cell.className = "rec-actions-cell";
      const actions = document.createElement("div");
      actions.className = "rec-actions";
      cell.append(actions);
      if (it.error) {
        actions.textContent = "unreadable";
        actions.title = it.error;
      } else {
        actions.append(actionLink("⤓ mcap", fileUrl(it.file), `download ${it.file} (opens in Foxglove)`, true));
        if (!it.active) {
          actions.append(actionButton("CSV…", "export channels as CSV", () => openCsv(it)));
          actions.append(actionLink("report", `${fileUrl(it.file)}/report.html`, "run report: statistics, tracking, plots"));
        }
      }
      if (!it.active && it.file !== replayFile && mayDelete) {
        actions.append(actionButton("delete…", `delete ${it.file}`, () => askDelete(it), "rec-delete"));
      }
      tr.append(cell);
      tbody.append(tr);
    }
  }

  async function reloadList() {
    try {
      const body = await getJson("/api/recordings");
      items = Array.isArray(body.recordings) ? body.recordings : [];
      replayFile = body.replay_file || null;
      status = body.status || null;
      hasRecorder = status !== null;
      listed = true;
      renderList();
      renderStatus();
    } catch (err) {
      setText(statusEl, `could not load the recordings: ${err.message}`);
    }
  }

  // ---------------------------------------------------------------- start / stop
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = nameEl.value.trim();
    busy = true;
    renderStatus();
    const res = await apiFetch("/api/recordings/start", { body: name ? { name } : {} });
    busy = false;
    if (!res.ok) showError(`recording not started: ${describeError(res.error)}`);
    else showError("");
    await pollStatus();
    reloadList();
  });

  stopBtn.addEventListener("click", async () => {
    busy = true;
    renderStatus();
    const res = await apiFetch("/api/recordings/stop");
    busy = false;
    if (!res.ok) showError(`not stopped: ${describeError(res.error)}`);
    else showError("");
    await pollStatus();
    reloadList();
  });

  // ---------------------------------------------------------------- delete (confirmed)
  function askDelete(item) {
    pendingDelete = item;
    setText(delDialog.querySelector('[data-field="file"]'), item.file);
    delError.hidden = true;
    delConfirm.disabled = false;
    delDialog.showModal();
  }

  delConfirm.addEventListener("click", async () => {
    if (!pendingDelete) return;
    delConfirm.disabled = true;
    const res = await apiFetch(fileUrl(pendingDelete.file), { method: "DELETE" });
    delConfirm.disabled = false;
    if (res.ok) {
      delDialog.close("deleted");
      pendingDelete = null;
      reloadList();
    } else {
      setText(delError, describeError(res.error));
      delError.hidden = false;
    }
  });

  // ---------------------------------------------------------------- CSV export
  function csvHref() {
    if (!csvItem) return null;
    const cols = [...csvColumns.querySelectorAll("input:checked")].map((b) => b.value);
    if (!cols.length) return { error: "choose at least one column" };
    const q = new URLSearchParams({ columns: cols.join(",") });
    const from = csvFrom.value.trim() === "" ? null : Number(csvFrom.value);
    const to = csvTo.value.trim() === "" ? null : Number(csvTo.value);
    if ((from !== null && !Number.isFinite(from)) || (to !== null && !Number.isFinite(to))) return { error: "times must be numbers" };
    if (from !== null && to !== null && to < from) return { error: "'to' is before 'from'" };
    if (from !== null) q.set("start_t", String(csvItem.start_t + from));
    if (to !== null) q.set("end_t", String(csvItem.start_t + to));
    return { href: `${fileUrl(csvItem.file)}/csv?${q}` };
  }

  function updateCsvLink() {
    const r = csvHref();
    const bad = !r || r.error;
    csvError.hidden = !bad || !r;
    setText(csvError, r && r.error ? r.error : "");
    csvLink.setAttribute("aria-disabled", bad ? "true" : "false");
    csvLink.href = bad ? "#" : r.href;
  }

  async function openCsv(item) {
    csvItem = item;
    setText(csvDialog.querySelector('[data-field="file"]'), item.file);
    setText(csvDialog.querySelector('[data-field="length"]'), `of ${formatDuration(item.duration_s)} (${(item.duration_s || 0).toFixed(1)} s)`);
    csvFrom.value = "";
    csvTo.value = "";
    csvColumns.replaceChildren();
    let channels = (robot && robot.channels ? robot.channels.map((c) => c.name) : []);
    try {
      const info = await getJson(`${fileUrl(item.file)}/info`);
      if (Array.isArray(info.channels) && info.channels.length) channels = info.channels;
    } catch { /* the live robot's channels are the best guess */ }
    for (const name of [...channels, ...EXTRA_COLUMNS]) {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = name;
      box.name = "columns";
      label.append(box, ` ${name}`);
      csvColumns.append(label);
    }
    updateCsvLink();
    csvDialog.showModal();
  }

  csvDialog.addEventListener("input", updateCsvLink);
  csvDialog.addEventListener("change", updateCsvLink);
  csvLink.addEventListener("click", (e) => {
    if (csvLink.getAttribute("aria-disabled") === "true") {
      e.preventDefault();
      const r = csvHref();
      csvError.hidden = false;
      setText(csvError, (r && r.error) || "choose at least one column");
    }
  });

  whoAmI().then((m) => {
    mayRecord = mayAct(m, "operator");
    mayDelete = mayAct(m, "admin");
    if (!listed) return;            // the first list renders both
    renderList();
    renderStatus();
  });
  reloadList();
  setInterval(pollStatus, STATUS_PERIOD_MS);
  setInterval(() => { if (document.visibilityState === "visible") reloadList(); }, LIST_PERIOD_MS);

  return {
    reload: reloadList,
    setState(snap) {
      // the panel works over HTTP, not the socket: it greys with the rest when the connection is lost
      if (root.classList.contains("stale") !== (snap === null)) root.classList.toggle("stale", snap === null);
    },
  };
}
