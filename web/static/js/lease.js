// Who drives: the control-lease panel (take, request, release, hand over or deny; an
// admin's forced take asks for a second click), who I am, log out, and a warning when
// this session comes from outside the local network.
//
// Mount: <div id="lease-panel" data-panel-module="lease.js" data-panel-factory="createLease">
// (inside the Drive panel, under the joystick, so it stays with the controls at every width).
// The lease arrives as its own telemetry-socket message, {"type": "lease", "data": ...},
// when the socket opens and on every change (the session module emits "lease"), and in
// the answers of the lease routes. setState(snapshot | null) only says connected or not.
// While this page may not drive (someone else holds the lease), the session sends no
// speed or heartbeat: they would only be refused.

import { apiFetch, goToLogin, whoAmI } from "./api.js";

const CONFIRM_MS = 4000;

let me = null;          // GET /api/auth/me

function el(tag, attrs = {}, text = "") {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

function sinceText(epochS) {
  if (!Number.isFinite(epochS)) return "";
  const d = new Date(epochS * 1000);
  return `since ${d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}`;
}

export function createLease({ root, session }) {
  root.classList.add("lease-panel");
  root.setAttribute("role", "region");
  const h = el("h3", { id: "lease-h", class: "lease-title" }, "Control");
  const who = el("p", { class: "lease-who", "data-field": "who", role: "status", "aria-live": "polite" });
  const request = el("p", { class: "lease-request", "data-field": "request", role: "alert", hidden: "" });
  const buttons = el("div", { class: "buttons lease-buttons" });
  const mk = (id, label, cls = "btn") => {
    const b = el("button", { id, class: cls, type: "button" }, label);
    buttons.append(b);
    return b;
  };
  const btnTake = mk("lease-take", "Take control", "btn btn-start");
  const btnRequest = mk("lease-request", "Request control");
  const btnRelease = mk("lease-release", "Release");
  const btnHandover = mk("lease-handover", "Hand over", "btn btn-reset");
  const btnDeny = mk("lease-deny", "Deny");
  const btnForce = mk("lease-force", "Take over (admin)", "btn btn-stop");
  const error = el("p", { class: "field-error", "data-field": "error", role: "alert", hidden: "" });
  const account = el("p", { class: "lease-account" });
  const accountText = el("span", { "data-field": "account" });
  const btnLogout = el("button", { id: "lease-logout", class: "btn", type: "button" }, "Log out");
  account.append(accountText, " ", btnLogout);
  const external = el("p", { class: "banner banner-conn lease-external", "data-field": "external", role: "alert", hidden: "" });
  // the server's users file was deleted, emptied or made invalid: it keeps its users, and says so here
  const usersFile = el("p", { id: "users-file-banner", class: "banner banner-conn", "data-field": "users-file", role: "alert", hidden: "" });
  root.setAttribute("aria-labelledby", "lease-h");
  root.replaceChildren(h, usersFile, external, who, request, buttons, error, account);

  let lease = null;
  let connected = false;
  let forceArmedUntil = 0;

  function show(b, on) {
    if (b.hidden === on) b.hidden = !on;
  }

  function showError(text) {
    error.textContent = text || "";
    error.hidden = !text;
  }

  function render() {
    const mine = me && me.session;
    const local = me && me.local_mode;
    const role = me ? me.role : "viewer";
    const canDrive = role === "operator" || role === "admin";
    root.classList.toggle("stale", !connected);
    accountText.textContent = !me ? "Not signed in." : local ? "" : `Signed in as ${me.user} (${me.role}).`;
    show(btnLogout, Boolean(me && !local));
    account.hidden = Boolean(local);
    // the lease message is the newer word (sent on every change); GET /api/auth/me before the first one
    const problem = (lease && lease.users_file_problem !== undefined ? lease.users_file_problem
      : me && me.users_file_problem) || "";
    usersFile.hidden = !problem;
    usersFile.textContent = problem ? `Users file: ${problem}` : "";
    external.hidden = !(me && me.external);
    external.textContent = me && me.external
      ? `This session comes from outside the local network (${me.remote}). Check that this is you.` : "";
    // speed and heartbeats from this page only while it may drive (unknown: let the server decide)
    if (session && session.setMayDrive) {
      session.setMayDrive(!me || local || Boolean(lease && lease.holder && lease.holder.session === mine));
    }
    if (local) {
      who.textContent = "Local mode: this machine drives without login (no users configured).";
      request.hidden = true;
      for (const b of [btnTake, btnRequest, btnRelease, btnHandover, btnDeny, btnForce]) show(b, false);
      return;
    }
    const holder = lease && lease.holder;
    const pending = lease && lease.request;
    const iHold = Boolean(holder && holder.session === mine);
    const iAsked = Boolean(pending && pending.session === mine);
    root.classList.toggle("lease-mine", iHold);
    root.classList.toggle("lease-other", Boolean(holder && !iHold));
    who.textContent = !lease ? "Control: unknown" : !holder ? "Nobody drives." :
      iHold ? `You drive (${sinceText(holder.since)}).` : `${holder.user} drives (${sinceText(holder.since)}).`;
    if (pending && holder) {
      const left = winsIn(pending);
      const wins = left !== null ? ` — passes in ${Math.ceil(left)} s unless answered` : "";
      request.textContent = iHold ? `${pending.user} asks for control${wins}.` :
        iAsked ? `You asked ${holder.user} for control${wins}.` : `${pending.user} asked ${holder.user} for control.`;
      request.hidden = false;
    } else {
      request.hidden = true;
    }
    const on = connected && Boolean(lease);
    show(btnTake, canDrive && !holder);
    show(btnRequest, canDrive && Boolean(holder) && !iHold && !iAsked && !pending);
    show(btnRelease, canDrive && (iHold || iAsked));
    btnRelease.textContent = iAsked ? "Withdraw request" : "Release";
    show(btnHandover, iHold && Boolean(pending));
    show(btnDeny, iHold && Boolean(pending));
    show(btnForce, role === "admin" && Boolean(holder) && !iHold);
    if (performance.now() > forceArmedUntil) btnForce.textContent = "Take over (admin)";
    for (const b of [btnTake, btnRequest, btnRelease, btnHandover, btnDeny, btnForce]) b.disabled = !on;
  }

  async function act(path, body) {
    showError("");
    const res = await apiFetch(path, { body });
    if (res.ok) {
      setLease(res.data);
    } else {
      showError(`${res.error.message || res.error.code}`);
      setLease(res.error.details);
    }
    render();
    return res;
  }

  btnTake.addEventListener("click", () => act("/api/lease/take"));
  btnRequest.addEventListener("click", () => act("/api/lease/request"));
  btnRelease.addEventListener("click", () => act("/api/lease/release"));
  btnHandover.addEventListener("click", () => act("/api/lease/handover", { accept: true }));
  btnDeny.addEventListener("click", () => act("/api/lease/handover", { accept: false }));
  btnForce.addEventListener("click", () => {
    // A takeover stops whoever drives now: ask for a second click.
    const now = performance.now();
    if (now > forceArmedUntil) {
      forceArmedUntil = now + CONFIRM_MS;
      const holder = lease && lease.holder ? lease.holder.user : "the holder";
      btnForce.textContent = `Confirm: take control from ${holder}`;
      setTimeout(render, CONFIRM_MS + 50);
      return;
    }
    forceArmedUntil = 0;
    act("/api/lease/take", { force: true });
  });
  btnLogout.addEventListener("click", async () => {
    await apiFetch("/api/auth/logout");
    goToLogin();
  });

  // The request's countdown: the server's wins_in_s, counted down here between messages.
  let leaseAt = 0;
  function winsIn(pending) {
    if (!pending || !Number.isFinite(pending.wins_in_s)) return null;
    return Math.max(0, pending.wins_in_s - (performance.now() - leaseAt) / 1000);
  }
  function setLease(data) {
    if (!data || data.holder === undefined) return;
    lease = data;
    leaseAt = performance.now();
    renderIfChanged();
  }
  // Telemetry comes many times a second: render only when something shown changes.
  let renderedKey = "";
  function renderIfChanged() {
    const pending = lease && lease.request;
    const wins = winsIn(pending);
    const key = JSON.stringify([connected, me && me.session, lease && lease.version, lease && lease.users_file_problem,
      wins === null ? null : Math.ceil(wins)]);
    if (key === renderedKey) return;
    renderedKey = key;
    render();
  }

  function setState(snap) {
    const was = connected;
    connected = snap !== null;
    if (connected && !was) whoAmI(true).then((m) => { me = m; renderIfChanged(); });
    renderIfChanged();
  }

  if (session) {
    session.on("lease", setLease);
    setLease(session.lease);    // the message may have come before this module loaded
  }
  setInterval(() => { if (lease && lease.request) renderIfChanged(); }, 500);
  whoAmI().then((m) => { me = m; render(); });
  render();
  return { setState, refresh: () => whoAmI(true).then((m) => { me = m; render(); }) };
}
