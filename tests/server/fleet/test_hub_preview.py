"""The low-rate camera preview through the hub (issue 22: video is not carried over Zenoh; the fleet page's cards get
≤ 2 fps on demand, the dashboard WebRTC with the signalling relayed, test_hub_webrtc.py): ``GET /api/fleet/{id}/preview.jpg`` is a JPEG of the robot's camera; asked in a tight loop it
changes at most twice a second (the hub shares one request per robot per 0.5 s, the robot gives one new frame per
0.5 s); a robot without video says so (503 ``no_frame``); a user the hub does not let view the robot is refused."""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.server.fleet.fleetkit import hub_config, hub_keys, hub_proc, login, wait
from tests.server.fleet.test_hub import FLEET, cards

#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def fetch(hub, path: str, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(hub.url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def test_preview_is_a_jpeg_at_two_fps_at_most(server_factory, router, tmp_path) -> None:
    private, public = hub_keys(tmp_path)

    def robot(rid: str, video: bool):
        return server_factory({"video": {"enabled": video},
                               "fleet": {"enabled": True, "router": [router.endpoint], "fleet": FLEET,
                                         "robot_id": rid, "hub_public_key": str(public)}})

    robot("cam", True)
    robot("blind", False)
    cfg = hub_config(tmp_path, router, FLEET, private, users={"alice": "operator", "val": "viewer"},
                     robots={"cam": {"view": ["alice"]}})
    hub = hub_proc(cfg).start()
    try:
        alice, val = login(hub, "alice"), login(hub, "val")
        wait(lambda: all(cards(hub, alice).get(r, {}).get("online") for r in ("cam", "blind")), 120, "both online")
        status, body, headers = wait(lambda: (r := fetch(hub, "/api/fleet/cam/preview.jpg", alice))[0] == 200 and r,
                                     60, "a preview of cam's camera")
        assert headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8", (headers, body[:20])
        # a tight loop for 3 s: at most 2 new frames a second (+1 for the interval the loop starts in)
        seqs, t0 = set(), time.monotonic()
        while time.monotonic() - t0 < 3.0:
            status, body, headers = fetch(hub, "/api/fleet/cam/preview.jpg", alice)
            assert status == 200
            seqs.add(headers["X-Frame-Seq"])
        elapsed = time.monotonic() - t0
        assert 2 <= len(seqs) <= 2 * elapsed + 1, (len(seqs), elapsed)
        # no camera: a clear 503; no view permission: 403; unknown robot: 404
        status, body, _ = fetch(hub, "/api/fleet/blind/preview.jpg", alice)
        assert status == 503 and b"no_frame" in body, body
        assert fetch(hub, "/api/fleet/cam/preview.jpg", val)[0] == 403
        assert fetch(hub, "/api/fleet/r9/preview.jpg", alice)[0] == 404
    finally:
        hub.kill()
