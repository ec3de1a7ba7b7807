"""The hub on real processes (issue 22): a router, robots (each a full teleop server dialling out), and ``python -m
server hub`` with its own users; the robots obey the hub's signed requests and stop by their own watchdogs."""

from __future__ import annotations

import pytest


from tests.server.fleet.fleetkit import Repeat, hub_config, hub_keys, hub_proc, login, wait

FLEET = "h"
#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def robot(server_factory, router, public, rid: str):
    return server_factory({"fleet": {"enabled": True, "router": [router.endpoint], "fleet": FLEET, "robot_id": rid,
                                     "hub_public_key": str(public)}})


def cards(hub, headers=None) -> dict:
    status, body = hub.get("/api/fleet", headers=headers)
    assert status == 200, body
    return {r["id"]: r for r in body["robots"]}


def HubBeats(hub, rid: str, headers=None) -> Repeat:
    """The page's heartbeats, through the hub."""
    return Repeat(lambda: hub.post(f"/api/fleet/{rid}/heartbeat", {}, headers=headers, timeout_s=1.0))


def moving(srv) -> bool:
    return srv.state()["values"]["linear_m_s"] > 0.1


def test_hub_lists_drives_stops_and_its_death_stops_the_robot(server_factory, router, tmp_path) -> None:
    private, public = hub_keys(tmp_path)
    r1 = robot(server_factory, router, public, "r1")
    r2 = robot(server_factory, router, public, "r2")
    hub = hub_proc(hub_config(tmp_path, router, FLEET, private)).start()
    try:
        fleet = wait(lambda: (c := cards(hub)) and all(c.get(r, {}).get("online") and c[r].get("state")
                                                         for r in ("r1", "r2")) and c, 60, "both robots on the hub")
        assert fleet["r1"]["state"] == "idle" and {"battery", "position", "lease", "link", "last_seen_t", "cause"} \
            <= set(fleet["r1"])
        # the mirrored API: state, description, unknown robot, unknown command
        status, state = hub.get("/api/fleet/r1/state")
        assert status == 200 and state["state"] == "idle"
        assert hub.get("/api/fleet/r9/state")[0] == 404
        status, body = hub.post("/api/fleet/r1/fly", {})
        assert status == 422 and body["error"]["code"] == "unknown_command", body
        # not without the lease (the robot's own): then take it through the hub and drive
        status, body = hub.post("/api/fleet/r1/start", {})
        assert status == 409 and body["error"]["code"] == "lease_required", body
        assert hub.post("/api/fleet/r1/lease/take", {})[0] == 200
        with HubBeats(hub, "r1"):
            assert hub.post("/api/fleet/r1/start", {})[0] == 200
            status, body = hub.post("/api/fleet/r1/speed", {"linear": 0.3, "angular": 0.0})
            assert status == 200, body
            wait(lambda: moving(r1), 30, "r1 moving, driven through the hub")
            assert r2.state()["state"] == "idle"
            # bad input through the hub: a clear error, nothing changes
            status, body = hub.post("/api/fleet/r1/speed", {"linear": 99.0, "angular": 0})
            assert status == 422, body
            # the e-stop of one robot from the hub
            status, body = hub.post("/api/fleet/r1/estop", {"reason": "test"})
            assert status == 200, body
            wait(lambda: r1.state()["state"] == "estop", 30, "r1 e-stopped from the hub")
            assert r2.state()["state"] == "idle"
        wait(lambda: cards(hub)["r1"]["state"] == "estop", 30, "the card shows it")
        # stop all: confirmed only
        status, body = hub.post("/api/fleet/stop_all", {})
        assert status == 422 and body["error"]["code"] == "confirm_required"
        status, body = hub.post("/api/fleet/stop_all", {"confirm": True})
        assert status == 200 and body["ok"] and set(body["robots"]) == {"r1", "r2"}, body
        assert r2.state()["state"] == "estop"
        # the hub killed mid-motion: the robot stops by its own watchdog
        for rid, srv in (("r2", r2),):
            assert hub.post(f"/api/fleet/{rid}/reset", {})[0] == 409  # the lease first
            assert hub.post(f"/api/fleet/{rid}/lease/take", {})[0] == 200
            assert hub.post(f"/api/fleet/{rid}/reset", {})[0] == 200
            beats = HubBeats(hub, rid).__enter__()
            assert hub.post(f"/api/fleet/{rid}/start", {})[0] == 200
            assert hub.post(f"/api/fleet/{rid}/speed", {"linear": 0.3, "angular": 0.0})[0] == 200
            wait(lambda: moving(srv), 30, f"{rid} moving")
        hub.kill()
        beats.__exit__()
        wait(lambda: r2.state()["state"] == "estop", 30, "r2 stopped by its own watchdog when the hub died")
        assert r2.state()["cause"]["trigger"] == "link_loss"
        # a robot that goes away is offline on a new hub within liveliness's time
        hub.start()
        wait(lambda: cards(hub).get("r1", {}).get("online"), 120, "r1 online on the restarted hub")
        r1.kill()
        wait(lambda: cards(hub)["r1"]["online"] is False, 120, "r1 offline once its server died")
        assert cards(hub)["r2"]["online"] is True
    finally:
        hub.kill()


def test_hub_users_and_per_robot_permissions(server_factory, router, tmp_path) -> None:
    private, public = hub_keys(tmp_path)
    r1 = robot(server_factory, router, public, "r1")
    cfg = hub_config(tmp_path, router, FLEET, private, users={"alice": "operator", "bob": "operator", "val": "viewer"},
                     robots={"r1": {"drive": ["bob"]}})
    hub = hub_proc(cfg).start()
    try:
        assert hub.get("/api/fleet")[0] == 401  # nobody unauthenticated
        alice, bob, val = login(hub, "alice"), login(hub, "bob"), login(hub, "val")
        wait(lambda: cards(hub, val).get("r1", {}).get("online"), 120, "r1 on the hub")
        # a viewer sees but cannot drive
        assert hub.get("/api/fleet/r1/state", headers=val)[0] == 200
        status, body = hub.post("/api/fleet/r1/lease/take", {}, headers=val)
        assert status == 403, body
        status, body = hub.post("/api/fleet/r1/start", {}, headers=val)
        assert status == 403, body
        # an operator without drive permission for this robot is refused by the hub
        status, body = hub.post("/api/fleet/r1/lease/take", {}, headers=alice)
        assert status == 403 and "may not drive robot r1" in body["error"]["message"], body
        # bob may: his lease on the robot (named as the hub user)
        assert hub.post("/api/fleet/r1/lease/take", {}, headers=bob)[0] == 200
        assert r1.get("/api/lease")[1]["holder"]["user"] == "bob@hub"
        assert hub.post("/api/fleet/r1/start", {}, headers=bob)[0] == 200
        # the e-stop: anyone signed in, a viewer too
        status, body = hub.post("/api/fleet/r1/estop", {}, headers=val)
        assert status == 200, body
        wait(lambda: r1.state()["state"] == "estop", 30, "r1 e-stopped by a viewer through the hub")
        # bob logs out of the hub: the robot ends his session there, and with it his lease
        assert hub.post("/api/auth/logout", {}, headers=bob)[0] == 200
        wait(lambda: r1.get("/api/lease")[1]["holder"] is None, 30, "bob's lease on r1 ended with his hub session")
    finally:
        hub.kill()


def test_hub_config_errors_name_the_key(tmp_path) -> None:
    import subprocess
    import sys

    from tests.server.fleet.fleetkit import REPO

    for body, key in (('[hub]\nrouter = ["tcp/127.0.0.1:7447"]\n', "hub.key_file"),
                      ('[hub]\nkey_file = "/nonexistent"\nrouter = ["tcp/127.0.0.1:7447"]\n', "key_file"),
                      ('[hub]\nrouter = ["tcp/198.51.100.1:7447"]\n', "router"),
                      ('[hub]\nroutr = []\n', "hub.routr")):
        path = tmp_path / "hub.toml"
        path.write_text(body)
        proc = subprocess.run([sys.executable, "-m", "server", "hub", "--config", str(path)], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and key in proc.stderr, (body, proc.stderr)
