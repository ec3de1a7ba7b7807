// The Stewart platform's pose panel (docs/arms.md): a pose form (mm and degrees at this edge, SI on the
// wire), Home, and readouts of the achieved pose, the legs and which legs the controller saturated.
// A pose beyond the stroke is refused by the server (out_of_stroke, naming the legs) unless the profile
// saturates; then the saturated legs show here and in the event log.

import { session } from "./session.js";
import { formatNumber, setText } from "./format.js";

const DEG = 180 / Math.PI;
const POSE = ["x_m", "y_m", "z_m", "roll_rad", "pitch_rad", "yaw_rad"];

export function createPlatform({ root, robot }) {
  const form = root.querySelector("#pose-form");
  const status = root.querySelector("#pose-status");
  const field = (name) => root.querySelector(`[data-field="${name}"]`);
  const home = (robot.geometry && robot.geometry.home) || { z_m: 0.5 };
  let last = null;

  function fill(pose) {
    for (const input of form.querySelectorAll("input[name]")) {
      const v = pose[input.name] || 0;
      input.value = String(Number((v * Number(input.dataset.scale)).toFixed(1)));
    }
  }
  fill(home);

  function say(text, kind = "") {
    setText(status, text);
    status.dataset.kind = kind;
  }

  async function go(pose) {
    const res = await session.command("pose", pose);
    if (res.ok) say("pose: accepted", "ok");
    else say(`pose refused: ${res.error.message || res.error.code} (${res.error.code})`, "error");
    return res;
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const pose = {};
    for (const input of form.querySelectorAll("input[name]")) {
      const v = Number(input.value);
      if (input.value.trim() === "" || !Number.isFinite(v)) {
        say(`${input.name.replace(/_(m|rad)$/, "")} must be a number`, "error");
        input.focus();
        return;
      }
      pose[input.name] = v / Number(input.dataset.scale);
    }
    go(pose);
  });
  root.querySelector("#pose-home").addEventListener("click", () => {
    fill(home);
    go(Object.fromEntries(POSE.map((k) => [k, home[k] || 0])));
  });

  function setState(snap) {
    root.classList.toggle("stale", !snap);
    if (!snap || !snap.values) return;
    const v = snap.values;
    if (v === last) return;
    last = v;
    const pos = ["x_m", "y_m", "z_m"].map((k) => formatNumber(v[k] * 1000, 1)).join(", ");
    const ang = ["roll_rad", "pitch_rad", "yaw_rad"].map((k) => formatNumber(v[k] * DEG, 1)).join(", ");
    setText(field("pose"), v.pose_valid === 0 ? "lost (forward kinematics failed)" : `${pos} mm · ${ang}°`);
    setText(field("legs"), [1, 2, 3, 4, 5, 6].map((i) => formatNumber(v[`leg${i}_m`] * 1000, 0)).join(" ") + " mm");
    const sat = (snap.command && snap.command.saturated_legs) || [];
    const el = field("saturated");
    setText(el, sat.length ? `legs ${sat.join(", ")} (the target is beyond the stroke)` : "none");
    el.className = sat.length ? "saturated-some" : "saturated-none";
  }

  return { setState };
}
