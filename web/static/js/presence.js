// Is the operator looking at this page? Visible, focused and not being unloaded.
//
// The page may command the robot only while this is true: when the tab is hidden,
// the window loses focus or the page is going away, the drive module releases every
// held control, sends zero speed once and then stays silent, so the server's
// link-loss stop takes over (docs/dashboard.md, "How the page keeps the robot safe").

let visible = document.visibilityState === "visible";
let focused = document.hasFocus();
let unloading = false;
let last = visible && focused && !unloading;
const listeners = new Set();

/** True while the operator can see and use this page. */
export function isActive() {
  return visible && focused && !unloading;
}

/** Why the page is not active ("" when it is). */
export function reason() {
  if (unloading) return "page closing";
  if (!visible) return "tab hidden";
  if (!focused) return "window not focused";
  return "";
}

/** Call fn(active, reason) on every transition. Returns an unsubscribe function. */
export function onChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function update() {
  const now = isActive();
  if (now === last) return;
  last = now;
  for (const fn of listeners) fn(now, reason());
}

document.addEventListener("visibilitychange", () => {
  visible = document.visibilityState === "visible";
  update();
});
window.addEventListener("focus", () => { focused = true; update(); });
window.addEventListener("blur", () => { focused = false; update(); });
// pagehide: tab closed, navigated away or put into the back/forward cache.
window.addEventListener("pagehide", () => { unloading = true; update(); });
window.addEventListener("pageshow", (e) => {
  if (!e.persisted) return;
  unloading = false;
  visible = document.visibilityState === "visible";
  focused = document.hasFocus();
  update();
});
// A frozen page (tab discarding, background freezing) cannot answer either.
document.addEventListener("freeze", () => { unloading = true; update(); });
document.addEventListener("resume", () => { unloading = false; update(); });
