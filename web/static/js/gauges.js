// Gauges built from the robot description (GET /api/robot "channels"), one per channel.
//
// Widgets: dial (SVG needle), digital (value + unit), bar, lamp (digital lines).
// Channels whose widget is "plot" live in the plots panel only. Adding a channel to
// the config adds its widget: nothing here knows channel names.
// Each frame only changes SVG attributes, text and classes: the DOM is built once.
// A channel the snapshot lists in `stale` (a safety-rule channel with no fresh sample)
// is greyed and tagged "stale": its number is the last one heard, not the present.

import {
  displayOf, formatNumber, fraction, setAttr, setPrefixedClass, setText, zoneBands, zoneOf,
} from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const DIAL = { cx: 60, cy: 58, r: 44, sweep: 270 };

function svg(tag, attrs = {}, parent = null) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

function html(tag, cls, parent = null, text = null) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (text !== null) el.textContent = text;
  if (parent) parent.appendChild(el);
  return el;
}

function dialAngle(f) {
  return -DIAL.sweep / 2 + DIAL.sweep * f; // degrees from straight up, clockwise
}

function dialPoint(angleDeg, r = DIAL.r) {
  const a = (angleDeg * Math.PI) / 180;
  return [DIAL.cx + r * Math.sin(a), DIAL.cy - r * Math.cos(a)];
}

function arcPath(f0, f1) {
  const a0 = dialAngle(f0);
  const a1 = dialAngle(f1);
  const [x0, y0] = dialPoint(a0);
  const [x1, y1] = dialPoint(a1);
  const large = a1 - a0 > 180 ? 1 : 0;
  return `M ${x0.toFixed(2)} ${y0.toFixed(2)} A ${DIAL.r} ${DIAL.r} 0 ${large} 1 ${x1.toFixed(2)} ${y1.toFixed(2)}`;
}

/** Common frame of every gauge card; returns {card, valueEl}. */
function card(spec, kind, parent) {
  const d = displayOf(spec);
  const el = html("div", `gauge gauge-${kind} zone-na`, parent);
  el.dataset.channel = spec.name;
  el.setAttribute("role", "group");
  el.setAttribute("aria-label", `${spec.label || spec.name}${d.unit ? ` (${d.unit})` : ""}`);
  html("div", "gauge-label", el, spec.label || spec.name).title = spec.name;
  html("span", "gauge-stale-tag", el, "stale").title = "no fresh sample: this value is old";
  return { el, d };
}

function valueLine(parent, unit) {
  const line = html("div", "gauge-value", parent);
  const v = html("span", "v", line, "—");
  if (unit) html("span", "gauge-unit", line, unit);
  return v;
}

function buildDial(spec, parent) {
  const { el, d } = card(spec, "dial", parent);
  const s = svg("svg", { viewBox: "0 0 120 100", "aria-hidden": "true", focusable: "false" }, el);
  svg("path", { class: "dial-track", d: arcPath(0, 1) }, s);
  for (const [lo, hi, level] of zoneBands(spec)) {
    svg("path", { class: `zone-band ${level}`, d: arcPath(fraction(lo, spec.min, spec.max), fraction(hi, spec.min, spec.max)) }, s);
  }
  const [lx, ly] = dialPoint(dialAngle(0), DIAL.r + 2);
  const [rx, ry] = dialPoint(dialAngle(1), DIAL.r + 2);
  svg("text", { class: "dial-text", x: lx.toFixed(1), y: (ly + 9).toFixed(1), "text-anchor": "middle" }, s)
    .textContent = formatNumber(spec.min * d.scale, Math.min(d.decimals, 1));
  svg("text", { class: "dial-text", x: rx.toFixed(1), y: (ry + 9).toFixed(1), "text-anchor": "middle" }, s)
    .textContent = formatNumber(spec.max * d.scale, Math.min(d.decimals, 1));
  const needle = svg("g", { transform: `rotate(${dialAngle(0)} ${DIAL.cx} ${DIAL.cy})` }, s);
  svg("line", { class: "dial-needle", x1: DIAL.cx, y1: DIAL.cy + 6, x2: DIAL.cx, y2: DIAL.cy - DIAL.r + 6 }, needle);
  svg("circle", { class: "dial-hub", cx: DIAL.cx, cy: DIAL.cy, r: 4 }, s);
  const v = valueLine(el, d.unit);
  return {
    el,
    update(value) {
      const f = fraction(value, spec.min, spec.max);
      setAttr(needle, "transform", `rotate(${dialAngle(f).toFixed(1)} ${DIAL.cx} ${DIAL.cy})`);
      setText(v, formatNumber(value == null ? null : value * d.scale, d.decimals));
    },
  };
}

function buildBar(spec, parent) {
  const { el, d } = card(spec, "bar", parent);
  const s = svg("svg", { viewBox: "0 0 100 18", preserveAspectRatio: "none", "aria-hidden": "true", focusable: "false" }, el);
  svg("rect", { class: "bar-track", x: 0, y: 2, width: 100, height: 10, rx: 2 }, s);
  for (const [lo, hi, level] of zoneBands(spec)) {
    const f0 = fraction(lo, spec.min, spec.max);
    const f1 = fraction(hi, spec.min, spec.max);
    svg("rect", { class: `bar-zone ${level}`, x: (f0 * 100).toFixed(2), y: 14, width: ((f1 - f0) * 100).toFixed(2), height: 4 }, s);
  }
  // Bars grow from zero when the range spans it (speeds), else from the minimum.
  const origin = spec.min < 0 && spec.max > 0 ? fraction(0, spec.min, spec.max) : 0;
  const fill = svg("rect", { class: "bar-fill", x: (origin * 100).toFixed(2), y: 2, width: 0, height: 10, rx: 2 }, s);
  if (origin > 0) svg("line", { class: "bar-zero", x1: origin * 100, y1: 0, x2: origin * 100, y2: 14 }, s);
  const v = valueLine(el, d.unit);
  return {
    el,
    update(value) {
      const f = value == null ? origin : fraction(value, spec.min, spec.max);
      const x0 = Math.min(f, origin) * 100;
      setAttr(fill, "x", x0.toFixed(2));
      setAttr(fill, "width", (Math.abs(f - origin) * 100).toFixed(2));
      setText(v, formatNumber(value == null ? null : value * d.scale, d.decimals));
    },
  };
}

function buildLamp(spec, parent) {
  const { el } = card(spec, "lamp", parent);
  const row = html("div", "lamp-row", el);
  const s = svg("svg", { viewBox: "0 0 24 24", width: 28, height: 28, "aria-hidden": "true", focusable: "false" }, row);
  const lamp = svg("circle", { class: "lamp", cx: 12, cy: 12, r: 10 }, s);
  const line = html("div", "gauge-value", row);
  const v = html("span", "v", line, "—");
  return {
    el,
    update(value) {
      const on = value != null && Number.isFinite(value) && value >= 0.5;
      if (lamp.classList.contains("on") !== on) lamp.classList.toggle("on", on);
      setText(v, value == null || !Number.isFinite(value) ? "—" : on ? "ON" : "OFF");
    },
  };
}

function buildDigital(spec, parent) {
  const { el, d } = card(spec, "digital", parent);
  const v = valueLine(el, d.unit);
  return {
    el,
    update(value) {
      setText(v, formatNumber(value == null ? null : value * d.scale, d.decimals));
    },
  };
}

const BUILDERS = { dial: buildDial, bar: buildBar, lamp: buildLamp, digital: buildDigital };

/** Build the gauges for `channels` into `container`; returns a panel with setState(snapshot | null). */
export function createGauges({ container, panel }) {
  let widgets = [];

  function build(channels) {
    container.replaceChildren();
    widgets = [];
    for (const spec of channels || []) {
      let kind = spec.widget;
      if (kind === "plot") continue;              // plotted only (plots.js)
      if (spec.kind === "digital" && !BUILDERS[kind]) kind = "lamp";
      const builder = BUILDERS[kind] || buildDigital;
      const w = builder(spec, container);
      widgets.push({ spec, el: w.el, update: w.update, zone: "na", stale: false });
    }
  }

  function setState(snap) {
    if (panel.classList.contains("stale") !== (snap === null)) panel.classList.toggle("stale", snap === null);
    if (!snap) return;                             // keep the last values, greyed out
    const values = snap.values || {};
    const stale = Array.isArray(snap.stale) ? snap.stale : [];
    for (const w of widgets) {
      const isStale = stale.includes(w.spec.name);
      if (isStale !== w.stale) {
        w.stale = isStale;
        w.el.classList.toggle("sensor-stale", isStale);
      }
      const raw = values[w.spec.name];
      const value = typeof raw === "number" && Number.isFinite(raw) ? raw : null;
      w.update(value);
      const zone = zoneOf(w.spec, value);
      if (zone !== w.zone) {
        w.zone = zone;
        setPrefixedClass(w.el, "zone-", zone);
      }
    }
  }

  /** The channels the gauges show (the dashboard subscribes to them: session.setSubscription). */
  function channels() {
    return widgets.map((w) => w.spec.name);
  }

  return { build, setState, channels, get count() { return widgets.length; } };
}
