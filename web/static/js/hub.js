// The hub's fleet page (docs/fleet.md): every robot as a card from /ws/fleet, one map, an e-stop per robot and a
// confirmed "stop all", one robot driven through the hub over /ws/fleet/{id} (commands relayed over Zenoh;
// heartbeats while the page drives, so the robot's own watchdog stops it when this page or the hub goes away), and
// a link to each robot's full dashboard through the hub (/fleet/{id}/).

import { apiFetch, apiGet, describeError, whoAmI } from "./api.js";
import { Backoff } from "./reconnect.js";

const PREVIEW_MS = 500;   // the hub's preview: at most 2 frames a second, only while the drive panel is open

const cards = new Map();
let driving = null;

async function post(path, body = {}, urgent = false) {
  const res = await apiFetch(path, { body, urgent });
  if (!res.ok) throw new Error(describeError(res.error));
  return res.data;
}

function text(el, value) { el.textContent = value == null ? "—" : String(value); }

function card(robot) {
  let el = cards.get(robot.id);
  if (!el) {
    el = document.createElement("article");
    el.className = "card";
    el.dataset.robot = robot.id;
    el.innerHTML = `<h3></h3><dl>
      <dt>state</dt><dd data-f="state"></dd><dt>cause</dt><dd data-f="cause"></dd>
      <dt>battery</dt><dd data-f="battery"></dd><dt>lease</dt><dd data-f="lease"></dd>
      <dt>link</dt><dd data-f="link"></dd><dt>last seen</dt><dd data-f="seen"></dd>
      <dt>alerts</dt><dd data-f="alerts"></dd></dl>
      <button class="estop" type="button" data-act="estop">E-stop</button>
      <button type="button" data-act="open">Drive</button>
      <a class="btn" data-act="dashboard">Dashboard</a>`;
    // the robot's full dashboard, served by the hub and relayed over Zenoh (server/hub/dashboard.py)
    el.querySelector("[data-act=dashboard]").href = `/fleet/${encodeURIComponent(robot.id)}/`;
    el.querySelector("[data-act=estop]").addEventListener("click", () =>
      post(`/api/fleet/${robot.id}/estop`, {reason: "e-stop from the fleet page"}, true).catch(showError));
    el.querySelector("[data-act=open]").addEventListener("click", () => openDrive(robot.id));
    document.getElementById("cards").append(el);
    cards.set(robot.id, el);
  }
  el.classList.toggle("offline", !robot.online);
  el.dataset.online = String(robot.online);
  el.dataset.state = robot.state || "";
  text(el.querySelector("h3"), `${robot.id}${robot.name ? " · " + robot.name : ""} ${robot.online ? "online" : "offline"}`);
  const f = (k) => el.querySelector(`[data-f=${k}]`);
  text(f("state"), robot.state);
  text(f("cause"), robot.cause && robot.cause.message);
  text(f("battery"), robot.battery == null ? null : `${robot.battery.toFixed(2)} V`);
  text(f("lease"), robot.lease);
  text(f("link"), robot.link && robot.link.age_s != null ? `${(robot.link.age_s * 1000).toFixed(0)} ms` : null);
  text(f("seen"), robot.last_seen_t ? new Date(robot.last_seen_t * 1000).toLocaleTimeString() : null);
  text(f("alerts"), (robot.alerts || []).join(", ") || "none");
  drawMap();
}

const robotsById = new Map();

function drawMap() {
  const svg = document.getElementById("map");
  svg.replaceChildren();
  for (const [id, r] of robotsById) {
    if (!r.position) continue;
    const c = document.createElementNS("http://www.w3.org/2000/svg", "circle");
    c.setAttribute("cx", r.position.x); c.setAttribute("cy", -r.position.y); c.setAttribute("r", 0.3);
    c.setAttribute("fill", r.online ? "#4caf50" : "#777");
    const t = document.createElementNS("http://www.w3.org/2000/svg", "title");
    t.textContent = id;
    c.append(t);
    svg.append(c);
  }
}

function update(robot) { robotsById.set(robot.id, robot); card(robot); }

// a hub that is down is retried with backoff (0.5 s doubling to 10 s, jittered), not by every page each second
const fleetRetry = new Backoff({ minMs: 500, maxMs: 10000 });

function connectFleet() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/fleet`);
  ws.onopen = () => { fleetRetry.reset(); text(document.getElementById("hub-link"), "live"); };
  ws.onmessage = (ev) => { const m = JSON.parse(ev.data); if (m.type === "robot") update(m.data); };
  ws.onclose = () => {
    const delay = fleetRetry.schedule(connectFleet);
    text(document.getElementById("hub-link"), `reconnecting in ${(delay / 1000).toFixed(1)} s…`);
  };
}

function showError(err) { text(document.getElementById("drive-error"), err.message || String(err)); }

function openDrive(id) {
  closeDrive();
  const panel = document.getElementById("drive");
  panel.hidden = false;
  text(document.getElementById("drive-robot"), id);
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/fleet/${id}`);
  ws.binaryType = "arraybuffer";
  let n = 0;
  const send = (m) => { if (ws.readyState === 1) ws.send(JSON.stringify({...m, id: ++n})); };
  const beat = setInterval(() => send({type: "heartbeat"}), 100);
  ws.onmessage = (ev) => {
    if (typeof ev.data !== "string") {
      const snap = JSON.parse(new TextDecoder().decode(ev.data));
      const v = snap.values || {};
      text(document.getElementById("drive-state"), `${snap.state} · ${(v.linear_m_s || 0).toFixed(2)} m/s`);
      document.getElementById("drive-state").dataset.state = snap.state;
      return;
    }
    const m = JSON.parse(ev.data);
    if (m.type === "error") showError(new Error(m.error.message));
  };
  let hold = null;
  const fwd = document.getElementById("forward");
  const go = () => { send({type: "speed", linear: 0.3, angular: 0}); };
  const down = () => { go(); hold = setInterval(go, 100); };
  const up = () => { if (hold) { clearInterval(hold); hold = null; send({type: "speed", linear: 0, angular: 0}); } };
  fwd.onpointerdown = down; fwd.onpointerup = up; fwd.onpointerleave = up;
  document.getElementById("take-lease").onclick = () => post(`/api/fleet/${id}/lease/take`).catch(showError);
  document.getElementById("start").onclick = () => send({type: "start"});
  document.getElementById("stop").onclick = () => send({type: "stop"});
  driving = {ws, beat, id, preview: previewLoop(id)};
}

/** The robot's camera as a JPEG every PREVIEW_MS while the panel is open (video is not relayed over Zenoh). */
function previewLoop(id) {
  const img = document.getElementById("drive-preview");
  const loop = {stopped: false, url: null};
  const tick = async () => {
    if (loop.stopped) return;
    const res = await apiGet(`/api/fleet/${encodeURIComponent(id)}/preview.jpg`, {as: "blob"});
    if (loop.stopped) return;
    if (res.ok) {
      if (loop.url) URL.revokeObjectURL(loop.url);
      loop.url = URL.createObjectURL(res.data);
      img.src = loop.url;
      img.hidden = false;
      img.dataset.frames = String(Number(img.dataset.frames || 0) + 1);
    } else {
      img.hidden = true;   // no camera (503 no_frame) or the robot went away: try again later
    }
    loop.timer = setTimeout(tick, res.ok ? PREVIEW_MS : 5 * PREVIEW_MS);
  };
  tick();
  return loop;
}

function closeDrive() {
  if (!driving) return;
  clearInterval(driving.beat);
  driving.preview.stopped = true;
  clearTimeout(driving.preview.timer);
  driving.ws.close();
  driving = null;
  document.getElementById("drive").hidden = true;
}

document.getElementById("close-drive").addEventListener("click", closeDrive);
document.getElementById("stop-all").addEventListener("click", () => {
  if (!confirm("E-stop every robot of the fleet?")) return;
  post("/api/fleet/stop_all", {confirm: true}, true).catch(showError);
});
whoAmI().then(connectFleet);
