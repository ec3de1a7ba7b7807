// Pure helpers shared by the panels: threshold zones, display units, number and time formatting.
// No DOM, no state: every function is a plain input -> output mapping.

/** Zone of a value against a ChannelSpec's thresholds: "na" | "ok" | "warn" | "crit". */
export function zoneOf(spec, value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "na";
  if (spec.crit_low != null && value <= spec.crit_low) return "crit";
  if (spec.crit_high != null && value >= spec.crit_high) return "crit";
  if (spec.warn_low != null && value <= spec.warn_low) return "warn";
  if (spec.warn_high != null && value >= spec.warn_high) return "warn";
  return "ok";
}

// SI inside, degrees only at the UI edge (DESIGN.md): angles are shown in degrees.
// A driver that still says "deg" gets the same "°" as every other angle.
const DISPLAY_UNITS = {
  rad: { unit: "°", scale: 180 / Math.PI, decimalsDelta: -1 },
  deg: { unit: "°", scale: 1, decimalsDelta: 0 },
};

/** How a channel is displayed: {unit, scale, decimals}. */
export function displayOf(spec) {
  const t = DISPLAY_UNITS[spec.unit];
  const decimals = Number.isInteger(spec.decimals) ? spec.decimals : 2;
  if (!t) return { unit: spec.unit || "", scale: 1, decimals };
  return { unit: t.unit, scale: t.scale, decimals: Math.max(0, decimals + t.decimalsDelta) };
}

/** A number with fixed decimals, "—" for null/NaN; "-0.00" is shown as "0.00". */
export function formatNumber(value, decimals = 2) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "—";
  const s = value.toFixed(decimals);
  return /^-0\.?0*$/.test(s) ? s.slice(1) : s;
}

/** Fraction of value in [min, max], clamped to [0, 1]. */
export function fraction(value, min, max) {
  if (!Number.isFinite(value) || !(max > min)) return 0;
  return Math.min(1, Math.max(0, (value - min) / (max - min)));
}

/** Threshold zones of a spec as [from, to, level] intervals inside [min, max] (for dial and bar bands). */
export function zoneBands(spec) {
  const { min, max } = spec;
  const out = [];
  const clip = (a, b, level) => {
    const lo = Math.max(min, a);
    const hi = Math.min(max, b);
    if (hi > lo) out.push([lo, hi, level]);
  };
  if (spec.warn_low != null) clip(spec.crit_low ?? -Infinity, spec.warn_low, "warn");
  if (spec.crit_low != null) clip(-Infinity, spec.crit_low, "crit");
  if (spec.warn_high != null) clip(spec.warn_high, spec.crit_high ?? Infinity, "warn");
  if (spec.crit_high != null) clip(spec.crit_high, Infinity, "crit");
  return out;
}

/**
 * Where the setpoint in force came from, for the operator (docs/api.md "State", setpoint.source):
 * {text, kind} with kind "none" | "mine" | "other" | "http" | "auto".
 * `mine` is true when the setpoint is one this page sent itself.
 * e.g. ("http") -> {text: "HTTP API", kind: "http"}; ("heading") -> {text: "automatic: heading", kind: "auto"}.
 */
export function describeSetpointSource(source, mine = false, input = null) {
  if (source === null || source === undefined || source === "") return { text: "none (zero)", kind: "none" };
  if (source === "http") return { text: "HTTP API", kind: "http" };
  if (source === "websocket") {
    return mine
      ? { text: `this page${input ? ` (${input})` : ""}`, kind: "mine" }
      : { text: "websocket (another client)", kind: "other" };
  }
  const names = { mag_calibration: "compass calibration" };
  return { text: `automatic: ${names[source] || String(source).replace(/_/g, " ")}`, kind: "auto" };
}

/** Local wall-clock time "HH:MM:SS.mmm" of a unix time in seconds. */
export function formatTime(tSeconds) {
  if (!Number.isFinite(tSeconds)) return "—";
  const d = new Date(tSeconds * 1000);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

/** An event's or cause's values object as "k=v k=v" (numbers rounded). */
export function formatValues(values) {
  if (!values || typeof values !== "object") return "";
  return Object.entries(values)
    .map(([k, v]) => `${k}=${typeof v === "number" ? +v.toPrecision(4) : JSON.stringify(v)}`)
    .join("  ");
}

/** "trigger: message" of a state cause, or "" when there is none. */
export function formatCause(cause) {
  if (!cause) return "";
  const trig = cause.trigger || "";
  const msg = cause.message || "";
  return trig && msg ? `${trig}: ${msg}` : trig || msg;
}

/** Set a text node only when it changed (no layout work for identical frames). */
export function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

/** Set an attribute only when it changed. */
export function setAttr(el, name, value) {
  const v = String(value);
  if (el.getAttribute(name) !== v) el.setAttribute(name, v);
}

/** Replace the class matching `prefix` + something by `prefix + value` (e.g. "zone-" + "warn"). */
export function setPrefixedClass(el, prefix, value) {
  const want = prefix + value;
  if (el.classList.contains(want)) return;
  for (const c of [...el.classList]) if (c.startsWith(prefix)) el.classList.remove(c);
  el.classList.add(want);
}
