// The one way this page sends a state-changing HTTP request (docs/security.md):
// a JSON body (the server refuses anything else with 415), the session's CSRF token in
// X-CSRF-Token (cookie requests without it get 403 csrf_failed), same-origin credentials.
//
// apiFetch() resolves {ok, status, data} or {ok: false, status, error} and never throws:
// - 401 unauthenticated (the session ended): to the login page, and back here after;
// - 401 reauth_required (user and settings changes want a fresh password): a small dialog
//   asks for it, POST /api/auth/reauth, then the request is sent once more;
// - 403 csrf_failed (the page's token is from an older session): a fresh token, once more.
// In local mode (no users) there is no token and none of this happens.

const CSRF_HEADER = "X-CSRF-Token";

let me = null;          // GET /api/auth/me
let mePromise = null;
let token = null;       // the CSRF token in use

/** Who am I (cached; refresh=true asks again). Resolves null when not logged in. */
export function whoAmI(refresh = false) {
  if (!mePromise || refresh) {
    mePromise = fetch("/api/auth/me", { credentials: "same-origin", cache: "no-store" })
      .then((r) => (r.ok ? r.json() : null))
      .catch(() => null)
      .then((m) => {
        me = m;
        if (m) token = m.csrf_token || "";
        return m;
      });
  }
  return mePromise;
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
  const m = me || (await whoAmI());
  return (m && m.csrf_token) || "";
}

export function goToLogin() {
  const next = window.location.pathname + window.location.search;
  window.location.assign("/login?next=" + encodeURIComponent(next));
}

async function send(path, method, body) {
  const headers = { "Content-Type": "application/json" };
  const t = await csrfToken();
  if (t) headers[CSRF_HEADER] = t;
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
    const error = (data && data.error) || { code: `http_${r.status}`, message: r.statusText };
    return { ok: false, status: r.status, error };
  } catch (err) {
    return { ok: false, status: 0, error: { code: "network", message: String((err && err.message) || err) } };
  }
}

/** POST/PUT/DELETE ``path`` with a JSON body and the CSRF token; see the header for what it handles. */
export async function apiFetch(path, { method = "POST", body = undefined } = {}) {
  let res = await send(path, method, body);
  if (res.ok) return res;
  const code = res.error.code;
  if (res.status === 403 && code === "csrf_failed") {
    token = null;
    await whoAmI(true);
    res = await send(path, method, body);
  } else if (res.status === 401 && code === "reauth_required") {
    const renewed = await askPassword(res.error.message);
    if (renewed) res = await send(path, method, body);
  }
  if (!res.ok && res.status === 401 && res.error.code === "unauthenticated") goToLogin();
  return res;
}

/** Renew the password check that user and settings changes need. */
export function reauthenticate(password, otp = null) {
  return send("/api/auth/reauth", "POST", otp ? { password, otp } : { password });
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
