// Replay mode (python -m server replay FILE): the REPLAY banner and its controls.
//
// The page is the ordinary dashboard; the server feeds it recorded snapshots. The robot
// description says whether this is a replay (`robot.replay`); on a live robot this
// module does nothing. In replay mode it shows the banner (play/pause, a seek slider, speed, the time), and
// after every other panel's setState it disables every control that would command the
// robot (the server refuses them anyway, 409 "replay").
//
// The time readout follows the snapshots (their `t` is the recorded time); the play
// state is polled once a second and after each click. After a seek the page reloads:
// plots and the event log then start over at the new position instead of mixing two
// stretches of the recording.

import { formatDuration } from "./recording.js";
import { setText } from "./format.js";
import { apiFetch, apiGet, describeError } from "./api.js";

const STATUS_PERIOD_MS = 1000;
// every control that would command the robot; disabled after each render in replay mode
const COMMAND_CONTROLS = [
  "#btn-start", "#btn-stop", "#btn-reset", "#estop", "#acq-apply",
  "#navigation-panel form button", "#navigation-panel form input",
];

export function createReplay({ root, robot, session }) {
  const playBtn = root.querySelector("#replay-play");
  const seek = root.querySelector("#replay-seek");
  const speed = root.querySelector("#replay-speed");
  const timeEl = root.querySelector('[data-field="time"]');
  const fileEl = root.querySelector('[data-field="file"]');
  const errorEl = root.querySelector("#replay-error");
  let status = null;            // GET /api/replay
  let active = false;
  let dragging = false;

  function showError(text) {
    errorEl.hidden = !text;
    setText(errorEl, text || "");
  }

  function position(snap) {
    if (!status) return 0;
    const t = snap && Number.isFinite(snap.t) ? snap.t : status.position_t;
    return Math.min(Math.max(t - status.start_t, 0), status.duration_s);
  }

  function renderTime(offset) {
    if (!status) return;
    setText(timeEl, `${formatDuration(offset)} / ${formatDuration(status.duration_s)}`);
    if (!dragging && status.duration_s > 0) seek.value = String(Math.round((offset / status.duration_s) * 1000));
  }

  function renderStatus() {
    if (!status) return;
    setText(fileEl, status.file);
    const playing = status.playing;
    playBtn.textContent = playing ? "Pause" : status.ended ? "Play again" : "Play";
    playBtn.setAttribute("aria-label", playing ? "Pause" : "Play");
    root.classList.toggle("replay-playing", playing);
    root.classList.toggle("replay-ended", status.ended);
    const sp = String(status.speed);
    if (![...speed.options].some((o) => o.value === sp)) speed.append(new Option(`${sp}×`, sp));
    if (document.activeElement !== speed) speed.value = sp;
    if (status.error) showError(`replay stopped: ${status.error}`);
    renderTime(position(session && session.latest));
  }

  async function poll() {
    if (document.visibilityState !== "visible") return;
    const res = await apiGet("/api/replay");
    if (res.ok) {       // else the connection banner says it
      status = res.data;
      renderStatus();
    }
  }

  async function control(name, body) {
    const res = await apiFetch(`/api/replay/${name}`, { body });
    if (!res.ok) {
      showError(`${name} refused: ${describeError(res.error)}`);
      return false;
    }
    showError("");
    status = res.data;
    renderStatus();
    return true;
  }

  playBtn.addEventListener("click", () => control(status && status.playing ? "pause" : "play"));
  speed.addEventListener("change", () => control("speed", { speed: Number(speed.value) }));
  seek.addEventListener("input", () => {
    dragging = true;
    if (status) setText(timeEl, `${formatDuration((Number(seek.value) / 1000) * status.duration_s)} / ${formatDuration(status.duration_s)}`);
  });
  seek.addEventListener("change", async () => {
    dragging = false;
    if (!status) return;
    const ok = await control("seek", { offset_s: (Number(seek.value) / 1000) * status.duration_s });
    if (ok) window.location.reload();   // plots and events start over at the new position
  });

  function disableCommands() {
    for (const sel of COMMAND_CONTROLS) {
      for (const el of document.querySelectorAll(sel)) {
        if (!el.disabled) el.disabled = true;
      }
    }
    const joystick = document.querySelector("#joystick");
    if (joystick && !joystick.inert) {
      joystick.inert = true;
      joystick.setAttribute("aria-disabled", "true");
    }
  }

  // replay mode is told by the description (the server's ReplayRuntime adds `replay`), so a
  // live dashboard makes no request at all for it
  async function activate() {
    active = true;
    root.hidden = false;
    document.body.classList.add("replay-mode");
    disableCommands();
    await poll();
    setInterval(poll, STATUS_PERIOD_MS);
  }
  if (robot && robot.replay) activate();

  return {
    get active() { return active; },
    setState(snap) {
      if (!active) return;
      disableCommands();               // after the other panels: they re-enable buttons by state
      if (snap) renderTime(position(snap));
    },
  };
}
