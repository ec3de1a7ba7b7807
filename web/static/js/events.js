// Event log: safety and command events pushed by the server, plus this page's own
// command errors. Reloaded from GET /api/events on every (re)connect, newest first.

import { session } from "./session.js";
import { formatTime, formatValues } from "./format.js";
import { apiGet, describeError } from "./api.js";

const MAX_ENTRIES = 200;

function keyOf(ev) {
  return `${ev.t}|${ev.trigger}|${ev.message}`;
}

// The server stamps events with its monotonic clock (t) and the wall clock (wall_t).
function wallTime(ev) {
  if (Number.isFinite(ev.wall_t)) return ev.wall_t;
  return Number.isFinite(ev.t) && ev.t > 1e9 ? ev.t : NaN;
}

export function createEventLog({ list, panel }) {
  let entries = [];              // oldest first, as the API returns them
  const seen = new Set();

  function render(ev) {
    const li = document.createElement("li");
    li.className = `event kind-${ev.kind || "info"}`;
    if (ev.local) li.classList.add("local");
    const time = document.createElement("time");
    const wt = wallTime(ev);
    time.dateTime = Number.isFinite(wt) ? new Date(wt * 1000).toISOString() : "";
    time.textContent = formatTime(wt);
    const trig = document.createElement("span");
    trig.className = "event-trigger";
    trig.textContent = ev.trigger || ev.kind || "event";
    const msg = document.createElement("span");
    msg.className = "event-msg";
    let text = ev.message || "";
    if (ev.state_before && ev.state_after && ev.state_before !== ev.state_after) {
      text += ` (${ev.state_before} → ${ev.state_after})`;
    }
    msg.textContent = text;
    const vals = document.createElement("span");
    vals.className = "event-values";
    vals.textContent = formatValues(ev.values);
    li.append(time, trig, msg, vals);
    return li;
  }

  function add(ev) {
    const k = keyOf(ev);
    if (seen.has(k)) return;
    seen.add(k);
    entries.push(ev);
    list.prepend(render(ev));
    while (entries.length > MAX_ENTRIES) {
      seen.delete(keyOf(entries.shift()));
      list.lastElementChild?.remove();
    }
  }

  function replaceAll(events) {
    // Keep our own entries and anything pushed while the GET was in flight.
    const at = (e) => wallTime(e) || 0;
    const newest = events.reduce((m, e) => Math.max(m, at(e)), 0);
    const keep = entries.filter((e) => e.local || at(e) > newest);
    const merged = [...events, ...keep].sort((a, b) => at(a) - at(b)).slice(-MAX_ENTRIES);
    entries = [];
    seen.clear();
    list.replaceChildren();
    for (const ev of merged) add(ev);
  }

  async function reload() {
    const res = await apiGet("/api/events?limit=100");
    if (res.ok) replaceAll(Array.isArray(res.data && res.data.events) ? res.data.events : []);
    else local({ trigger: "events", message: `could not load the event log: ${describeError(res.error)}`, kind: "error" });
  }

  /** An entry from this page (command refused, connection lost), timed on the server clock. */
  function local({ trigger, message, kind = "info", values = null }) {
    const now = session.serverNowMs() / 1000;
    add({ t: now, wall_t: now, trigger, message, values, kind, local: true });
  }

  session.on("event", (ev) => add(ev));
  session.on("hello", () => reload());

  return {
    local,
    reload,
    setState(snap) {
      if (panel.classList.contains("stale") !== (snap === null)) panel.classList.toggle("stale", snap === null);
    },
  };
}
