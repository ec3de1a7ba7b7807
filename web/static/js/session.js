// The one module that owns the telemetry websocket (PiKVM's session.js pattern).
//
// It connects, dispatches the server's {type, ...} envelopes to listeners, answers
// commands by id, pings every second (RTT and the server−client clock offset) and
// reconnects with exponential backoff. Panels never touch the socket: they get
// "hello", "telemetry", "event", "error" and "disconnect" notifications.
//
// It never queues or replays anything: a message sent while disconnected is
// dropped and reported as failed, so nothing stale reaches the robot later.
//
// Login (docs/security.md): the server closes the socket with 4401 when the session
// ends, and refuses the upgrade once it has (after a gateway restart too); either way
// the page goes to /login. The lease comes as {"type": "lease", "data"} ("lease"
// listeners); while someone else holds it, speed and heartbeats are not sent.

import * as presence from "./presence.js";
import { goToLogin } from "./api.js";

const CLOSE_SESSION_ENDED = 4401;

const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 8000;
const PING_PERIOD_MS = 1000;
const COMMAND_TIMEOUT_MS = 2000;
const OFFSET_SAMPLES = 30;          // min-RTT sample over the last 30 pings (30 s)
const SENT_LOG_SIZE = 4000;

/** Client wall clock in ms with sub-ms resolution. */
export function clientNowMs() {
  return performance.timeOrigin + performance.now();
}

export class Session {
  constructor(url) {
    this.url = url;
    this.ws = null;
    /** "connecting" | "connected" | "disconnected" | "closed" */
    this.status = "connecting";
    this.connected = false;        // true from "hello" to close
    this.epoch = 0;                // +1 on every hello (tests read it)
    this.attempt = 0;
    this.retryAt = 0;
    this.lastRxMs = 0;
    this.lastTelemetryMs = 0;
    this.rttMs = null;
    this.rttMinMs = null;
    this.clockOffsetMs = null;     // server − client, from the min-RTT ping
    this.offsetSamples = [];
    this.robot = null;
    this.latest = null;
    this.dropped = { last: 0, total: 0 };
    this.counts = { telemetry: 0, event: 0, error: 0 };
    this._listeners = new Map();
    this._pending = new Map();
    this._posted = new Map();      // id -> type of fire-and-forget messages
    this._nextId = 1;
    this._timers = [];
    this._retryTimer = null;
    this._staleMs = 3000;
    this._stopped = false;
    this._sent = [];               // ring of {epoch, t, type, linear, angular} for tests and the bench
    this.mayDrive = true;          // false while another session holds the control lease (lease.js)
    this.lease = null;             // the last {"type": "lease"} data
  }

  /** Whether this page may send speed and heartbeats (false: they would be refused, so they stay home). */
  setMayDrive(v) {
    this.mayDrive = Boolean(v);
  }

  on(type, fn) {
    if (!this._listeners.has(type)) this._listeners.set(type, new Set());
    this._listeners.get(type).add(fn);
    return () => this._listeners.get(type).delete(fn);
  }

  _emit(type, payload) {
    const fns = this._listeners.get(type);
    if (!fns) return;
    for (const fn of fns) {
      try {
        fn(payload);
      } catch (err) {
        // One broken panel must not stop the others (or the e-stop path).
        console.warn(`teleop: ${type} listener failed`, err);
      }
    }
  }

  // ------------------------------------------------------------------ lifecycle

  start() {
    this._stopped = false;
    this._connect();
  }

  /** Close for good (page going away); start() opens again (back/forward cache). */
  stop() {
    this._stopped = true;
    clearTimeout(this._retryTimer);
    if (this.ws) {
      const ws = this.ws;
      this._closed(ws, "page closed");
      try { ws.close(1000, "page closed"); } catch { /* already closing */ }
    }
    this._setStatus("closed");
  }

  _connect() {
    if (this.ws || this._stopped) return;
    this._setStatus("connecting");
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (err) {
      this._scheduleRetry();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      this.lastRxMs = performance.now();
    };
    ws.onmessage = (e) => {
      if (ws !== this.ws) return;
      this.lastRxMs = performance.now();
      this._onMessage(e.data);
    };
    ws.onclose = (e) => {
      if (e.code === CLOSE_SESSION_ENDED) {
        this._stopped = true;     // no reconnect: the session is over
        goToLogin();
      }
      this._closed(ws, "socket closed");
    };
    ws.onerror = () => { /* a close event follows */ };
  }

  _closed(ws, why) {
    if (ws !== this.ws) return;
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    this.ws = null;
    const wasConnected = this.connected;
    this.connected = false;
    for (const t of this._timers) clearInterval(t); // clears timeouts too (one id pool)
    this._timers = [];
    for (const [, p] of this._pending) {
      clearTimeout(p.timer);
      p.resolve({ ok: false, error: { code: "disconnected", message: "connection lost before the reply" } });
    }
    this._pending.clear();
    this._posted.clear();
    this._emit("disconnect", { why, wasConnected });
    if (this._stopped) return;
    if (!wasConnected) this._checkLogin();
    this._scheduleRetry();
  }

  /** A refused upgrade looks like any failed connect: ask whether the session is still good. */
  async _checkLogin() {
    try {
      const r = await fetch("/api/auth/me", { credentials: "same-origin", cache: "no-store" });
      if (r.status === 401) {
        this.stop();
        goToLogin();
      }
    } catch { /* the server is unreachable: keep retrying */ }
  }

  _scheduleRetry() {
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.attempt);
    const delay = base * (0.8 + 0.4 * Math.random());
    this.attempt += 1;
    this.retryAt = performance.now() + delay;
    this._setStatus("disconnected");
    clearTimeout(this._retryTimer);
    this._retryTimer = setTimeout(() => this._connect(), delay);
  }

  _setStatus(s) {
    if (this.status === s) return;
    this.status = s;
    this._emit("status", s);
  }

  _startTimers() {
    this._timers.push(setInterval(() => this._ping(), PING_PERIOD_MS));
    // Half-open sockets (server frozen, cable pulled) never fire "close": give up on silence.
    this._timers.push(setInterval(() => {
      if (this.ws && performance.now() - this.lastRxMs > this._staleMs) {
        const ws = this.ws;
        this._closed(ws, "no data from the server");
        try { ws.close(4000, "no data"); } catch { /* ignore */ }
      }
    }, 250));
  }

  // ------------------------------------------------------------------ receiving

  _onMessage(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      console.warn("teleop: non-JSON message from the server");
      return;
    }
    switch (msg.type) {
      case "telemetry":
        this.counts.telemetry += 1;
        this.lastTelemetryMs = performance.now();
        this.latest = msg.data;
        this._noteDropped(msg.dropped);
        this._emit("telemetry", msg.data);
        break;
      case "hello":
        this._onHello(msg);
        break;
      case "event":
        this.counts.event += 1;
        this._emit("event", msg.data);
        break;
      case "pong":
        this._onPong(msg);
        break;
      case "lease":
        this.lease = msg.data;   // kept: a panel that loads later starts from it
        this._emit("lease", msg.data);
        break;
      case "ack":
      case "error": {
        const p = this._pending.get(msg.id);
        const posted = this._posted.get(msg.id);
        if (posted) this._posted.delete(msg.id);
        if (p) {
          this._pending.delete(msg.id);
          clearTimeout(p.timer);
          p.resolve(msg.type === "ack" ? { ok: true, state: msg.state } : { ok: false, error: msg.error });
        }
        if (msg.type === "error") {
          this.counts.error += 1;
          this._emit("error", { id: msg.id, command: p ? p.type : posted || null, error: msg.error || {} });
        }
        break;
      }
      default:
        break;
    }
  }

  _onHello(msg) {
    this.robot = msg.robot || this.robot;
    this.latest = msg.state || null;
    const rate = this.robot && this.robot.telemetry_rate_hz;
    this._staleMs = Math.max(3000, rate > 0 ? 5000 / rate : 3000);
    this.attempt = 0;
    this.epoch += 1;
    this.connected = true;
    this.lastTelemetryMs = performance.now();
    this.dropped = { last: 0, total: 0 };
    this._startTimers();
    this._setStatus("connected");
    // A short burst of pings first, so the min-RTT clock offset is good within a second
    // (the page is busy building itself right after hello, which inflates early samples).
    for (const ms of [50, 250, 450, 650]) this._timers.push(setTimeout(() => this._ping(), ms));
    this._emit("hello", { robot: this.robot, state: this.latest, epoch: this.epoch });
  }

  _noteDropped(d) {
    if (!Number.isFinite(d)) return;
    // The server counts the snapshots this client missed since it connected.
    this.dropped.total = Math.max(this.dropped.total, d);
    this.dropped.last = d;
  }

  _ping() {
    // Silent while the operator is away: nothing at all goes out (see presence.js).
    if (!this.connected || !presence.isActive()) return;
    this.send({ type: "ping", t: clientNowMs() });
  }

  _onPong(msg) {
    const now = clientNowMs();
    const t = Number(msg.t);
    const serverT = Number(msg.server_t);
    if (!Number.isFinite(t) || t > now || now - t > 60000) return;
    const rtt = now - t;
    this.rttMs = rtt;
    if (Number.isFinite(serverT)) {
      // NTP-style: the server read its clock half an RTT after we sent; the
      // sample with the smallest RTT bounds the error best.
      this.offsetSamples.push({ rtt, offset: serverT * 1000 - (t + rtt / 2) });
      if (this.offsetSamples.length > OFFSET_SAMPLES) this.offsetSamples.shift();
      let best = this.offsetSamples[0];
      for (const s of this.offsetSamples) if (s.rtt < best.rtt) best = s;
      this.clockOffsetMs = best.offset;
      this.rttMinMs = best.rtt;
    }
    this._emit("pong", { rttMs: rtt });
  }

  // ------------------------------------------------------------------ sending

  /** Send a message now, or return false (never queued for later). */
  send(msg) {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN || !this.connected) return false;
    if (!this.mayDrive && (msg.type === "speed" || msg.type === "heartbeat")) return false;
    ws.send(JSON.stringify(msg));
    this._sent.push({ epoch: this.epoch, t: clientNowMs(), type: msg.type, linear: msg.linear, angular: msg.angular });
    if (this._sent.length > SENT_LOG_SIZE) this._sent.splice(0, this._sent.length - SENT_LOG_SIZE);
    return true;
  }

  /**
   * Send a command and wait for its ack or error.
   * Resolves {ok: true, state} or {ok: false, error: {code, message}}; never rejects.
   */
  command(type, fields = {}, timeoutMs = COMMAND_TIMEOUT_MS) {
    const id = this._nextId++;
    return new Promise((resolve) => {
      if (!this.send({ type, id, ...fields })) {
        resolve({ ok: false, error: { code: "disconnected", message: "not connected to the robot" } });
        return;
      }
      const timer = setTimeout(() => {
        this._pending.delete(id);
        resolve({ ok: false, error: { code: "timeout", message: `no reply to ${type} within ${timeoutMs} ms` } });
      }, timeoutMs);
      this._pending.set(id, { resolve, timer, type });
    });
  }

  /** Fire-and-forget command (speed, heartbeat): replies are not awaited, errors still reported. */
  post(type, fields = {}) {
    const id = this._nextId++;
    const ok = this.send({ type, id, ...fields });
    if (ok) {
      // Remember the type so an error reply can name the command; bounded, since the
      // server does not ack every fire-and-forget message (heartbeats).
      this._posted.set(id, type);
      if (this._posted.size > 256) this._posted.delete(this._posted.keys().next().value);
    }
    return ok;
  }

  /** Messages sent since the given epoch (tests: "nothing stale was replayed"). */
  sentSince(epoch) {
    return this._sent.filter((m) => m.epoch >= epoch);
  }

  /** Server time estimate in ms (client clock + offset). */
  serverNowMs() {
    return clientNowMs() + (this.clockOffsetMs ?? 0);
  }
}

function defaultUrl() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  return `${proto}//${location.host}/ws/telemetry`;
}

/** The page's one session. */
export const session = new Session(defaultUrl());

/** Server − client clock offset in ms (0 until the first pong); for the video module. */
export function clockOffsetMs() {
  return session.clockOffsetMs ?? 0;
}
