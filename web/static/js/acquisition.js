// Acquisition settings: GET/PUT /api/acquisition (rate, channels). The server
// validates; its 422 message is shown next to the form and nothing changes.

import { setText } from "./format.js";
import { apiFetch } from "./api.js";

export function createAcquisition({ panel, form, log }) {
  const rateEl = form.querySelector("#acq-rate");
  const chans = form.querySelector("#acq-channels");
  const status = form.querySelector("#acq-status");
  const errorEl = form.querySelector("#acq-error");
  const apply = form.querySelector("#acq-apply");
  let labels = {};
  let built = "";

  function showError(msg) {
    errorEl.hidden = !msg;
    setText(errorEl, msg || "");
    const rateBad = !!msg && /rate/i.test(msg);
    rateEl.setAttribute("aria-invalid", String(rateBad));
    chans.setAttribute("aria-invalid", String(!!msg && !rateBad));
  }

  function fill(acq) {
    const available = Array.isArray(acq.available) ? acq.available : acq.channels || [];
    const key = available.join(",");
    if (key !== built) {
      built = key;
      chans.querySelectorAll("label").forEach((l) => l.remove());
      for (const name of available) {
        const label = document.createElement("label");
        const box = document.createElement("input");
        box.type = "checkbox";
        box.name = "channels";
        box.value = name;
        label.append(box, ` ${labels[name] || name}`);
        label.title = name;
        chans.appendChild(label);
      }
    }
    const active = new Set(acq.channels || []);
    for (const box of chans.querySelectorAll("input[type=checkbox]")) box.checked = active.has(box.value);
    rateEl.value = acq.rate_hz;
    if (Number.isFinite(acq.max_rate_hz)) {
      rateEl.max = String(acq.max_rate_hz);
      rateEl.title = `at most ${acq.max_rate_hz} Hz`;
    }
  }

  async function reload() {
    try {
      const r = await fetch("/api/acquisition", { cache: "no-store" });
      const body = await r.json();
      if (!r.ok) throw new Error(body?.error?.message || `HTTP ${r.status}`);
      fill(body);
      showError("");
      setText(status, "");
    } catch (err) {
      setText(status, `could not load: ${err.message}`);
    }
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // Send what the operator typed, as typed: the server is the one validator.
    const raw = rateEl.value.trim();
    const rate = raw === "" ? null : Number(raw);
    const channels = [...chans.querySelectorAll("input[type=checkbox]:checked")].map((b) => b.value);
    apply.disabled = true;
    setText(status, "applying…");
    // JSON with the CSRF token; a stale password check asks for the password (api.js)
    const res = await apiFetch("/api/acquisition", { method: "PUT", body: { rate_hz: rate, channels } });
    if (res.ok) {
      fill(res.data);
      showError("");
      setText(status, `applied: ${res.data.rate_hz} Hz, ${res.data.channels.length} channel(s)`);
    } else if (res.status === 0) {
      showError(`could not reach the server: ${res.error.message}`);
      setText(status, "");
    } else {
      const err = res.error;
      showError(err.message || `refused (HTTP ${res.status})`);
      setText(status, "not applied");
      log.local({ trigger: "acquisition", message: `${err.code || res.status}: ${err.message || ""}`, kind: "error" });
    }
    apply.disabled = false;
  });

  // Space is the E-STOP everywhere, so Enter toggles a focused checkbox here.
  chans.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && e.target.type === "checkbox") {
      e.preventDefault();
      e.target.checked = !e.target.checked;
    }
  });

  return {
    reload,
    setLabels(channels) {
      labels = Object.fromEntries((channels || []).map((c) => [c.name, c.label || c.name]));
      built = "";
    },
    setState(snap) {
      if (panel.classList.contains("stale") !== (snap === null)) panel.classList.toggle("stale", snap === null);
    },
  };
}
