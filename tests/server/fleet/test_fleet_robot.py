"""The robot's side of the fleet on the real server (issue 22): a router on a loopback port of its own, the robot's
gateway dialling out to it, and a bare Zenoh client speaking for the hub (signed) or a hostile neighbour."""

from __future__ import annotations

import time

import pytest

from server.config import ConfigError, load_config
from server.gateway.fleet.trust import Signer
from tests.server.fleet.fleetkit import Repeat, ZClient, foreign_signer, hub_keys, wait

FLEET = "t"
#: real router, robots and hub on a loaded 2-core box: their start-ups alone have taken over 60 s each
pytestmark = pytest.mark.timeout(600)


def robot_config(router, public, robot_id: str = "r1", **more) -> dict:
    return {"fleet": {"enabled": True, "router": [router.endpoint], "fleet": FLEET, "robot_id": robot_id,
                      "hub_public_key": str(public), **more}}


@pytest.fixture
def fleet_robot(server_factory, router, tmp_path):
    private, public = hub_keys(tmp_path)
    hub = ZClient(router.endpoint, FLEET, Signer.from_file(private))  # first: it hears the description put
    srv = server_factory(robot_config(router, public))
    wait(lambda: hub.live.get("r1"), 120, "robot r1 online (liveliness)")
    yield srv, hub
    hub.close()


def link(srv) -> dict:
    status, body = srv.get("/api/fleet/link")
    assert status == 200, body
    return body


def Heartbeats(hub: ZClient, robot: str) -> Repeat:
    """The hub's relay of its operator's heartbeats."""
    return Repeat(lambda: hub.rpc(robot, "command", name="heartbeat", body={}, timeout_s=0.5))


def test_fleet_config_errors_name_the_key(tmp_path) -> None:
    for table, key in (({"enabled": True}, "router"),
                       ({"enabled": True, "router": ["tcp/127.0.0.1:7447"]}, "hub_public_key"),
                       ({"enabled": True, "router": ["tcp/192.0.2.1:7447"], "hub_public_key": "x"}, "router"),
                       ({"enabled": True, "router": ["tcp/127.0.0.1:7447"], "hub_public_key": str(tmp_path / "no")},
                        "hub_public_key"),
                       ({"robot_id": "r/1"}, "robot_id"),
                       ({"routr": []}, "fleet.routr")):
        with pytest.raises(ConfigError, match=key):
            load_config(None, overrides={"fleet": table})
    assert load_config(None).fleet.enabled is False  # off by default


def test_robot_publishes_and_obeys_only_its_hub(fleet_robot, router) -> None:
    srv, hub = fleet_robot
    # summaries at 1 Hz with what a fleet card shows; the description once
    wait(lambda: len(hub.samples("r1", "summary")) >= 2, 30, "two summaries")
    summary = hub.samples("r1", "summary")[-1]
    assert {"id", "state", "cause", "battery", "position", "alerts", "lease", "link"} <= set(summary), summary
    assert summary["id"] == "r1" and summary["state"] == "idle"
    wait(lambda: hub.samples("r1", "description"), 30, "the description")
    assert hub.samples("r1", "description")[-1]["profile"] == srv.get("/api/robot")[1]["profile"]
    assert not hub.samples("r1", "telemetry"), "full telemetry only while watched"

    # hostile neighbours: unsigned, signed by another key, a replay, signed for another robot — none moves it
    neighbour = ZClient(router.endpoint, FLEET)  # on the same router, no key
    try:
        unsigned = neighbour.rpc("r1", "command", name="start", body={}, signer=None)
        assert unsigned["ok"] is False and unsigned["error"]["code"] == "untrusted", unsigned
        forged = neighbour.rpc("r1", "command", name="start", body={}, signer=foreign_signer())
        assert forged["error"]["code"] == "untrusted" and "signature" in forged["error"]["message"], forged
        garbage = neighbour.rpc("r1", "command", raw=b"\xff" * 300_000, attachment=b"x" * 64)
        assert garbage["error"]["code"] == "too_large", garbage
    finally:
        neighbour.close()
    take = {"op": "lease", "action": "take", "fleet": FLEET, "robot": "r1", "user": "alice", "role": "operator",
            "session": "s1"}
    payload, sig = hub.signer.sign(take)
    assert hub.rpc("r1", "lease", raw=payload, attachment=sig)["ok"] is True
    again = hub.rpc("r1", "lease", raw=payload, attachment=sig)  # captured and sent again
    assert again["error"]["code"] == "replayed", again
    payload, sig = hub.signer.sign({**take, "op": "command", "name": "start", "body": {}, "robot": "r2"})
    elsewhere = hub.rpc("r1", "command", raw=payload, attachment=sig)  # signed for r2, sent to r1
    assert elsewhere["error"]["code"] == "wrong_robot", elsewhere
    assert srv.state()["state"] == "idle", "nothing a neighbour sent started the robot"

    # a viewer sees but cannot drive; an operator without the lease is refused by the robot's own lease
    viewer = hub.rpc("r1", "command", name="start", body={}, user="val", role="viewer", session="v1")
    assert viewer["status"] == 403 and viewer["error"]["code"] == "forbidden", viewer
    assert hub.rpc("r1", "state", user="val", role="viewer", session="v1")["ok"] is True
    bob = hub.rpc("r1", "command", name="start", body={}, user="bob", session="b1")
    assert bob["status"] == 409 and bob["error"]["code"] == "lease_held", bob
    # a claimed admin is capped at the robot's max_role (operator): no forced take
    forced = hub.rpc("r1", "lease", action="take", force=True, user="eve", role="admin", session="e1")
    assert forced["status"] == 403, forced
    # bad input over the fleet: a clear error, nothing changes
    bad = hub.rpc("r1", "command", name="speed", body={"linear": "fast", "angular": 0})
    assert bad["status"] == 422 or bad["status"] == 400, bad
    unknown = hub.rpc("r1", "command", name="fly", body={})
    assert unknown["error"]["code"] == "unknown_command", unknown

    # alice holds the lease: she drives through the same command path (recorded as "fleet")
    with Heartbeats(hub, "r1"):
        assert hub.rpc("r1", "command", name="start", body={})["ok"] is True
        go = hub.rpc("r1", "command", name="speed", body={"linear": 0.3, "angular": 0.0, "id": 1})
        assert go["ok"] is True, go
        wait(lambda: srv.state()["values"]["linear_m_s"] > 0.1, 30, "the rover moving")
        assert hub.rpc("r1", "watch", rate_hz=20)["ok"] is True
        wait(lambda: len(hub.samples("r1", "telemetry")) >= 5, 30, "telemetry while watched")
        assert hub.rpc("r1", "command", name="stop", body={})["ok"] is True
    summary = wait(lambda: [s for s in hub.samples("r1", "summary") if s["lease"] == "alice@hub"], 30,
                   "the lease holder in the summary")[-1]
    assert summary["lease"] == "alice@hub"
    events = srv.get("/api/events?limit=1000")[1]["events"]
    status = link(srv)
    assert status["connected"] and status["untrusted"] >= 3, status
    assert events  # the runtime's log is intact
    # the e-stop over the fleet: never refused for a replay, from any authenticated hub user (a viewer too)
    payload, sig = hub.signer.sign({"op": "command", "name": "estop", "body": {"reason": "test"}, "fleet": FLEET,
                                    "robot": "r1", "user": "val", "role": "viewer", "session": "v1"})
    assert hub.rpc("r1", "command", raw=payload, attachment=sig)["ok"] is True
    assert hub.rpc("r1", "command", raw=payload, attachment=sig)["ok"] is True
    assert srv.state()["state"] == "estop"


def test_router_lost_while_driving_the_watchdog_stops_and_nothing_replays(fleet_robot, router) -> None:
    srv, hub = fleet_robot
    assert hub.rpc("r1", "lease", action="take")["ok"] is True
    beats = Heartbeats(hub, "r1").__enter__()
    try:
        assert hub.rpc("r1", "command", name="start", body={})["ok"] is True
        assert hub.rpc("r1", "command", name="speed", body={"linear": 0.3, "angular": 0.0})["ok"] is True
        wait(lambda: srv.state()["values"]["linear_m_s"] > 0.1, 30, "the rover moving")
        before = link(srv)
        router.kill()
        # the robot's own watchdog stops it: nobody told it to
        wait(lambda: srv.state()["state"] == "estop", 30, "the link-loss e-stop")
        assert srv.state()["cause"]["trigger"] == "link_loss"
        # commands the hub sent while the router was away must never arrive later
        sent_during_outage = 0
        for _ in range(5):
            try:
                hub.rpc("r1", "command", name="start", body={}, timeout_s=0.3)
            except Exception:  # noqa: BLE001
                pass
            sent_during_outage += 1
        router.start()
        wait(lambda: link(srv)["connects"] > before["connects"], 120, "the robot reconnected to the new router")
    finally:
        beats.__exit__()
    after = link(srv)
    assert after["declared"] > before["declared"], "everything declared again on the new router"
    wait(lambda: hub.live.get("r1"), 120, "robot online again (its token re-declared)")
    requests_then = link(srv)["requests"]
    time.sleep(2.0)  # (a window for a replay that must not come; the assertion is on counts, not time)
    assert link(srv)["requests"] == requests_then, "no request arrived that nobody sent now"
    assert srv.state()["state"] == "estop", "nothing moves without a new reset and start"
    reply = hub.rpc("r1", "describe")
    assert reply["ok"] and reply["result"]["summary"]["state"] == "estop"
    assert sent_during_outage == 5


def test_a_robot_with_users_of_its_own_obeys_its_lease_for_hub_users(server_factory, router, tmp_path) -> None:
    """Logged-in mode on the robot: a hub user is no user of the robot, yet holds its lease like one (named
    ``alice@hub``), and the robot's own operator is refused while she drives (and the other way round)."""
    import subprocess
    import sys

    from tests.server.fleet.fleetkit import REPO

    subprocess.run([sys.executable, "-m", "server", "users", "--file", str(tmp_path / "users.json"), "add", "olga",
                    "--role", "operator", "--password-stdin"], input="pw-olga-12345\n", text=True, check=True,
                   cwd=REPO, capture_output=True)
    private, public = hub_keys(tmp_path)
    hub = ZClient(router.endpoint, FLEET, Signer.from_file(private))
    try:
        srv = server_factory(robot_config(router, public))
        wait(lambda: hub.live.get("r1"), 120, "robot r1 online")
        status, body = srv.post("/api/auth/login", {"username": "olga", "password": "pw-olga-12345", "bearer": True})
        assert status == 200, body
        olga = {"Authorization": f"Bearer {body['token']}"}
        assert hub.rpc("r1", "lease", action="take")["ok"] is True
        status, body = srv.post("/api/lease/take", {}, headers=olga)
        assert status == 409 and "alice@hub" in body["error"]["message"], body
        with Heartbeats(hub, "r1"):
            assert hub.rpc("r1", "command", name="start", body={})["ok"] is True
            assert srv.post("/api/stop", {}, headers=olga)[0] == 409  # not hers to drive
            assert hub.rpc("r1", "lease", action="release")["ok"] is True
        wait(lambda: srv.get("/api/state", headers=olga)[1]["state"] in ("idle", "estop"), 30,
             "the robot stopped when its driver changed")
        assert srv.post("/api/lease/take", {}, headers=olga)[0] == 200
        refused = hub.rpc("r1", "command", name="start", body={})
        assert refused["error"]["code"] == "lease_held" and "olga" in refused["error"]["message"], refused
    finally:
        hub.close()
