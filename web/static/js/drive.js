// Speed and direction: on-screen joystick, keyboard, gamepad; speed caps by sliders.
//
// Dead-man rules (docs/dashboard.md):
// - speed goes out at a steady 20 Hz only while a control is *held*; on release, zero once;
// - heartbeats go out at 10 Hz only while the robot runs (or a start is in flight: on a slow link the
//   start's answer takes a round trip, and the runtime's link timer runs from the start; issue 20) and the
//   page is visible and focused;
// - hidden, blurred, closing, disconnected: every held control is released, zero speed is
//   sent once (if possible) and then nothing, so the server's link-loss stop takes over;
// - a released control stays "stale" until the operator lets go of it (pointer up, key up,
//   stick back to centre): nothing resumes by itself after a reconnect, a refocus, or the
//   robot starting while a control was held.
// - a robot that does not take `speed` (an arm, a platform: `takesSpeed` false, from GET /api/robot →
//   commands) gets none from any control (keys, gamepad, joystick); heartbeats and the e-stop stay.

import { session } from "./session.js";
import * as presence from "./presence.js";
import { describeSetpointSource, formatNumber, setAttr, setPrefixedClass, setText } from "./format.js";

const TICK_MS = 50;            // 20 Hz speed commands while held
const HEARTBEAT_EVERY = 2;     // every 2nd tick: 10 Hz
const STICK_DEADZONE = 0.15;
const KNOB_TRAVEL = 66;        // SVG units, joystick ring radius 96 minus knob 30
const GAMEPAD_ESTOP_BUTTON = 1; // B / circle
// A websocket setpoint equal to one this page sent within this long is "this page's";
// telemetry runs ~20-100 ms behind the command, and a held control resends every 50 ms.
const MINE_WINDOW_MS = 1500;

const KEYS = {
  ArrowUp: [0, 1], KeyW: [0, 1],
  ArrowDown: [0, -1], KeyS: [0, -1],
  ArrowLeft: [-1, 0], KeyA: [-1, 0],
  ArrowRight: [1, 0], KeyD: [1, 0],
};

function isTextEntry(el) {
  if (!el) return false;
  const tag = el.tagName;
  return tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA" || el.isContentEditable;
}

export function createDrive({ root, onEstop, takesSpeed = true }) {
  const joyEl = root.querySelector("#joystick");
  const knob = joyEl.querySelector(".joy-knob");
  const linCap = root.querySelector("#lin-cap");
  const angCap = root.querySelector("#ang-cap");
  const linCapOut = root.querySelector("#lin-cap-out");
  const angCapOut = root.querySelector("#ang-cap-out");
  const spLinear = root.querySelector("#sp-linear");
  const spAngular = root.querySelector("#sp-angular");
  const spSource = root.querySelector("#sp-source");
  const sourceEl = root.querySelector("#drive-source");
  const hintEl = root.querySelector("#drive-hint");

  let limits = { linear: [0, 0], angular: [0, 0] };
  let robotState = null;
  let tick = 0;
  let moving = false;          // the last speed we sent was not zero
  let zeroOnReconnect = false; // the link went while this page was driving: zero first on the next connection
  const recent = [];           // {at, linear, angular, input} of speeds this page sent lately

  // Inputs; x right, y forward, both in [-1, 1].
  const joy = { pointerId: null, held: false, stale: false, x: 0, y: 0 };
  const keys = new Set();       // codes pressed *after* the last release (fresh presses only)
  const pad = { present: false, held: false, stale: false, x: 0, y: 0, estopDown: false };

  // ---------------------------------------------------------------- limits and caps

  function setLimits(robot) {
    const l = (robot && robot.limits) || {};
    const lin = Array.isArray(l.linear_m_s) ? l.linear_m_s : [0, 0];
    const ang = Array.isArray(l.angular_rad_s) ? l.angular_rad_s : [0, 0];
    limits = { linear: lin.map(Number), angular: ang.map(Number) };
    const drivable = limits.linear[1] > 0 || limits.linear[0] < 0 || limits.angular[1] > 0;
    root.classList.toggle("not-drivable", !drivable);
  }

  function capOf(el) {
    return Math.min(1, Math.max(0, Number(el.value) / 100));
  }

  function updateCapOutputs() {
    linCapOut.value = `${linCap.value} %`;
    angCapOut.value = `${angCap.value} %`;
  }
  linCap.addEventListener("input", updateCapOutputs);
  angCap.addEventListener("input", updateCapOutputs);
  updateCapOutputs();

  /** Map stick (x right, y forward) to {linear, angular} within the limits and caps. */
  function toCommand(x, y) {
    const [lo, hi] = limits.linear;
    const [alo, ahi] = limits.angular;
    const cl = capOf(linCap);
    const ca = capOf(angCap);
    let linear = y >= 0 ? y * Math.max(0, hi) * cl : -y * Math.min(0, lo) * cl;
    // REP-103: positive angular is counter-clockwise (left); stick right turns right.
    let angular = x >= 0 ? x * Math.min(0, alo) * ca : -x * Math.max(0, ahi) * ca;
    linear = Math.min(hi, Math.max(lo, linear)) || 0;
    angular = Math.min(ahi, Math.max(alo, angular)) || 0;
    return { linear, angular };
  }

  // ---------------------------------------------------------------- joystick (pointer events: mouse, pen, touch)

  function joyFromEvent(e) {
    const r = joyEl.getBoundingClientRect();
    const radius = (r.width / 2) * (KNOB_TRAVEL / 100);
    let x = (e.clientX - (r.left + r.width / 2)) / radius;
    let y = -(e.clientY - (r.top + r.height / 2)) / radius;
    const m = Math.hypot(x, y);
    if (m > 1) { x /= m; y /= m; }
    joy.x = x;
    joy.y = y;
  }

  function drawKnob() {
    const active = joy.held && !joy.stale;
    setAttr(knob, "cx", active ? (joy.x * KNOB_TRAVEL).toFixed(1) : "0");
    setAttr(knob, "cy", active ? (-joy.y * KNOB_TRAVEL).toFixed(1) : "0");
    joyEl.classList.toggle("held", active);
  }

  joyEl.addEventListener("pointerdown", (e) => {
    if (e.pointerType === "mouse" && e.button !== 0) return;
    e.preventDefault();
    joyEl.focus({ preventScroll: true });
    try { joyEl.setPointerCapture(e.pointerId); } catch { /* synthetic pointer */ }
    joy.pointerId = e.pointerId;
    joy.held = true;
    joy.stale = false;
    joyFromEvent(e);
    drawKnob();
    if (!canDrive()) { explainRefusal(); release("not ready to drive"); }
  });
  joyEl.addEventListener("pointermove", (e) => {
    if (e.pointerId !== joy.pointerId || joy.stale) return;
    joyFromEvent(e);
    drawKnob();
  });
  const joyUp = (e) => {
    if (e.pointerId !== joy.pointerId) return;
    joy.pointerId = null;
    joy.held = false;
    joy.stale = false;
    joy.x = joy.y = 0;
    drawKnob();
  };
  joyEl.addEventListener("pointerup", joyUp);
  joyEl.addEventListener("pointercancel", joyUp);
  joyEl.addEventListener("lostpointercapture", joyUp);
  joyEl.addEventListener("contextmenu", (e) => e.preventDefault());

  // ---------------------------------------------------------------- keyboard

  window.addEventListener("keydown", (e) => {
    if (e.code === "Space" || e.key === " ") {
      // E-STOP wins over everything, even a focused button or a form field.
      e.preventDefault();
      e.stopPropagation();
      if (!e.repeat) onEstop("Space key");
      return;
    }
    if (!(e.code in KEYS) || e.ctrlKey || e.metaKey || e.altKey) return;
    if (isTextEntry(e.target) || e.target.closest?.("dialog")) return;
    e.preventDefault();
    // Auto-repeat of a key held across a release (blur, reconnect) never re-engages.
    if (e.repeat) return;
    keys.add(e.code);
    if (!canDrive()) { explainRefusal(); release("not ready to drive"); }
  }, { capture: true });
  window.addEventListener("keyup", (e) => {
    if (e.code === "Space" || e.key === " ") {
      // Chrome activates a focused button on Space *up*: swallow it too.
      e.preventDefault();
      e.stopPropagation();
      return;
    }
    keys.delete(e.code);
  }, { capture: true });

  function keyVector() {
    let x = 0;
    let y = 0;
    for (const c of keys) {
      x += KEYS[c][0];
      y += KEYS[c][1];
    }
    return { x: Math.sign(x), y: Math.sign(y) };
  }

  // ---------------------------------------------------------------- gamepad

  window.addEventListener("gamepadconnected", () => { pad.present = true; });
  window.addEventListener("gamepaddisconnected", () => {
    pad.present = [...(navigator.getGamepads?.() || [])].some(Boolean);
    pad.held = false;
  });

  function pollGamepad() {
    if (!pad.present || !navigator.getGamepads) return;
    const gp = [...navigator.getGamepads()].find((g) => g && g.connected);
    if (!gp) { pad.held = false; return; }
    const b = gp.buttons[GAMEPAD_ESTOP_BUTTON];
    const estopDown = !!(b && b.pressed);
    if (estopDown && !pad.estopDown) onEstop("gamepad button");
    pad.estopDown = estopDown;
    const dz = (v) => (Math.abs(v) < STICK_DEADZONE ? 0 : v);
    const x = dz(gp.axes[0] || 0);
    const y = dz(-(gp.axes[1] || 0));
    const deflected = x !== 0 || y !== 0;
    if (!deflected) pad.stale = false; // back to centre: may engage again
    pad.held = deflected && !pad.stale;
    pad.x = x;
    pad.y = y;
    if (pad.held && !canDrive()) { explainRefusal(); release("not ready to drive"); }
  }

  // ---------------------------------------------------------------- the send loop

  function canDrive() {
    return session.connected && presence.isActive() && robotState === "running";
  }

  function explainRefusal() {
    let why = "";
    if (!session.connected) why = "Not connected to the robot.";
    else if (!presence.isActive()) why = `Paused: ${presence.reason()}.`;
    else if (robotState !== "running") why = "Press Start first, then drive.";
    setText(hintEl, why);
  }

  function currentInput() {
    if (!takesSpeed) return null;
    if (joy.held && !joy.stale) return { source: "joystick", x: joy.x, y: joy.y };
    if (pad.held) return { source: "gamepad", x: pad.x, y: pad.y };
    if (keys.size) {
      const v = keyVector();
      return { source: "keys", x: v.x, y: v.y };
    }
    return null;
  }

  function sendSpeed(cmd, input = null) {
    if (!takesSpeed) return false;
    if (session.post("speed", { linear: cmd.linear, angular: cmd.angular })) {
      moving = cmd.linear !== 0 || cmd.angular !== 0;
      const now = performance.now();
      recent.push({ at: now, linear: cmd.linear, angular: cmd.angular, input });
      while (recent.length && now - recent[0].at > MINE_WINDOW_MS) recent.shift();
      return true;
    }
    return false;
  }

  /** The input of this page's recent command equal to `sp`, or undefined when none matches. */
  function sentByMe(sp) {
    const now = performance.now();
    for (let i = recent.length - 1; i >= 0; i--) {
      const c = recent[i];
      if (now - c.at > MINE_WINDOW_MS) break;
      if (Math.abs(c.linear - sp.linear) < 1e-6 && Math.abs(c.angular - sp.angular) < 1e-6) return c.input;
    }
    return undefined;
  }

  function showCommand(source) {
    setText(sourceEl, source || "none");
  }

  /** The setpoint in force (snapshot.setpoint) and where it came from; null greys it out. */
  function setState(snap) {
    const sp = snap && snap.setpoint;
    if (!sp) {
      setText(spLinear, "—");
      setText(spAngular, "—");
      setText(spSource, snap ? "not reported" : "—");
      setPrefixedClass(spSource, "source-", "none");
      return;
    }
    setText(spLinear, formatNumber(sp.linear, 2));
    setText(spAngular, formatNumber(sp.angular, 2));
    const input = sp.source === "websocket" ? sentByMe(sp) : undefined;
    const d = describeSetpointSource(sp.source, input !== undefined, input);
    setText(spSource, d.text);
    setPrefixedClass(spSource, "source-", d.kind);
  }

  function onTick() {
    tick += 1;
    pollGamepad();
    const input = currentInput();
    if (!canDrive() && session.connected && presence.isActive() && session.startPending()) {
      if (tick % HEARTBEAT_EVERY === 0) session.post("heartbeat");
    }
    if (!canDrive()) {
      if (input) release("not ready to drive");
      showCommand(null);
      return;
    }
    if (hintEl.textContent) setText(hintEl, "");
    if (zeroOnReconnect && sendSpeed({ linear: 0, angular: 0 })) zeroOnReconnect = false;  // before any heartbeat
    if (input) {
      sendSpeed(toCommand(input.x, input.y), input.source);
    } else if (moving) {
      sendSpeed({ linear: 0, angular: 0 });
    }
    if (tick % HEARTBEAT_EVERY === 0) session.post("heartbeat");
    showCommand(input && input.source);
  }
  setInterval(onTick, TICK_MS);

  /**
   * Release every held control; it stays stale until physically let go.
   * Sends zero speed once when `sendZero` and the socket can still carry it.
   */
  function release(why, { sendZero = false } = {}) {
    if (joy.pointerId !== null) joy.stale = true;
    joy.held = joy.pointerId !== null && !joy.stale;
    keys.clear();
    if (pad.held) pad.stale = true;
    pad.held = false;
    drawKnob();
    // zero only when this page's own last speed was not zero: a page that was not driving must not take over
    // from whatever drives the robot (a mission, another operator's page), issue 23
    if (sendZero && session.connected && moving) {
      sendSpeed({ linear: 0, angular: 0 });
    }
    moving = false;
    showCommand(null);
  }

  presence.onChange((active) => {
    if (!active) {
      release("operator away", { sendZero: true });
      explainRefusal();
    } else {
      setText(hintEl, "");
    }
  });

  session.on("disconnect", () => {
    zeroOnReconnect = zeroOnReconnect || moving;  // this page's non-zero setpoint may still be in force
    release("disconnected");
    moving = false;
    explainRefusal();
  });

  session.on("hello", ({ robot, state }) => {
    setLimits(robot);
    release("reconnected");
    robotState = state ? state.state : null;
    // A page that was driving when its link went starts its new connection from zero: its setpoint from before
    // must not stay in force. A page that was not driving sends nothing (it must not end a mission or take
    // over from another operator by opening or reconnecting).
    if (zeroOnReconnect && robotState === "running" && presence.isActive()) {
      if (sendSpeed({ linear: 0, angular: 0 })) zeroOnReconnect = false;
    } else if (robotState !== "running") {
      zeroOnReconnect = false;  // nothing runs: no setpoint of ours is in force
    }
    moving = false;
  });

  return {
    setLimits,
    setState,
    /** Latest robot state, from every telemetry message (not throttled: gating depends on it). */
    noteState(state) {
      if (state !== robotState) {
        const was = robotState;
        robotState = state;
        // Anything held when the robot (re)starts or stops is stale: act again.
        if (was !== null) release(`state ${was} -> ${state}`);
      }
    },
    release,
    toCommand,
    get held() { return currentInput() !== null; },
  };
}
