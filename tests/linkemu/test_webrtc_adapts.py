"""WebRTC adapts to the link (issue 21, "Done means"): Chromium in the operator's namespace plays the
robot's video by WebRTC on ``lan``; the link turns ``bad`` (1 Mbit/s, 150 ms, 5 % loss) while it plays
and the sender steps down (a lower tier, a lower bitrate) and keeps sending pictures; the link turns
``lan`` again and the sender steps back up.

Every figure asserted is the server's own (its rate controller in ``GET /api/video`` → the peer's
``rate``, its stream's packet count), never a time measured here: the waits have long deadlines (the
machine is shared) and only say when to give up.

Why it can be honest on a loaded machine: the camera has sensor noise (σ 3, as a real camera), so the
encoder spends what it is told to and the receiver's estimate (REMB, at most 1.5 × what it receives)
follows the path, not a still picture; ``lan`` is 100 Mbit/s, far more than the top tier's 1.5; and the
controller tells a starved end from a full path (ratecontrol.py, item 4).
"""

from __future__ import annotations

import time

import pytest

from tests.linkemu.test_video_over_the_link import TIERS, open_page, wait_video, webrtc_peers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

# the default ladder's bitrates (what the controller steps through) at a quarter of its pixels: the encoder,
# the decoder and the sim camera cost ~1.3 cores at 640x480 for the whole test, and this one is about the steps
VIDEO = {"video": {"enabled": True, "noise_sigma": 3.0, "width": 320, "height": 240, "tiers": TIERS}}


def peer(srv) -> dict:
    peers = [p for p in webrtc_peers(srv) if p.get("rate")]
    assert len(peers) == 1, peers
    return peers[0]


def wait_peer(srv, pred, timeout_s: float, what: str) -> dict:
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        last = peer(srv)
        if pred(last):
            return last
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}: {last}"
        time.sleep(0.5)


def test_webrtc_steps_down_on_bad_and_back_up_on_lan(linked_server, operator_browser):
    srv = linked_server("lan", VIDEO)
    ladder = [t["name"] for t in srv.get("/api/video")[1]["encoded"]["ladder"]]
    rank = {name: i for i, name in enumerate(ladder)}
    browser = operator_browser(srv.link)
    context, page, errors = open_page(browser, srv, "vera")
    wait_video(page, "webrtc")

    # lan: the top tier (the controller starts there; on a 100 Mbit/s link it has no reason to leave, and if a
    # starved moment made it, it comes back). But a receiving Chromium starved by a loaded machine keeps its REMB
    # under what the top tier needs (~950 kbit/s for two minutes, seen with four test workers), and the controller
    # rightly holds a tier down: then that tier is where lan stands, and what follows is measured from it
    top = wait_peer(srv, lambda p: p["rtcp"]["remb"] >= 5, 120, "the receiver's estimates on lan")
    if top["rate"]["tier"] != ladder[0]:
        try:
            top = wait_peer(srv, lambda p: p["rate"]["tier"] == ladder[0], 30, "the top tier on lan")
        except AssertionError:
            top = peer(srv)
    lan_rank = rank[top["rate"]["tier"]]
    assert lan_rank < len(ladder) - 1, top["rate"]  # room to step down
    lan_bitrate = top["rate"]["bitrate_bit_s"]
    downs = top["rate"]["switches"]["down"]

    srv.link.set_profile("bad")
    low = wait_peer(srv, lambda p: p["rate"]["switches"]["down"] > downs and rank[p["rate"]["tier"]] > lan_rank,
                    120, "a step down on bad")
    assert low["rate"]["bitrate_bit_s"] < lan_bitrate, (top["rate"], low["rate"])
    tier_fps = {t["name"]: t["fps"] for t in srv.get("/api/video")[1]["encoded"]["ladder"]}
    assert tier_fps[low["rate"]["tier"]] >= 10, low["rate"]  # a lower tier, never a slide show
    sent = low["stream"]["packets"]
    shown = page.evaluate("() => window.teleopVideo.stats().frames")
    wait_peer(srv, lambda p: p["stream"]["packets"] >= sent + 30, 120, "pictures still sent on bad")
    page.wait_for_function("(n) => window.teleopVideo.stats().frames >= n", arg=shown + 10, timeout=120_000)
    now = peer(srv)["rate"]
    lowest, ups = max(rank[now["tier"]], rank[low["rate"]["tier"]]), now["switches"]["up"]

    srv.link.set_profile("lan")
    back = wait_peer(srv, lambda p: p["rate"]["switches"]["up"] > ups and rank[p["rate"]["tier"]] < lowest, 180,
                     "a step back up on lan")
    assert back["rate"]["bitrate_bit_s"] > now["bitrate_bit_s"], (now, back["rate"])
    assert not errors, errors
    context.close()
