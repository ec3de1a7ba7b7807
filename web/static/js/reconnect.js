// The one reconnect helper: exponential backoff with jitter, for every socket the dashboard keeps open
// (session.js's telemetry socket, the video and overlay sockets of video.js, the WebRTC signalling, the hub's fleet socket).
//
//   const retry = new Backoff({ minMs: 250, maxMs: 8000 });
//   retry.schedule(connect);   // calls connect() after the next delay (min, 2·min, … max, ±jitter)
//   retry.reset();             // connected: the next failure starts again from minMs
//   retry.cancel();            // closing for good
//   retry.attempt, retry.retryAt (performance.now() of the next try)

export class Backoff {
  constructor({ minMs = 250, maxMs = 8000, jitter = 0.2 } = {}) {
    this.minMs = minMs;
    this.maxMs = maxMs;
    this.jitter = jitter;
    this.attempt = 0;
    this.retryAt = 0;
    this._timer = null;
  }

  /** The next delay in ms (and count the attempt). */
  next() {
    const base = Math.min(this.maxMs, this.minMs * 2 ** this.attempt);
    this.attempt += 1;
    return base * (1 - this.jitter + 2 * this.jitter * Math.random());
  }

  schedule(fn) {
    this.cancel();
    const delay = this.next();
    this.retryAt = performance.now() + delay;
    this._timer = setTimeout(() => { this._timer = null; fn(); }, delay);
    return delay;
  }

  get pending() {
    return this._timer !== null;
  }

  reset() {
    this.attempt = 0;
  }

  cancel() {
    clearTimeout(this._timer);
    this._timer = null;
  }
}
