// Who drives: the control-lease panel (take, request, release, hand over or deny; an
// admin's forced take asks for a second click), who I am, log out, and a warning when
// this session comes from outside the local network.
//
// Mount: <section class="panel" id="lease-panel" data-panel-module="lease.js"
//          data-panel-factory="createLease"></section>
// setState(snapshot | null) like every panel: the lease comes from snapshot.lease when
// the telemetry carries it, else from GET /api/lease (polled while connected).
//
// apiFetch() is the one way this page sends a state-changing request: JSON body, the
// session's CSRF token in X-CSRF-Token (the server refuses cookie requests without it),
// same-origin credentials; it resolves {ok, status, data | error} and never throws.

const CSRF_HEADER = "X-CSRF-Token";
const POLL_MS = 2000;
const CONFIRM_MS = 4000;

let me = null;          // GET /api/auth/me
let mePromise = null;

/** Who am I (cached; refresh=true asks again). Resolves null when not logged in. */
export function whoAmI(refresh = false) {
  if (!mePromise || refresh) {
    mePromise = fetch("/api/auth/me", { credentials: "same-origin", cache: "no-store" })
      .then((r) => (r.ok ? r.json() : null))
      .catch(() => null)
      .then((m) => { me = m; return m; });
  }
  return mePromise;
}

/** The CSRF token: from <meta name="csrf-token"> when the page has one, else from /api/auth/me. */
export async function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (meta && meta.content) return meta.content;
  const m = me || (await whoAmI());
  return (m && m.csrf_token) || "";
}

/** POST/PUT/DELETE with a JSON body and the CSRF token. Resolves {ok, status, data, error}. */
export async function apiFetch(path, { method = "POST", body = undefined } = {}) {
  const headers = { "Content-Type": "application/json" };
  const token = await csrfToken();
  if (token) headers[CSRF_HEADER] = token;
  try {
    const r = await fetch(path, {
      method,
      headers,
      body: body === undefined ? "{}" : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
    const data = await r.json().catch(() => null);
    if (r.ok) return { ok: true, status: r.status, data };
    if (r.status === 401 && data && data.error && data.error.code === "unauthenticated") {
      goToLogin();
    }
    return { ok: false, status: r.status, error: (data && data.error) || { code: "http_" + r.status, message: r.statusText } };
  } catch (err) {
    return { ok: false, status: 0, error: { code: "network", message: String(err && err.message || err) } };
  }
}

/** Renew the password check that user and settings changes need (401 reauth_required). */
export function reauthenticate(password, otp = null) {
  return apiFetch("/api/auth/reauth", { body: otp ? { password, otp } : { password } });
}

export function goToLogin() {
  const next = window.location.pathname + window.location.search;
  window.location.assign("/login?next=" + encodeURIComponent(next));
}

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

export function createLease({ root }) {
  root.classList.add("lease-panel");
  const h = el("h2", { id: "lease-h" }, "Control");
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
  root.setAttribute("aria-labelledby", "lease-h");
  root.replaceChildren(h, external, who, request, buttons, error, account);

  let lease = null;
  let connected = false;
  let pollTimer = null;
  let forceArmedUntil = 0;
  let lastSnapLeaseAt = 0;

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
    accountText.textContent = !me ? "Not signed in." : local ? "Local mode: this machine is admin." :
      `Signed in as ${me.user} (${me.role}).`;
    show(btnLogout, Boolean(me && !local));
    external.hidden = !(me && me.external);
    external.textContent = me && me.external
      ? `This session comes from outside the local network (${me.remote}). Check that this is you.` : "";
    if (local) {
      who.textContent = "Local mode: every client on this machine may drive.";
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
      const wins = Number.isFinite(pending.wins_in_s) ? ` — passes in ${Math.ceil(pending.wins_in_s)} s unless answered` : "";
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
      lease = res.data;
    } else {
      showError(`${res.error.message || res.error.code}`);
      if (res.error.details && res.error.details.holder !== undefined) lease = res.error.details;
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

  async function poll() {
    if (performance.now() - lastSnapLeaseAt < POLL_MS * 2) return; // telemetry carries it
    try {
      const r = await fetch("/api/lease", { credentials: "same-origin", cache: "no-store" });
      if (r.ok) {
        lease = await r.json();
        render();
      }
    } catch { /* the connection indicator says so */ }
  }

  // Telemetry comes many times a second: render only when something shown changes.
  let renderedKey = "";
  function renderIfChanged() {
    const pending = lease && lease.request;
    const key = JSON.stringify([connected, lease && lease.version, pending && Math.ceil(pending.wins_in_s || 0)]);
    if (key === renderedKey) return;
    renderedKey = key;
    render();
  }

  function setState(snap) {
    const was = connected;
    connected = snap !== null;
    if (snap && snap.lease) {
      lastSnapLeaseAt = performance.now();
      lease = snap.lease;
    }
    if (connected && !was) {
      whoAmI(true).then(render);
      poll();
      clearInterval(pollTimer);
      pollTimer = setInterval(poll, POLL_MS);
    } else if (!connected && was) {
      clearInterval(pollTimer);
      pollTimer = null;
    }
    renderIfChanged();
  }

  whoAmI().then(render);
  render();
  return { setState, refresh: () => whoAmI(true).then(render) };
}
