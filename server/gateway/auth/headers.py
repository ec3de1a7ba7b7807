"""Security headers on every response (static files, errors and websocket upgrades included).

Installed as an ``on_response_prepare`` hook rather than a middleware, because that
hook also sees the responses a middleware never returns (static files, the router's
404s, ``HTTPException``\\s). It runs after aiohttp has set its default ``Server``
header (``Python/3.x aiohttp/3.y``), so it can replace it with one without a version.

The Content-Security-Policy allows no inline script and no ``eval``: the dashboard is
ES modules from ``/static`` and vendored uPlot (``/static/vendor``). Styles may be inline
(``'unsafe-inline'`` in ``style-src`` only): the video panel adds a ``<style>`` element of
its own, and injected CSS, unlike script, runs no code and can send nothing to another
origin (``img-src``, ``font-src`` and ``connect-src`` are ``'self'``); video frames are
``blob:`` object URLs; the favicon is ``data:,``; the robot description is a
``<script type="application/json">`` data block, which is never executed and so not
subject to ``script-src``. ``connect-src 'self'`` covers same-origin ``ws:``/``wss:``
(CSP 3). ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` stop clickjacking of
the E-STOP and drive controls.
"""

from __future__ import annotations

from aiohttp import web

CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "media-src 'self' blob:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Server": "teleop",
}
HSTS = "max-age=31536000"


def apply_security_headers(response: web.StreamResponse, https: bool) -> None:
    headers = response.headers
    for name, value in SECURITY_HEADERS.items():
        headers[name] = value
    if https:
        headers["Strict-Transport-Security"] = HSTS
