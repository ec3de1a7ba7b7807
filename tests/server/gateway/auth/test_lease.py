"""The control lease: one driver; request, hand-over, deny, timeout, link loss, session end, admin takeover."""

from __future__ import annotations

import pytest

from server.gateway.auth.errors import LeaseError
from server.gateway.auth.lease import Lease, LeaseChange
from tests.server.gateway.auth.conftest import FakeClock

SPEED = {"linear": 0.1, "angular": 0.0}


@pytest.fixture
def lease() -> tuple[Lease, FakeClock, list[LeaseChange]]:
    clock = FakeClock(0.0)
    lease = Lease(timeout_s=30, clock=clock, wall_clock=lambda: 1.7e9 + clock.t)
    changes: list[LeaseChange] = []
    lease.listeners.append(changes.append)
    return lease, clock, changes


def reasons(changes: list[LeaseChange]) -> list[str]:
    return [c.reason for c in changes]


def test_take_free_lease_then_others_are_refused_naming_the_holder(lease) -> None:
    lz, _, changes = lease
    lz.take("s1", "alice")
    with pytest.raises(LeaseError) as err:
        lz.take("s2", "bob")
    assert err.value.code == "lease_held" and "alice" in err.value.message
    with pytest.raises(LeaseError) as err:
        lz.check("s2")
    assert err.value.code == "lease_held" and err.value.details["holder"]["user"] == "alice"
    lz.check("s1")
    assert reasons(changes) == ["taken"] and changes[0].holder_changed


def test_nobody_holds_it_means_lease_required(lease) -> None:
    lz, _, _ = lease
    with pytest.raises(LeaseError) as err:
        lz.check("s1")
    assert err.value.code == "lease_required"


def test_request_then_handover(lease) -> None:
    lz, _, changes = lease
    lz.take("s1", "alice")
    lz.request("s2", "bob")
    assert lz.to_json()["request"]["user"] == "bob"
    with pytest.raises(LeaseError) as err:
        lz.request("s3", "carol")  # one request at a time
    assert err.value.code == "lease_requested"
    with pytest.raises(LeaseError):
        lz.handover("s2")  # only the holder hands over
    lz.handover("s1", accept=True)
    assert lz.holder.user == "bob" and lz.pending is None
    assert reasons(changes) == ["taken", "requested", "handed_over"]


def test_deny_keeps_the_lease_and_clears_the_request(lease) -> None:
    lz, clock, changes = lease
    lz.take("s1", "alice")
    lz.request("s2", "bob")
    clock.advance(20)
    lz.handover("s1", accept=False)
    clock.advance(20)
    lz.expire()
    assert lz.holder.user == "alice" and lz.pending is None
    assert reasons(changes)[-1] == "denied"


def test_unanswered_request_wins_after_the_holder_idles_for_the_timeout(lease) -> None:
    lz, clock, changes = lease
    lz.take("s1", "alice")
    lz.request("s2", "bob")
    clock.advance(29)
    lz.expire()
    assert lz.holder.user == "alice"
    assert lz.to_json()["request"]["wins_in_s"] == pytest.approx(1.0)
    clock.advance(1)
    lz.expire()
    assert lz.holder.user == "bob"
    assert reasons(changes)[-1] == "timed_out"


def test_a_driving_holder_is_not_interrupted_by_a_request(lease) -> None:
    lz, clock, _ = lease
    lz.take("s1", "alice")
    lz.request("s2", "bob")
    for _ in range(10):  # drives (a command every 10 s) for 100 s
        clock.advance(10)
        lz.check("s1")
    assert lz.holder.user == "alice"
    clock.advance(30)  # stops driving, does not answer
    lz.expire()
    assert lz.holder.user == "bob"


def test_link_loss_and_session_end_free_the_lease_or_pass_it_on(lease) -> None:
    lz, _, changes = lease
    lz.take("s1", "alice")
    lz.on_link_loss()
    assert lz.holder is None
    lz.take("s2", "bob")
    lz.request("s3", "carol")
    lz.on_session_end("s2")
    assert lz.holder.user == "carol"
    lz.on_session_end("s9")  # not involved: nothing happens
    assert reasons(changes) == ["taken", "link_loss", "taken", "requested", "session_ended"]


def test_forced_take(lease) -> None:
    lz, _, changes = lease
    lz.take("s1", "alice")
    lz.take("s2", "root", force=True)
    assert lz.holder.user == "root"
    assert changes[-1].reason == "forced" and changes[-1].before.user == "alice"


def test_release_and_withdraw_are_idempotent(lease) -> None:
    lz, _, _ = lease
    lz.take("s1", "alice")
    lz.request("s2", "bob")
    lz.release("s2")
    assert lz.pending is None
    lz.release("s2")
    lz.release("s1")
    assert lz.holder is None
    lz.release("s1")


# ---------------------------------------------------------------------- over HTTP, two operators
async def test_two_operators_hand_over_over_http(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    olga, otto = await gw.login("olga"), await gw.login("otto")
    changes: list[LeaseChange] = []
    gw.svc.on_lease_change(changes.append)
    status, body, _ = await gw.request("POST", "/api/lease/take", olga)
    assert status == 200 and body["holder"]["user"] == "olga" and body["you"] == "holder"
    status, body, _ = await gw.request("POST", "/api/speed", otto, json_body=SPEED)
    assert status == 409 and "olga" in body["error"]["message"]
    status, body, _ = await gw.request("POST", "/api/lease/request", otto)
    assert status == 200 and body["you"] == "requester" and body["request"]["user"] == "otto"
    status, body, _ = await gw.request("GET", "/api/lease", olga)
    assert body["request"]["user"] == "otto" and body["you"] == "holder"
    status, body, _ = await gw.request("POST", "/api/lease/handover", olga, json_body={"accept": True})
    assert status == 200 and body["holder"]["user"] == "otto" and body["you"] is None
    assert (await gw.request("POST", "/api/speed", olga, json_body=SPEED))[0] == 409
    assert (await gw.request("POST", "/api/speed", otto, json_body=SPEED))[0] == 200
    assert gw.robot.actions == [("speed", "otto")]
    assert [c.reason for c in changes] == ["taken", "requested", "handed_over"]
    assert gw.svc.lease.to_json()["holder"]["session"] == otto.session


async def test_request_times_out_over_http(start_gateway, users_file, clock) -> None:
    gw = await start_gateway(users_file, lease_timeout_s=30)
    olga, otto = await gw.login("olga"), await gw.login("otto")
    await gw.request("POST", "/api/lease/take", olga)
    await gw.request("POST", "/api/lease/request", otto)
    clock.advance(31)
    gw.svc.lease.expire()  # the housekeeping task does this every second
    status, body, _ = await gw.request("GET", "/api/lease", otto)
    assert body["holder"]["user"] == "otto" and body["you"] == "holder"


async def test_only_admins_force(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    olga, otto, ada = await gw.login("olga"), await gw.login("otto"), await gw.login("ada")
    await gw.request("POST", "/api/lease/take", olga)
    status, body, _ = await gw.request("POST", "/api/lease/take", otto, json_body={"force": True})
    assert status == 403 and "admin" in body["error"]["message"]
    status, body, _ = await gw.request("POST", "/api/lease/take", ada, json_body={"force": True})
    assert status == 200 and body["holder"]["user"] == "ada"
    assert (await gw.request("POST", "/api/start", olga, json_body={}))[0] == 409


async def test_viewers_cannot_take_or_request(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    vera = await gw.login("vera")
    for path in ("/api/lease/take", "/api/lease/request"):
        status, body, _ = await gw.request("POST", path, vera)
        assert status == 403, path
    assert (await gw.request("GET", "/api/lease", vera))[0] == 200


async def test_logout_frees_the_lease(start_gateway, users_file) -> None:
    gw = await start_gateway(users_file)
    olga = await gw.login("olga")
    await gw.request("POST", "/api/lease/take", olga)
    await gw.request("POST", "/api/auth/logout", olga)
    assert gw.svc.lease.holder is None


@pytest.mark.parametrize("live", [True, False], ids=["robot", "replay"])
def test_the_robots_link_loss_ends_the_lease_and_a_replayed_one_does_not(tmp_path, live: bool) -> None:
    """The trust layer's hook on the runtime's events: a replay server replays a recording's events, and a recorded
    link loss (another session's, long ago) used to free the lease of whoever watched, as the playback reached it."""
    from aiohttp import web

    from server.gateway.auth.config import AuthConfig
    from server.gateway.auth.wiring import setup_trust
    from server.gateway.hooks import Hooks
    from tests.server.gateway.auth.client import make_users

    class Runtime:
        def __init__(self) -> None:
            self.live = live
            self.control: list[str | None] = []

        def set_control(self, principal: str | None) -> None:
            self.control.append(principal)

        def latest_snapshot(self) -> dict:
            return {"state": "idle"}

    class Hub:
        def broadcast(self, message) -> None:
            pass

    hooks = Hooks()
    runtime = Runtime()
    cfg = AuthConfig.from_table({"users_file": str(make_users(tmp_path / "users.json"))})
    svc = setup_trust(web.Application(), cfg, bound_host="127.0.0.1", hooks=hooks, hub=Hub(), runtime=runtime,
                      housekeeping_s=None)
    svc.lease.take("s1", "olga")
    Hooks.call(hooks.on_event, {"trigger": "operator_estop"})
    assert svc.lease.holder.user == "olga"
    Hooks.call(hooks.on_event, {"trigger": "link_loss"})
    assert (svc.lease.holder is None) is live
    assert runtime.control[-1] == (None if live else "olga/s1")
