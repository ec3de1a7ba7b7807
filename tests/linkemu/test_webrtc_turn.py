"""WebRTC through a TURN relay (coturn, scripts/install-network-tools.sh) with relay-only ICE, the robot
behind the emulator's NAT (issue 21 §2, docs/video.md "TURN set-up").

The robot's side is a NAT router that lets nothing in but a forward of the dashboard's TCP port (a
router's port forward), so no UDP can reach the robot unasked; coturn runs on the operator's side (the
"internet"), with long-term credentials. The server's ``[webrtc]`` table names it and sets
``ice_transport_policy = "relay"``: the browser gets the server and the policy in ``webrtc_config``
and aiortc uses the same, so both ends offer relay candidates only. The picture plays in Chromium (logged
in), the selected candidate pair is a relay one on the browser's side, on both sides (the
remote candidate is aiortc's, which had only relays to offer), and coturn logged the allocations. The
page is set to WebRTC (not auto), so a relay slow to connect on a loaded machine is retried.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.linkemu.test_video_over_the_link import open_page, wait_video

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TURN_PORT = 3478
TURN_USER, TURN_SECRET = "robot", "relay-secret-for-tests"


def test_video_plays_through_a_coturn_relay_with_relay_only_ice_behind_the_nat(linked_server, operator_browser,
                                                                                tmp_path):
    turnserver = shutil.which("turnserver") or shutil.which("turnserver", path="/usr/bin:/usr/sbin")
    if turnserver is None:
        pytest.fail("turnserver (coturn) not found: run scripts/install-network-tools.sh (make test does)",
                    pytrace=False)
    from linkemu import OPERATOR_IP

    turn_url = f"turn:{OPERATOR_IP}:{TURN_PORT}?transport=udp"
    overrides = {"video": {"enabled": True}, "auth": {"allowed_hosts": ["10.77.2.1"]},
                 "webrtc": {"ice_transport_policy": "relay",
                            "ice_servers": [{"urls": [turn_url], "username": TURN_USER, "credential": TURN_SECRET}]}}
    srv = linked_server("4g", overrides, nat=True)
    srv.host = srv.link.forward_tcp(srv.port)  # the dashboard's port only; UDP inward stays blocked
    log_path = tmp_path / "turnserver.log"
    turn = srv.link.popen_in("operator", [
        turnserver, "-n", "--listening-ip", OPERATOR_IP, "--relay-ip", OPERATOR_IP, "--listening-port",
        str(TURN_PORT), "--lt-cred-mech", "--user", f"{TURN_USER}:{TURN_SECRET}", "--realm", "teleop",
        "--no-tls", "--no-dtls", "--fingerprint", "--no-cli", "--simple-log", "--log-file", str(log_path), "-v",
        "--min-port", "49152", "--max-port", "49252"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        browser = operator_browser(srv.link)
        context, page, errors = open_page(browser, srv, "vera")  # WebRTC chosen: retried, never left
        wait_video(page, "webrtc", frames=20)
        local = page.evaluate("""async () => {
            const s = await window.teleopVideo.transportStats();
            return s && s.selectedPair; }""")
        # both ends' candidates are relays: the browser's own, and the one aiortc offered (its only kind)
        assert local == {"local": "relay", "remote": "relay"}, local
        log = log_path.read_text(errors="replace")
        assert log.count("ALLOCATE processed, success") >= 2, log[-3000:]
        assert "CHANNEL_BIND processed, success" in log or "CREATE_PERMISSION processed, success" in log, log[-3000:]
        assert not errors, errors
        context.close()
    finally:
        turn.terminate()
        try:
            turn.wait(10)
        except subprocess.TimeoutExpired:
            turn.kill()
