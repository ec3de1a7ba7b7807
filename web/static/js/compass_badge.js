// The top bar's disturbed-compass badge (issue 23; docs/sensing.md, "Magnetic disturbances").
//
// When the estimator's disturbance check finds the magnetometer's field off the reference (steel nearby, the
// motors' hard iron drifting), it stops fusing the compass and carries the heading on the gyro and the
// odometry: the heading the page shows is then dead reckoning, good for a while, not a compass reading. The
// operator should know that before trusting a turn to a compass heading. So while the `mag_disturbed` channel
// reads 1 the top bar says "compass disturbed — heading from gyro + odometry" (words, not only the amber), and
// the badge goes when the channel clears (clean again for `[estimation] mag_recover_s`).
//
// Source: the snapshot's `values.mag_disturbed` (the channel); when a subscription leaves that channel out of
// `values`, the estimator's own status, `estimation.magnetometer.disturbed`. NaN (the check is not active:
// uncalibrated) and no snapshot (disconnected: the last word is not the robot's now) hide the badge.
// Loaded by main.js as an optional panel (`data-panel-module` on the badge element in index.html).

export const TEXT = "compass disturbed — heading from gyro + odometry";

/** Whether the snapshot says the compass is disturbed now (true, false, or null: the snapshot does not say). */
export function compassDisturbed(snap) {
  if (!snap) return null;
  const v = snap.values ? snap.values.mag_disturbed : undefined;
  if (typeof v === "number") return Number.isFinite(v) ? v >= 0.5 : null;
  const mag = snap.estimation && snap.estimation.magnetometer;
  return mag && typeof mag.disturbed === "boolean" ? mag.disturbed : null;
}

export function createCompassBadge({ root }) {
  root.textContent = TEXT;
  root.title = "The magnetometer's field is off its reference (strength or dip): it is not fused, the heading "
    + "runs on the gyro and the wheel odometry until the field is clean again";
  let shown = false;
  return {
    setState(snap) {
      const on = compassDisturbed(snap) === true;
      if (on === shown) return;
      shown = on;
      root.hidden = !on;
      root.dataset.disturbed = on ? "1" : "0";
    },
  };
}
