// The login page: POST /api/auth/login as JSON (the server sets the HttpOnly session
// cookie), then go back where the user was heading (?next=, same-origin paths only).
//
// A second step appears only when the server answers otp_required (the password was
// right and the user has a TOTP second factor). The request goes through api.js like every other.

import { apiFetch } from "./api.js";

const $ = (sel) => document.querySelector(sel);

/** The ?next= target when it is a path on this server, else the dashboard. */
export function safeNext(search) {
  const next = new URLSearchParams(search).get("next") || "/";
  // "/x" only: not "//host" or "/\host" (both leave the origin), not "javascript:", not a full URL
  return /^\/(?![/\\])/.test(next) ? next : "/";
}

function showError(text) {
  const el = $("#login-error");
  el.textContent = text || "";
  el.hidden = !text;
}

function setBusy(form, busy) {
  form.classList.toggle("busy", busy);
  $("#login-submit").disabled = busy;
}

async function submit(form) {
  const username = $("#login-user").value.trim();
  const password = $("#login-password").value;
  const otpField = $("#login-otp-field");
  const otp = otpField.hidden ? null : $("#login-otp").value.trim();
  $("#login-user").setAttribute("aria-invalid", String(!username));
  $("#login-password").setAttribute("aria-invalid", String(!password));
  if (!username || !password) {
    showError("Enter your user name and password.");
    return;
  }
  showError("");
  setBusy(form, true);
  const res = await apiFetch("/api/auth/login", { body: otp ? { username, password, otp } : { username, password } });
  setBusy(form, false);
  if (res.ok) {
    window.location.assign(safeNext(window.location.search));
    return;
  }
  if (res.status === 0) {
    showError(`The server cannot be reached (${res.error.message}).`);
    return;
  }
  const error = res.error;
  if (error.code === "otp_required") {
    otpField.hidden = false;
    $("#login-otp").focus();
    showError(error.message || "Enter the one-time code.");
    return;
  }
  if (error.code === "invalid_credentials") $("#login-password").select();
  showError(error.message || `Login failed (HTTP ${res.status}).`);
}

const form = $("#login-form");
if (form) {
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    submit(form);
  });
  $("#login-user").focus();
}
