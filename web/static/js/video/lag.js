// This page's own lateness, for the server's rate control (server/gateway/video/ratecontrol.py, item 4):
// a starved browser (its threads running late on a loaded machine) delays arrivals, decodes and acks just as
// a queue in the path does, so it says how late it runs and the server takes that out of the round trip.
// The lag is how late a 50 ms timer fires; lagMs() is the worst of the last second.

const TICK_MS = 50;
const WINDOW_MS = 1000;
const samples = [];
let last = performance.now();
let timer = null;

function tick() {
  const now = performance.now();
  samples.push({ t: now, lag: Math.max(0, now - last - TICK_MS) });
  last = now;
  while (samples.length && now - samples[0].t > WINDOW_MS) samples.shift();
}

/** The event loop's worst lag over the last second, ms (started on first use). */
export function lagMs() {
  if (timer === null) {
    last = performance.now();
    timer = setInterval(tick, TICK_MS);
  }
  let worst = 0;
  for (const s of samples) if (s.lag > worst) worst = s.lag;
  return Math.round(worst);
}
