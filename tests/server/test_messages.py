"""Error messages say what is wrong and what to do next (issue 8, item 16)."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProc, wait_until
from tests.server.test_stop_paths import Heartbeat, events

pytestmark = pytest.mark.timeout(60)


def test_http_unknown_field_lists_only_the_routes_fields(server: ServerProc) -> None:
    status, body = server.post("/api/start", {"now": True})
    assert status == 422 and body["error"]["code"] == "unknown_field"
    assert body["error"]["message"].endswith("allowed: none"), body
    assert server.post("/api/start")[0] == 200
    status, body = server.post("/api/speed", {"linear": 0, "angular": 0, "turbo": 1})
    assert "allowed: angular, linear, ttl_s" in body["error"]["message"], body  # no websocket "id, type"


def test_heading_during_an_estop_says_reset(server: ServerProc) -> None:
    server.post("/api/estop")
    status, body = server.post("/api/heading", {"heading_deg": 90})
    assert status == 409 and body["error"]["code"] == "estop_latched"
    assert "reset" in body["error"]["message"] and "start it first" not in body["error"]["message"]


def test_heading_command_warns_until_the_compass_is_calibrated(server: ServerProc) -> None:
    assert server.state()["estimation"]["heading_calibrated"] is False
    assert "~10°" in server.state()["estimation"]["warning"]
    assert server.post("/api/start")[0] == 200
    with Heartbeat(server):
        status, body = server.post("/api/heading", {"heading_deg": 90})
        assert status == 200 and "uncalibrated" in body["warning"], body
        server.post("/api/estop")
    wait_until(lambda: events(server, "behavior_cancel"), 5, "the turn cancelled")
    cancel = events(server, "behavior_cancel")[-1]
    assert cancel["message"] == "heading: e-stop", cancel
    assert cancel["values"]["outcome"] == "cancelled: e-stop", cancel  # once, not "cancelled: cancelled: …"


def test_a_turn_cut_short_by_link_loss_says_so_once(server: ServerProc) -> None:
    assert server.post("/api/start")[0] == 200
    assert server.post("/api/heading", {"heading_deg": 180})[0] == 200
    wait_until(lambda: events(server, "behavior_cancel"), 5, "link loss cancels the turn")
    cancel = events(server, "behavior_cancel")[-1]
    assert cancel["values"]["outcome"] == "cancelled: robot estop", cancel
