// Start / Stop / Reset (with an in-page confirmation dialog) and the E-STOP.
//
// E-STOP goes over HTTP (POST /api/estop), the socket and the WebRTC data channel at once; the
// runtime latches the first. The answer shown is the socket's, or HTTP's when the socket is down or
// does not answer within ESTOP_WS_TIMEOUT_MS: it must work whenever any path to the server does.

import { session } from "./session.js";
import { formatCause, setText } from "./format.js";
import { apiFetch } from "./api.js";

const ESTOP_WS_TIMEOUT_MS = 500;

function setDisabled(el, v) {
  if (el.disabled !== v) el.disabled = v;
}

export function createControls({ root, dialog, estopButton, log, drive }) {
  const btnStart = root.querySelector("#btn-start");
  const btnStop = root.querySelector("#btn-stop");
  const btnReset = root.querySelector("#btn-reset");
  const errorEl = root.querySelector("#command-error");
  const dlgCause = dialog.querySelector('[data-field="cause"]');
  const dlgError = dialog.querySelector("#reset-error");
  const dlgConfirm = dialog.querySelector("#reset-confirm");
  let state = null;

  function showError(text) {
    errorEl.hidden = !text;
    setText(errorEl, text || "");
  }

  function refused(command, res) {
    const e = res.error || {};
    const text = `${command} refused: ${e.message || e.code || "unknown error"}${e.code ? ` (${e.code})` : ""}`;
    showError(text);
    log.local({ trigger: command, message: `${e.code || "error"}: ${e.message || ""}`, kind: "error" });
    return text;
  }

  async function run(command) {
    showError("");
    const res = await session.command(command);
    if (!res.ok) refused(command, res);
    else if (res.state) drive.noteState(res.state);
    return res;
  }

  btnStart.addEventListener("click", () => run("start"));
  btnStop.addEventListener("click", () => run("stop"));

  // ---------------------------------------------------------------- E-STOP

  async function estop(source) {
    drive.release("e-stop");
    estopButton.classList.add("flash");
    setTimeout(() => estopButton.classList.remove("flash"), 150);
    // every path at once (the runtime latches the first): HTTP now, the socket (and the WebRTC data
    // channel, session.js) beside it. urgent: no token fetch, no retry, no dialog, keepalive
    // (docs/security.md: the e-stop needs no CSRF token; the page's goes along anyway)
    const http = apiFetch("/api/estop", { body: { reason: `dashboard ${source}` }, urgent: true });
    let res = { ok: false };
    if (session.connected) res = await session.command("estop", { reason: `dashboard ${source}` }, ESTOP_WS_TIMEOUT_MS);
    if (!res.ok) res = await http;
    if (!res.ok) {
      refused("E-STOP", res.status ? res : { error: { code: "unreachable", message: "server unreachable; the robot stops by itself on link loss" } });
    }
    return res;
  }
  estopButton.addEventListener("click", (e) => {
    // Space is handled by the global key handler (drive.js); a click is a click.
    estop(e.detail === 0 ? "E-STOP key" : "E-STOP button");
  });

  // ---------------------------------------------------------------- reset with confirmation

  btnReset.addEventListener("click", () => {
    setText(dlgError, "");
    dlgError.hidden = true;
    setText(dlgCause, formatCause(state && state.cause) || "none reported");
    dlgConfirm.disabled = false;
    dialog.showModal();
    dlgConfirm.focus();
  });
  dlgConfirm.addEventListener("click", async () => {
    dlgConfirm.disabled = true;
    const res = await session.command("reset");
    dlgConfirm.disabled = false;
    if (res.ok) {
      showError("");
      dialog.close("confirm");
      if (res.state) drive.noteState(res.state);
    } else {
      const text = refused("reset", res);
      setText(dlgError, text);
      dlgError.hidden = false;
    }
  });

  // ---------------------------------------------------------------- state

  function setState(snap) {
    state = snap;
    const s = snap ? snap.state : null;
    const on = snap !== null && session.connected;
    setDisabled(btnStart, !(on && s === "idle"));
    setDisabled(btnStop, !(on && (s === "running" || s === "stopping")));
    setDisabled(btnReset, !(on && (s === "estop" || s === "fault")));
    if (root.classList.contains("stale") !== (snap === null)) root.classList.toggle("stale", snap === null);
    if (snap === null && dialog.open) dialog.close("disconnected");
    if (dialog.open && s !== "estop" && s !== "fault") dialog.close("cleared");
    if (dialog.open) setText(dlgCause, formatCause(snap.cause) || "none reported");
  }

  return { setState, estop };
}
