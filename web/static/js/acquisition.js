// Acquisition settings: GET/PUT /api/acquisition (rate, channels). The server
// validates; its 422 message is shown next to the form and nothing changes. Changing them is
// for admins (docs/security.md): for anyone else Apply is disabled and says so.

import { setText } from "./format.js";
import { apiFetch, apiGet, describeError, mayAct, whoAmI } from "./api.js";

const ADMIN_ONLY = "changing the acquisition needs an admin";

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

  let mayApply = true;
  function renderApply(busy = false) {
    apply.disabled = busy || !mayApply;
    apply.title = mayApply ? "" : ADMIN_ONLY;
  }
  whoAmI().then((m) => {
    mayApply = mayAct(m, "admin");
    renderApply();
    if (!mayApply) setText(status, ADMIN_ONLY);
  });

  async function reload() {
    const res = await apiGet("/api/acquisition");
    if (!res.ok) {
      setText(status, `could not load: ${describeError(res.error)}`);
      return;
    }
    fill(res.data);
    showError("");
    setText(status, mayApply ? "" : ADMIN_ONLY);
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // Send what the operator typed, as typed: the server is the one validator.
    const raw = rateEl.value.trim();
    const rate = raw === "" ? null : Number(raw);
    const channels = [...chans.querySelectorAll("input[type=checkbox]:checked")].map((b) => b.value);
    renderApply(true);
    setText(status, "applying…");
    // JSON with the CSRF token; a stale password check asks for the password (api.js)
    const res = await apiFetch("/api/acquisition", { method: "PUT", body: { rate_hz: rate, channels } });
    if (res.ok) {
      fill(res.data);
      showError("");
      setText(status, `applied: ${res.data.rate_hz} Hz, ${res.data.channels.length} channel(s)`);
    } else if (res.status === 0) {
      showError(describeError(res.error));
      setText(status, "");
    } else {
      showError(describeError(res.error));
      setText(status, "not applied");
      log.local({ trigger: "acquisition", message: describeError(res.error), kind: "error" });
    }
    renderApply();
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
