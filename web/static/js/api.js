// The one way this page talks HTTP to the server (docs/security.md, docs/dashboard.md): every
// request of every module goes through apiFetch() (tests/test_web_assets.py greps for any other
// fetch; tests/e2e check in Chromium that each state-changing request carries the token).
//
// - GET: same-origin credentials, no cache; the answer read as JSON, text or a Blob (`as`).
// - POST/PUT/DELETE: a JSON body (the server refuses anything else with 415; a CSV upload says
//   so with `contentType`, which the trajectory and program routes accept), the session's CSRF
//   token in X-CSRF-Token (cookie requests without it get 403 csrf_failed).
//
// apiFetch() resolves {ok, status, data} or {ok: false, status, error: {code, message}} and never
// throws; describeError() is how a panel shows the error. Under login it also handles:
// - 401 unauthenticated (the session ended): to the login page, and back here after;
// - 401 reauth_required (user and settings changes want a fresh password): a small dialog asks
//   for it, POST /api/auth/reauth, then the request is sent once more;
// - 403 csrf_failed (the page's token is from an older session): a fresh token, once more.
// In local mode (no users) there is no token and none of this happens.
//
// The e-stop is `urgent`: the token is read without waiting (the rendered <meta>), the request
// is `keepalive` (it outlives a closing page) and nothing is retried or asked.

// The base path (docs/fleet.md): "" on the robot's own page, "/fleet/<id>" on a robot's page served by the fleet's
// hub, which relays every request and socket under it to that robot. Read from the page's <meta name="api-base">;
// every path of apiFetch() and every socket URL (wsUrl) starts with it.
const API_BASE = (typeof document !== "undefined" &&
  document.querySelector('meta[name="api-base"]')?.content.replace(/\/+$/, "")) || "";

/** The websocket URL of ``path`` ("/ws/telemetry") on this page's server, under its base path. */
export function wsUrl(path) {
  return `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}${API_BASE}${path}`;
}

const CSRF_HEADER = "X-CSRF-Token";
const STATE_CHANGING = new Set(["POST", "PUT", "PATCH", "DELETE"]);

let me = null;          // GET /api/auth/me
let mePromise = null;
let token = null;       // the CSRF token in use

/** Who am I (cached; refresh=true asks again). Resolves null when not logged in. */
export function whoAmI(refresh = false) {
  if (!mePromise || refresh) {
    mePromise = send("/api/auth/me", { method: "GET" }).then((res) => {
      me = res.ok ? res.data : null;
      if (me) token = me.csrf_token || "";
      return me;
    });
  }
  return mePromise;
}

/** Whether ``m`` (a whoAmI answer) may do what needs ``role`` ("operator", "admin"); local mode may all. */
export function mayAct(m, role) {
  if (!m) return true;             // unknown: let the server decide
  if (m.local_mode) return true;
  const rank = { viewer: 1, operator: 2, admin: 3 };
  return (rank[m.role] || 0) >= (rank[role] || 0);
}

/** The CSRF token the server rendered into the page (synchronous: the e-stop must not wait). */
export function pageCsrfToken() {
  if (token !== null) return token;
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

async function csrfToken() {
  const t = pageCsrfToken();
  if (t) return t;
  // a page without the <meta> (the login page) has no session to take a token from
  if (token === null && !document.querySelector('meta[name="csrf-token"]')) return "";
  const m = me || (await whoAmI());
  return (m && m.csrf_token) || "";
}

let leaving = false;

/** To the login page, once: the session socket, a 401 and the lease panel may all find the session gone at the
 *  same moment, and a second ``location.assign`` aborts the first navigation (the page then shows an error). */
export function goToLogin(assign = (url) => window.location.assign(url)) {
  if (leaving) return;
  leaving = true;
  const next = window.location.pathname + window.location.search;
  assign("/login?next=" + encodeURIComponent(next));
}

/** "message (code)", or what a network failure means: the one way a refusal is shown. */
export function describeError(error) {
  const e = error || {};
  if (e.code === "network") return `could not reach the server: ${e.message || "no answer"}`;
  if (e.message && e.code) return `${e.message} (${e.code})`;
  return e.message || e.code || "unknown error";
}

async function read(r, as) {
  if (as === "blob") return r.blob();
  if (as === "text") return r.text();
  return r.json().catch(() => null);
}

async function send(path, { method = "POST", body, raw, contentType, as = "json", urgent = false } = {}) {
  const init = { method, credentials: "same-origin", cache: "no-store", headers: {} };
  if (STATE_CHANGING.has(method)) {
    init.headers["Content-Type"] = raw !== undefined ? contentType || "application/json" : "application/json";
    init.body = raw !== undefined ? raw : JSON.stringify(body === undefined ? {} : body);
    // the e-stop needs no token (docs/security.md) and must not wait for one: it takes what is there
    const t = urgent ? pageCsrfToken() : await csrfToken();
    if (t) init.headers[CSRF_HEADER] = t;
    if (urgent) init.keepalive = true;
  }
  try {
    const r = await fetch(API_BASE + path, init);
    if (r.ok) return { ok: true, status: r.status, data: await read(r, as) };
    const data = await r.json().catch(() => null);
    const error = (data && data.error) || { code: `http_${r.status}`, message: r.statusText };
    return { ok: false, status: r.status, error };
  } catch (err) {
    return { ok: false, status: 0, error: { code: "network", message: String((err && err.message) || err) } };
  }
}

/**
 * Any request to the server: ``apiFetch(path, {method = "POST", body, raw, contentType, as, urgent})``.
 * ``body`` is sent as JSON ({} when absent); ``raw`` is sent as it is with ``contentType``; ``as`` is
 * "json" (default), "text" or "blob". See the header for what it handles.
 */
export async function apiFetch(path, options = {}) {
  let res = await send(path, options);
  if (res.ok || options.urgent) return res;
  const code = res.error.code;
  if (res.status === 403 && code === "csrf_failed") {
    token = null;
    await whoAmI(true);
    res = await send(path, options);
  } else if (res.status === 401 && code === "reauth_required") {
    const renewed = await askPassword(res.error.message);
    if (renewed) res = await send(path, options);
  }
  if (!res.ok && res.status === 401 && res.error.code === "unauthenticated") goToLogin();
  return res;
}

/** GET ``path`` through apiFetch (``as``: "json", "text" or "blob"). */
export function apiGet(path, options = {}) {
  return apiFetch(path, { ...options, method: "GET" });
}

/** Renew the password check that user and settings changes need. */
export function reauthenticate(password, otp = null) {
  return send("/api/auth/reauth", { body: otp ? { password, otp } : { password } });
}

/** Save ``blob`` as a file called ``name`` (a download the page made itself, e.g. after a POST). */
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// ---------------------------------------------------------------------- the password dialog

let dialog = null;

function buildDialog() {
  const d = document.createElement("dialog");
  d.id = "reauth-dialog";
  d.className = "dialog";
  d.setAttribute("aria-labelledby", "reauth-title");
  d.innerHTML = `
    <form method="dialog" class="login-form">
      <h2 id="reauth-title">Enter your password again</h2>
      <p data-field="why" class="login-note"></p>
      <label class="login-field">Password
        <input id="reauth-password" type="password" autocomplete="current-password" maxlength="1024">
      </label>
      <label class="login-field" data-field="otp-field" hidden>One-time code
        <input id="reauth-otp" type="text" inputmode="numeric" autocomplete="one-time-code" maxlength="8">
      </label>
      <p id="reauth-error" class="field-error" role="alert" hidden></p>
      <div class="dialog-actions">
        <button class="btn" value="cancel" type="submit">Cancel</button>
        <button id="reauth-confirm" class="btn btn-reset" value="confirm" type="button">Confirm</button>
      </div>
    </form>`;
  document.body.append(d);
  return d;
}

/** Ask for the password until it is right or the operator cancels; resolves true when renewed. */
function askPassword(why) {
  dialog = dialog || buildDialog();
  const d = dialog;
  const pw = d.querySelector("#reauth-password");
  const otp = d.querySelector("#reauth-otp");
  const otpField = d.querySelector('[data-field="otp-field"]');
  const err = d.querySelector("#reauth-error");
  const confirm = d.querySelector("#reauth-confirm");
  d.querySelector('[data-field="why"]').textContent = why || "";
  pw.value = "";
  otp.value = "";
  err.hidden = true;
  return new Promise((resolve) => {
    const finish = (ok) => {
      confirm.onclick = null;
      d.onclose = null;
      if (d.open) d.close();
      resolve(ok);
    };
    confirm.onclick = async () => {
      confirm.disabled = true;
      const res = await reauthenticate(pw.value, otpField.hidden ? null : otp.value.trim());
      confirm.disabled = false;
      if (res.ok) {
        finish(true);
        return;
      }
      if (res.error.code === "otp_required") otpField.hidden = false;
      err.textContent = res.error.message || res.error.code;
      err.hidden = false;
      pw.select();
    };
    d.onclose = () => finish(false);
    d.showModal();
    pw.focus();
  });
}
