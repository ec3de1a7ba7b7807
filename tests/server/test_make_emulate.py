"""``make emulate EMULATOR=mavlink`` as the README types it (issue 24): the emulated ArduPilot rover on a pty and
``python -m server`` with ``config/rover-mavlink.toml`` driving it through the real MAVLink driver; a start arms
it and the e-stop holds it. The emulator stops with the server.

Only what the test must change is given on the command line: the interpreter's own bin directory (CI's venv is
the one ``make`` made), a free port, no users file of the checkout and no camera.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, wait_until

pytestmark = pytest.mark.timeout(180)


def call(url: str, method: str = "GET") -> tuple[int, dict]:
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_make_emulate_mavlink_drives_the_emulated_vehicle(tmp_path: Path) -> None:
    args = " ".join(["--port 0", f"--set auth.users_file='\"{tmp_path / 'users.json'}\"'", "--set video.enabled=false",
                     "--set safety.command_timeout_s=30.0", "--set loop.max_stall_s=2.0"])
    # STAMP=pyproject.toml: the venv is there already (make's own rule would reinstall it when its stamp is missing)
    cmd = ["make", "-s", "emulate", "EMULATOR=mavlink", f"BIN={Path(sys.executable).parent}", "STAMP=pyproject.toml",
           f"ARGS={args}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()  # type: ignore[arg-type]
    try:
        def url() -> str | None:
            m = re.search(r"teleop listening on (http://\S+)", "".join(lines))
            assert proc.poll() is None, "".join(lines[-30:])
            return m and m.group(1)

        base = wait_until(url, 90, "the server listening")
        assert any("mavlink emulator on " in line for line in lines), lines[:5]
        status, robot = call(base + "/api/robot")
        assert status == 200 and robot["driver"] == "mavlink" and robot["commands"] == ["speed"], robot
        status, body = call(base + "/api/start", "POST")
        assert status == 200, body
        wait_until(lambda: call(base + "/api/state")[1]["values"]["armed"] == 1.0, 30, "armed by the start")
        status, body = call(base + "/api/estop", "POST")
        assert status == 200 and body["state"] == "estop", body
        wait_until(lambda: call(base + "/api/state")[1]["values"]["armed"] == 0.0, 30, "disarmed by the e-stop")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert not any("mavlink_vehicle" in p and "python" in p for p in _processes_of(proc.pid)), "emulator left"


def _processes_of(pgid: int) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    out.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except (OSError, ProcessLookupError):
                pass
    return out
