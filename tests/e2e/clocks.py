"""A wall-clock step between the server and a page, for the tests of ages on the monotonic clock (issue 20)."""

from __future__ import annotations

import json


class WallClockStepper:
    """Between a page and ``/ws/telemetry``: steps the server's wall clock back an hour at every pong (pongs'
    ``server_t`` and snapshots' ``t`` move together, as an NTP step moves them), so the page's min-RTT offset
    comes from a pong of another hour than any wall stamp it compares: an age computed from wall stamps reads
    hours, one from the monotonic stamps (``mono_t``, ``server_mono``) stays right. ``open_dashboard(server,
    setup=stepper.setup)``; Playwright runs the proxy's handlers only while it is called (a predicate that
    waits in the page pumps it)."""

    def __init__(self) -> None:
        self.steps = 0

    def shift(self, raw: str) -> str:
        msg = json.loads(raw)
        if msg.get("type") == "pong":
            self.steps += 1
            msg["server_t"] -= 3600.0 * self.steps
        elif msg.get("type") == "telemetry" and isinstance(msg.get("data"), dict):
            msg["data"]["t"] -= 3600.0 * self.steps
        else:
            return raw
        return json.dumps(msg)

    def proxy(self, ws) -> None:
        upstream = ws.connect_to_server()
        upstream.on_message(lambda m: ws.send(self.shift(m) if isinstance(m, str) else m))

    #: what Playwright's socket mock throws on a send to a socket that is closing or closed. With a websocket
    #: route installed, *every* WebSocket of the page is that mock (not only the routed one), and where
    #: Chromium's own WebSocket only logs such a send, the mock throws: an uncaught error. A fresh-clone run
    #: failed its teardown on it once, as the context closed (the page's WebRTC peer closing). The page's sends
    #: check ``readyState`` (webrtc.js's offer did not, now does); what is left to tolerate is the mock's
    #: stricter rule in the page's last moments
    MOCK_CLOSED_ERROR = "WebSocket is already in CLOSING or CLOSED state."

    def setup(self, page) -> None:
        page.route_web_socket("**/ws/telemetry*", self.proxy)

    def tolerate(self, dash) -> None:
        """Tell ``dash``'s teardown check that :data:`MOCK_CLOSED_ERROR` is this proxy's (and nothing else)."""
        dash.tolerated_page_errors.add(self.MOCK_CLOSED_ERROR)

    def wait_steps(self, page, n: int, wait_for) -> None:
        wait_for(lambda: page.wait_for_timeout(100) or self.steps >= n, 60.0,
                 f"{n} pongs through the proxy ({n} clock steps)")
