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
//
// Subscription (issue 20 §5, docs/api.md): setSubscription({channels, fields, rate_hz, encoding}) asks the
// server for only those channels at that rate; it is sent at once and again after every hello (a reconnect
// starts from full snapshots). With "encoding": "delta" the server sends what changed since its last message
// and a keyframe now and then; this module rebuilds each full snapshot, so listeners see the same objects as
// before (a new object per message: a panel may keep the previous one).

import * as presence from "./presence.js";
import { apiGet, goToLogin, wsUrl } from "./api.js";
import { Backoff } from "./reconnect.js";

const CLOSE_SESSION_ENDED = 4401;

const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 8000;
const PING_PERIOD_MS = 1000;
const COMMAND_TIMEOUT_MS = 2000;
const OFFSET_SAMPLES = 30;          // min-RTT sample over the last 30 pings (30 s)
const SENT_LOG_SIZE = 4000;
const SOCKET_RATE_WITH_CHANNEL_HZ = 2;  // the socket's snapshots while the telemetry data channel delivers

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
    this._backoff = new Backoff({ minMs: BACKOFF_MIN_MS, maxMs: BACKOFF_MAX_MS });
    this.lastRxMs = 0;
    this.lastTelemetryMs = 0;
    this.rttMs = null;
    this.rttMinMs = null;
    this.clockOffsetMs = null;     // server − client, from the min-RTT ping
    this.monoOffsetMs = null;      // server monotonic − client, from the same ping (ages: an NTP step moves neither)
    this.offsetSamples = [];
    this.tcpLink = null;           // the last sync's "tcp": the robot's kernel's measure of this socket
    this.robot = null;
    this.latest = null;
    this.dropped = { last: 0, total: 0 };
    this.counts = { telemetry: 0, event: 0, error: 0 };
    this.rxBytes = 0;              // received on the socket (text as UTF-16 code units, ~bytes of its JSON)
    this._listeners = new Map();
    this._pending = new Map();
    this._posted = new Map();      // id -> type of fire-and-forget messages
    this._nextId = 1;
    this._timers = [];
    this._staleMs = 3000;
    this._stopped = false;
    this._sent = [];               // ring of {epoch, t, type, linear, angular} for tests and the bench
    this.commandChannel = null;    // setCommandChannel(): the WebRTC data channels
    this.mayDrive = true;          // false while another session holds the control lease (lease.js)
    this.lease = null;             // the last {"type": "lease"} data
    // issue 20: speed and heartbeats carry seq (strictly increasing) and sent_t (this page's monotonic clock, s);
    // the server syncs its clock to ours ({"type": "sync"}) and the runtime drops what is too old or out of order
    this._seq = 0;
    this.syncs = 0;                // sync requests answered (0: the server cannot convert our stamps yet)
    this.commandsDropped = { stale: 0, reordered: 0 };
    this._startSentMs = null;      // a start in flight: heartbeats flow from the moment it is sent
    this.subscription = null;      // what setSubscription() asked for (null: full snapshots)
    this._subscriptionKey = "null";
    this.subscribed = null;        // the server's ack of it on this connection ({channels, rate_hz, ...})
    this._deltaBase = null;        // the snapshot the next delta applies to
    this.deltas = { keyframes: 0, patches: 0, orphans: 0 };
    // the WebRTC "telemetry" data channel (video/datachannels.js): while it delivers, the socket's snapshots
    // drop to SOCKET_RATE_WITH_CHANNEL_HZ and the newest snapshot of either path (by mono_t) is shown
    this.telemetryChannel = null;
    this.telemetryVia = "websocket";   // where the last snapshot shown came from
    this._lastMono = null;
    this.older = 0;                    // snapshots that arrived after a newer one (the other path's): not shown
  }

  /** Ask for these channels/fields at this rate and encoding (null: back to full snapshots on the next connect). */
  setSubscription(sub) {
    const key = JSON.stringify(sub || null);
    if (key === this._subscriptionKey) return;   // the same again: nothing to send
    this._subscriptionKey = key;
    this.subscription = sub ? { ...sub } : null;
    if (this.connected) this._sendSubscription();
  }

  async _sendSubscription() {
    const sub = this.subscription;
    this.subscribed = null;
    if (!sub) return;
    if (this.telemetryChannel) this.telemetryChannel.subscribe(sub);
    const res = await this.command("subscribe", this._socketSubscription(sub));
    if (sub !== this.subscription) return;  // a newer one was asked for meanwhile
    if (res.ok) this.subscribed = res.result || sub;
    else console.warn("teleop: subscription refused (full snapshots go on):", res.error);
  }

  /** The socket's share of a subscription: all of it, or a trickle while the data channel carries telemetry. */
  _socketSubscription(sub) {
    if (!this.telemetryChannel || !this.telemetryChannel.open) return sub;
    return { ...sub, rate_hz: Math.min(sub.rate_hz || SOCKET_RATE_WITH_CHANNEL_HZ, SOCKET_RATE_WITH_CHANNEL_HZ) };
  }

  /** The WebRTC telemetry channel opened (or closed: null): subscribe it, and move the socket's rate. */
  setTelemetryChannel(channel) {
    if ((channel || null) === this.telemetryChannel) return;
    this.telemetryChannel = channel || null;
    if (!channel) this.telemetryVia = "websocket";
    if (this.connected) this._sendSubscription();
  }

  /** A snapshot (already decoded) from the data channel. */
  deliverSnapshot(snap) {
    return this._show(snap, "data channel");
  }

  /**
   * Show a snapshot, unless two paths deliver (the socket and the telemetry data channel) and a newer one, by its
   * mono_t (the robot machine's monotonic clock: it only grows, across runtime restarts too), was shown already.
   * One path alone shows everything in the order it comes (a replay seeking back goes back in time).
   */
  _show(snap, via) {
    const mono = snap && snap.mono_t;
    const twoPaths = this.telemetryChannel !== null && !(this.robot && this.robot.replay);
    if (twoPaths && Number.isFinite(mono) && Number.isFinite(this._lastMono) && mono <= this._lastMono) {
      this.older += 1;
      return false;
    }
    if (Number.isFinite(mono)) this._lastMono = mono;
    this.telemetryVia = via;
    this.counts.telemetry += 1;
    this.lastTelemetryMs = performance.now();
    this.latest = snap;
    this._emit("telemetry", snap);
    return true;
  }

  /** A telemetry message's snapshot: as sent, or rebuilt from a delta (null: a delta with nothing to apply to). */
  _snapshotOf(msg) {
    if (msg.encoding !== "delta") return msg.data;
    if (msg.key) {
      this.deltas.keyframes += 1;
      this._deltaBase = msg.data;
    } else if (this._deltaBase) {
      this.deltas.patches += 1;
      this._deltaBase = applyDelta(this._deltaBase, msg.data, msg.deleted);
    } else {
      this.deltas.orphans += 1;    // cannot happen on one socket (a keyframe comes first); never shown
      return null;
    }
    return this._deltaBase;
  }

  /** A start was sent and its answer has not come back (within the command timeout). */
  startPending() {
    return this._startSentMs !== null && performance.now() - this._startSentMs < COMMAND_TIMEOUT_MS;
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
    this._backoff.cancel();
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
      this.tcpLink = null;  // a new socket: the last one's figures are not this one's
    };
    ws.onmessage = (e) => {
      if (ws !== this.ws) return;
      this.lastRxMs = performance.now();
      this.rxBytes += typeof e.data === "string" ? e.data.length : e.data.byteLength || e.data.size || 0;
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
    // apiGet goes to the login page on 401 (status 0: the server is unreachable; keep retrying)
    const res = await apiGet("/api/auth/me");
    if (res.status === 401) this.stop();
  }

  get attempt() {
    return this._backoff.attempt;
  }

  get retryAt() {
    return this._backoff.retryAt;
  }

  _scheduleRetry() {
    this._setStatus("disconnected");
    this._backoff.schedule(() => this._connect());
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
      case "telemetry": {
        const snap = this._snapshotOf(msg);
        if (!snap) break;
        this._noteDropped(msg.dropped);
        this._show(snap, "websocket");
        break;
      }
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
      case "sync":
        this._onSync(msg);
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
        if (msg.type === "ack" && (msg.dropped === "stale" || msg.dropped === "reordered")) {
          this.commandsDropped[msg.dropped] += 1;
          this._emit("dropped", { reason: msg.dropped, command: msg.command });
        }
        if (p) {
          if (p.type === "start") this._startSentMs = null;
          this._pending.delete(msg.id);
          clearTimeout(p.timer);
          p.resolve(msg.type === "ack" ? { ok: true, state: msg.state, result: msg.subscription || msg.result }
            : { ok: false, error: msg.error });
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
    this._backoff.reset();
    this.epoch += 1;
    this.connected = true;
    this.lastTelemetryMs = performance.now();
    this.dropped = { last: 0, total: 0 };
    this._deltaBase = null;        // a new socket: its stream starts over (the server sends a keyframe first)
    this._lastMono = null;
    this.subscribed = null;
    this._startTimers();
    this._setStatus("connected");
    // A short burst of pings first, so the min-RTT clock offset is good within a second
    // (the page is busy building itself right after hello, which inflates early samples).
    for (const ms of [50, 250, 450, 650]) this._timers.push(setTimeout(() => this._ping(), ms));
    this._sendSubscription();      // every new socket starts from full snapshots: ask again
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

  _onSync(msg) {
    // The server's clock-sync exchange (server/gateway/link.py): our receive and send times on the clock our
    // sent_t uses. Silent while the operator is away, like pings (an answer keeps the login session alive).
    // Each carries the robot's kernel's measure of this socket (rtt_ms, rttvar_ms, retrans_pct, retrans): the
    // link panel's loss estimate, since TCP hides its retransmissions from the page.
    if (msg.tcp && typeof msg.tcp === "object") this.tcpLink = msg.tcp;
    const ws = this.ws;
    if (!presence.isActive() || !ws || ws.readyState !== WebSocket.OPEN || !Number.isFinite(msg.t1)) return;
    const t2 = performance.now() / 1000;
    ws.send(JSON.stringify({ type: "sync", t1: msg.t1, t2, t3: performance.now() / 1000 }));
    this.syncs += 1;
  }

  _onPong(msg) {
    const now = clientNowMs();
    const t = Number(msg.t);
    const serverT = Number(msg.server_t);
    const serverMono = Number(msg.server_mono);
    if (!Number.isFinite(t) || t > now || now - t > 60000) return;
    const rtt = now - t;
    this.rttMs = rtt;
    if (Number.isFinite(serverT)) {
      // NTP-style: the server read its clocks half an RTT after we sent; the
      // sample with the smallest RTT bounds the error best.
      const mid = t + rtt / 2;
      this.offsetSamples.push({ rtt, offset: serverT * 1000 - mid,
                                mono: Number.isFinite(serverMono) ? serverMono * 1000 - mid : null });
      if (this.offsetSamples.length > OFFSET_SAMPLES) this.offsetSamples.shift();
      let best = this.offsetSamples[0];
      for (const s of this.offsetSamples) if (s.rtt < best.rtt) best = s;
      this.clockOffsetMs = best.offset;
      this.monoOffsetMs = best.mono;
      this.rttMinMs = best.rtt;
    }
    this._emit("pong", { rttMs: rtt });
  }

  // ------------------------------------------------------------------ sending

  /**
   * A second path for commands: the WebRTC data channels (video/datachannels.js). While it is open,
   * speed and heartbeats go on it instead of the socket (no head-of-line blocking), and an e-stop
   * goes on it *and* on the socket. Its replies come back through deliver(). null detaches it.
   */
  setCommandChannel(channel) {
    this.commandChannel = channel || null;
  }

  /** A reply that arrived on the command channel: handled as if it came on the socket. */
  deliver(text) {
    this._onMessage(text);
  }

  /** Send a message now, or return false (never queued for later). */
  send(msg) {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN || !this.connected) return false;
    if (!this.mayDrive && (msg.type === "speed" || msg.type === "heartbeat")) return false;
    if (msg.type === "speed" || msg.type === "heartbeat") {
      msg.seq = ++this._seq;
      msg.sent_t = performance.now() / 1000;
    }
    const side = this.commandChannel;
    if (side && side.send(msg)) {
      if (msg.type === "estop") ws.send(JSON.stringify(msg));  // every path at once: the first latches
    } else {
      ws.send(JSON.stringify(msg));
    }
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
      if (type === "start") this._startSentMs = performance.now();
      const timer = setTimeout(() => {
        if (type === "start") this._startSentMs = null;
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

  /** Now on the server's monotonic clock (ms; null until a pong came), the clock of snapshots' ``mono_t``. */
  serverMonoNowMs() {
    return this.monoOffsetMs === null ? null : clientNowMs() + this.monoOffsetMs;
  }

  /** A snapshot's age on the server's clocks (ms; null: not synced yet): its monotonic stamp where it has one. */
  snapshotAgeMs(snap) {
    if (snap && Number.isFinite(snap.mono_t) && this.monoOffsetMs !== null) {
      return Math.max(0, this.serverMonoNowMs() - snap.mono_t * 1000);
    }
    if (snap && Number.isFinite(snap.t) && this.clockOffsetMs !== null) {
      return Math.max(0, this.serverNowMs() - snap.t * 1000);
    }
    return null;
  }
}

function isPlainObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** base with a delta's patch (objects patched key by key) and deleted paths applied, as a new object. */
export function applyDelta(base, patch, deleted) {
  const out = { ...base };
  for (const k of Object.keys(patch || {})) {
    const v = patch[k];
    const b = out[k];
    out[k] = isPlainObject(v) && isPlainObject(b) ? applyDelta(b, v) : v;
  }
  for (const path of deleted || []) {
    let node = out;
    for (let i = 0; i < path.length - 1 && node; i++) {
      const child = node[path[i]];
      node = isPlainObject(child) ? (node[path[i]] = { ...child }) : null;
    }
    if (node) delete node[path[path.length - 1]];
  }
  return out;
}

function defaultUrl() {
  return wsUrl("/ws/telemetry");
}

/** The page's one session. */
export const session = new Session(defaultUrl());

/** Server − client clock offset in ms (0 until the first pong); for the video module. */
export function clockOffsetMs() {
  return session.clockOffsetMs ?? 0;
}
