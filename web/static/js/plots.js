// Rolling plots (uPlot) of the channels with plot=true or widget "plot".
//
// Channels sharing a display unit share one chart. Every telemetry sample is kept
// (push, at the telemetry rate); the chart is redrawn at most once per animation
// frame, only when new samples arrived. The x scale follows the newest sample, so
// old points scroll out; arrays are trimmed in batches, not per sample.
//
// Which channels are plotted: the robot's choice (plot=true or widget "plot"), or the operator's from the
// "Choose channels" list (at most MAX_PLOTTED, kept in localStorage per robot profile, "Robot's default" goes
// back); the dashboard subscribes to what is plotted, so a newly chosen channel's values start to arrive.
//
// The y axis spans the channels' own range (ChannelSpec min/max, the union over the
// chart's channels) and widens only when a value leaves it: an autoscaled flat line
// would make noise look like motion, and uPlot's range for a flat zero is 0-100.

import uPlot from "../vendor/uplot-1.6.32/uPlot.esm.js";
import { displayOf, formatNumber, setText } from "./format.js";

const KEEP_S = 60;                  // longest selectable window
// Charts redraw at most ~15 Hz: a 30 s window scrolls about 2 px per redraw, and
// redrawing four canvases every frame was the dashboard's largest main-thread cost
// (bench/bench_dashboard.py).
const MIN_REDRAW_MS = 66;
const HEIGHT_PX = 150;
const MAX_PLOTTED = 16;             // more lines than this make the charts unreadable and the page slow
const PALETTE = ["#5aa9ff", "#3ecf6e", "#f3b619", "#ff7ac6", "#b18cff", "#4fd6d0", "#ff8a5b", "#c3e05a"];

function axis() {
  return {
    stroke: "#a3afbb",
    grid: { stroke: "#2a333d", width: 1 },
    ticks: { stroke: "#2e3843", width: 1 },
    font: "11px system-ui, sans-serif",
  };
}

/** The y range of a chart: the channels' [min, max] in display units, widened to the data. */
export function yRangeOf(items) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const it of items) {
    const a = Number(it.spec.min) * it.scale;
    const b = Number(it.spec.max) * it.scale;
    if (Number.isFinite(a) && Number.isFinite(b) && b > a) {
      lo = Math.min(lo, a);
      hi = Math.max(hi, b);
    }
  }
  return hi > lo ? [lo, hi] : null;
}

function clockLabel(t) {
  const d = new Date(t * 1000);
  const p = (n) => String(n).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function createPlots({ container, panel, windowSelect, onChannels = null }) {
  const pickList = panel.querySelector("#plot-pick-list");
  const pickNote = panel.querySelector("#plot-pick-note");
  const pickReset = panel.querySelector("#plot-pick-reset");
  let storageKey = null;            // where the operator's choice for this robot profile is kept
  let groups = [];
  let specs = [];                   // the robot's channels (build); plotted: those with plot/widget "plot", or chosen
  let chosen = null;                // setChannels(): the channels the user picked instead (null: the description's)
  let windowS = Number(windowSelect.value) || 30;
  let gap = false;
  let latestT = null;
  let lastDrawMs = -Infinity;

  windowSelect.addEventListener("change", () => {
    windowS = Number(windowSelect.value) || 30;
    for (const g of groups) g.dirty = true;
  });

  function destroy() {
    for (const g of groups) g.u.destroy();
    groups = [];
    container.replaceChildren();
  }

  /** The robot's channels; ``key``: its profile, under which the operator's choice is kept. */
  function build(channels, key = null) {
    specs = channels || [];
    storageKey = key ? `teleop.plots.${key}` : null;
    chosen = loadChoice();
    rebuild();
    fillPicker();
  }

  /** Plot these channels instead (names of the robot's channels; null: the description's choice); the
   * dashboard re-subscribes (onChannels), so a newly plotted channel's values start to arrive. */
  function setChannels(names) {
    chosen = names ? new Set(names) : null;
    rebuild();
    syncPicker();
    if (onChannels) onChannels(channelNames());
  }

  function loadChoice() {
    if (!storageKey) return null;
    try {
      const saved = JSON.parse(localStorage.getItem(storageKey) || "null");
      if (!Array.isArray(saved)) return null;
      const known = new Set(specs.map((s) => s.name));
      return new Set(saved.filter((n) => typeof n === "string" && known.has(n)).slice(0, MAX_PLOTTED));
    } catch {
      return null;                  // storage off or a bad value: the robot's choice
    }
  }

  function saveChoice() {
    if (!storageKey) return;
    try {
      if (chosen) localStorage.setItem(storageKey, JSON.stringify([...chosen]));
      else localStorage.removeItem(storageKey);
    } catch { /* storage off: the choice lasts as long as the page */ }
  }

  function plotted(spec) {
    return chosen ? chosen.has(spec.name) : Boolean(spec.plot || spec.widget === "plot");
  }

  function fillPicker() {
    if (!pickList) return;
    pickList.replaceChildren(...specs.map((spec) => {
      const li = document.createElement("li");
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = spec.name;
      box.checked = plotted(spec);
      box.addEventListener("change", () => pick(box));
      label.append(box, ` ${spec.label || spec.name}`);
      label.title = spec.name;
      li.append(label);
      return li;
    }));
    setText(pickNote, "");
  }

  function syncPicker() {
    if (!pickList) return;
    for (const box of pickList.querySelectorAll("input[type=checkbox]")) {
      box.checked = plotted(specs.find((s) => s.name === box.value) || {});
    }
  }

  function pick(box) {
    const names = [...pickList.querySelectorAll("input[type=checkbox]:checked")].map((b) => b.value);
    if (names.length > MAX_PLOTTED) {
      box.checked = false;
      setText(pickNote, `At most ${MAX_PLOTTED} channels: uncheck one first.`);
      return;
    }
    setText(pickNote, "");
    setChannels(names);
    saveChoice();
  }

  if (pickReset) {
    pickReset.addEventListener("click", () => {
      setChannels(null);
      saveChoice();
      setText(pickNote, "");
    });
  }

  function channelNames() {
    return groups.flatMap((g) => g.items.map((it) => it.spec.name));
  }

  function rebuild() {
    destroy();
    // read once: each read after a plot was added forced a layout of the whole page (~80 ms of a page load)
    const width = Math.max(200, container.clientWidth - 12);
    const byUnit = new Map();
    for (const spec of specs) {
      if (!plotted(spec)) continue;
      const d = displayOf(spec);
      if (!byUnit.has(d.unit)) byUnit.set(d.unit, []);
      byUnit.get(d.unit).push({ spec, d });
    }
    let colour = 0;
    for (const [unit, members] of byUnit) {
      const box = document.createElement("figure");
      box.className = "plot";
      box.style.margin = "0";
      const legend = document.createElement("figcaption");
      legend.className = "plot-legend";
      const series = [{}];
      const items = [];
      for (const m of members) {
        const stroke = PALETTE[colour++ % PALETTE.length];
        series.push({ label: m.spec.label || m.spec.name, stroke, width: 1.5, spanGaps: false, points: { show: false } });
        const item = document.createElement("span");
        item.className = "plot-series";
        item.dataset.channel = m.spec.name;
        const sw = document.createElement("i");
        sw.className = "plot-swatch";
        sw.style.background = stroke;
        const label = document.createElement("span");
        label.textContent = m.spec.label || m.spec.name;
        const value = document.createElement("b");
        value.className = "plot-value";
        value.textContent = "—";
        item.append(sw, label, " ", value, unit ? ` ${unit}` : "");
        legend.appendChild(item);
        items.push({ spec: m.spec, scale: m.d.scale, decimals: m.d.decimals, valueEl: value });
      }
      box.appendChild(legend);
      container.appendChild(box);
      const data = [[], ...members.map(() => [])];
      const specRange = yRangeOf(items);
      const y = specRange
        ? {
          auto: true,
          range: (u, dmin, dmax) => [
            Number.isFinite(dmin) ? Math.min(specRange[0], dmin) : specRange[0],
            Number.isFinite(dmax) ? Math.max(specRange[1], dmax) : specRange[1],
          ],
        }
        : { auto: true };               // no usable min/max: uPlot's own autoscale
      const u = new uPlot({
        width,
        height: HEIGHT_PX,
        legend: { show: false },
        cursor: { drag: { x: false, y: false } },
        scales: {
          x: { time: true, range: () => (latestT === null ? [0, 1] : [latestT - windowS, latestT]) },
          y,
        },
        axes: [{ ...axis(), values: (u, splits) => splits.map(clockLabel) }, { ...axis(), size: 48, label: unit || undefined, labelSize: 14 }],
        series,
      }, data, box);
      u.root.setAttribute("aria-label", `Plot of ${members.map((m) => m.spec.label || m.spec.name).join(", ")}`);
      u.root.setAttribute("role", "img");
      groups.push({ unit, items, data, u, dirty: true, box });
    }
    panel.hidden = specs.length === 0;  // with channels, the panel stays: the operator may choose some
  }

  /** Append one snapshot's samples (call for every telemetry message). */
  function push(snap) {
    const t = snap.t;
    if (!Number.isFinite(t)) return;
    if (latestT !== null && t <= latestT) return;   // duplicate or out of order
    const values = snap.values || {};
    for (const g of groups) {
      const xs = g.data[0];
      if (gap && xs.length) {
        // A null row breaks the line across a disconnection.
        xs.push((latestT + t) / 2);
        for (let i = 0; i < g.items.length; i++) g.data[i + 1].push(null);
      }
      xs.push(t);
      for (let i = 0; i < g.items.length; i++) {
        const v = values[g.items[i].spec.name];
        g.data[i + 1].push(typeof v === "number" && Number.isFinite(v) ? v * g.items[i].scale : null);
      }
      // Trim in batches: drop what is older than KEEP_S once it is 10 % over.
      const cut = t - KEEP_S;
      if (xs[0] < cut - KEEP_S * 0.1) {
        let n = 0;
        while (n < xs.length && xs[n] < cut) n++;
        for (const arr of g.data) arr.splice(0, n);
      }
      g.dirty = true;
    }
    gap = false;
    latestT = t;
  }

  function setState(snap) {
    if (panel.classList.contains("stale") !== (snap === null)) panel.classList.toggle("stale", snap === null);
    if (!snap) {
      gap = true;
      return;
    }
    const values = snap.values || {};
    const now = performance.now();
    const draw = now - lastDrawMs >= MIN_REDRAW_MS;
    if (draw) lastDrawMs = now;
    for (const g of groups) {
      for (const it of g.items) {
        const v = values[it.spec.name];
        setText(it.valueEl, formatNumber(typeof v === "number" ? v * it.scale : null, it.decimals));
      }
      if (draw && g.dirty) {
        g.dirty = false;
        g.u.setData(g.data);
      }
    }
  }

  function resize() {
    const width = Math.max(200, container.clientWidth - 12);
    for (const g of groups) if (g.u.width !== width) g.u.setSize({ width, height: HEIGHT_PX });
  }
  new ResizeObserver(resize).observe(container);

  /** Each chart's channels and its y scale as drawn (tests and the console read it). */
  function ranges() {
    return groups.map((g) => ({
      unit: g.unit,
      channels: g.items.map((it) => it.spec.name),
      min: g.u.scales.y.min,
      max: g.u.scales.y.max,
    }));
  }

  return { build, push, setState, ranges, setChannels, channels: channelNames, get count() { return groups.length; } };
}
