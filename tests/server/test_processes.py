"""The runtime and the gateway as separate processes: what happens when either stalls or dies
(issue 9, item 4), on real processes. Times come from the runtime's own event log."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.conftest import REPO, ServerProc, wait_until
from tests.server.test_stop_paths import Heartbeat, drive, moving

pytestmark = pytest.mark.timeout(120)

TICK_S = 0.01


def children(srv: ServerProc) -> dict[str, int]:
    """The launcher's children by role (runtime, gateway), from /proc."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if ppid == srv.proc.pid and len(cmd) > 2 and cmd[1] == b"-m":
            out[cmd[2].decode().rsplit(".", 1)[-1]] = int(pid)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def runtime_events(srv: ServerProc, socket_path: str) -> list[dict]:
    """The runtime's own event log, asked over the runtime API (the gateway may be frozen)."""
    out = subprocess.run([sys.executable, "-m", "server.console", "--socket", socket_path, "call", "events",
                          '{"limit": 1000}'], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["events"]


def socket_path(srv: ServerProc) -> str:
    for line in srv.output:
        if "runtime API on " in line:
            return line.split("runtime API on ", 1)[1].split(" ", 1)[0]
    raise AssertionError("the launcher did not say where the runtime's socket is")


def test_three_processes_and_one_url(server: ServerProc) -> None:
    kids = children(server)
    assert set(kids) == {"runtime", "gateway"}, kids
    urls = [line for line in server.output if "teleop listening on http://" in line]
    assert len(urls) == 1
    assert server.get("/api/telemetry")[1]["runtime"]["pid"] == kids["runtime"]


def test_frozen_gateway_is_link_loss_for_the_runtime(server: ServerProc) -> None:
    drive(server, 0.3)
    sock = socket_path(server)
    gateway = children(server)["gateway"]
    with Heartbeat(server, 0.05):
        wait_until(lambda: moving(server), 5, "rover moving")
        os.kill(gateway, signal.SIGSTOP)
    try:
        events = wait_until(lambda: [e for e in runtime_events(server, sock) if e["trigger"] == "link_loss"], 10,
                            "the runtime's link-loss stop while the gateway is frozen")
    finally:
        os.kill(gateway, signal.SIGCONT)
    timeout_s = server.state()["link"]["timeout_s"]
    assert events[-1]["values"]["age_s"] <= timeout_s + 2 * TICK_S, events[-1]
    assert server.state()["state"] == "estop"


def test_killed_gateway_stops_the_robot_and_a_new_one_never_resumes_motion(server: ServerProc) -> None:
    drive(server, 0.3)
    sock = socket_path(server)
    old = children(server)
    with Heartbeat(server, 0.05):
        wait_until(lambda: moving(server), 5, "rover moving")
        os.kill(old["gateway"], signal.SIGKILL)
        events = wait_until(lambda: [e for e in runtime_events(server, sock) if e["trigger"] == "link_loss"], 10,
                            "the runtime's link-loss stop after the gateway died")
        timeout_s = 0.5
        assert events[-1]["values"]["age_s"] <= timeout_s + 2 * TICK_S, events[-1]
        # the launcher starts a new gateway on the same port; it reconnects to the same runtime
        wait_until(lambda: children(server).get("gateway") not in (None, old["gateway"]), 15, "a new gateway")
        wait_until(lambda: server.get("/api/state", timeout_s=2)[0] == 200, 20, "the new gateway serving")
    assert children(server)["runtime"] == old["runtime"]  # the runtime lived on
    s = server.state()
    assert s["state"] == "estop" and s["cause"]["trigger"] == "link_loss"
    assert server.post("/api/speed", {"linear": 0.2, "angular": 0.0})[0] == 409  # nothing resumes by itself
    wait_until(lambda: abs(server.state()["values"]["linear_m_s"]) < 1e-3, 5, "at rest")


def test_killed_runtime_shows_a_fault_and_comes_back_idle(server: ServerProc) -> None:
    drive(server, 0.3)
    old = children(server)
    with Heartbeat(server, 0.05):
        wait_until(lambda: moving(server), 5, "rover moving")
        os.kill(old["runtime"], signal.SIGKILL)
        down = wait_until(lambda: (lambda s: s if s["state"] == "fault" else None)(server.state()), 5,
                          "the gateway reports the runtime down")
    assert down["cause"]["trigger"] == "runtime_down" and "runtime down" in down["cause"]["message"]
    status, body = server.post("/api/start")
    assert status == 503 and body["error"]["code"] == "runtime_down"
    status, body = server.post("/api/estop")  # the e-stop is still answered, never refused
    assert status == 200
    wait_until(lambda: children(server).get("runtime") not in (None, old["runtime"]), 15, "a new runtime")
    wait_until(lambda: server.state()["state"] == "idle", 20, "the robot back, idle")
    assert server.state()["values"]["linear_m_s"] == pytest.approx(0.0, abs=1e-3)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_both_halt_first_and_leaves_no_process(server: ServerProc, sig: int) -> None:
    drive(server, 0.3)
    kids = children(server)
    server.proc.send_signal(sig)
    assert server.proc.wait(20) == 0
    wait_until(lambda: not any(alive(p) for p in kids.values()), 10, "both children gone")
    out = "".join(server.drain())
    assert out.index("halting the robot first") < out.index("sim driver closed")
    assert "shutdown: server shutting down: robot halted" in out


def test_a_killed_launcher_leaves_no_orphan(server: ServerProc) -> None:
    drive(server, 0.3)
    kids = children(server)
    server.proc.kill()
    server.proc.wait(10)
    wait_until(lambda: not any(alive(p) for p in kids.values()), 15, "children gone after the launcher died")


def test_console_drives_the_runtime_without_the_gateway(server_factory) -> None:
    # each call is a new Python process (0.3–1 s to start on a loaded machine): with the default 0.5 s link
    # timeout the runtime e-stopped between 'start' and 'setpoint'. The console is under test, not the watchdog.
    server = server_factory({"safety": {"command_timeout_s": 10.0}})
    sock = socket_path(server)

    def call(method: str, params: str = "{}") -> dict:  # takes control: only the holder's commands keep it alive
        out = subprocess.run([sys.executable, "-m", "server.console", "--socket", sock, "call", "--control", method,
                              params],
                             cwd=REPO, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert call("start")["state"] == "running"
    assert call("setpoint", '{"setpoint": {"linear": 0.2, "angular": 0.0}, "source": "console"}')["state"] == "running"
    assert server.state()["setpoint"]["source"] == "console"
    bad = subprocess.run([sys.executable, "-m", "server.console", "--socket", sock, "call", "setpoint",
                          '{"setpoint": {"linear": 9, "angular": 0}}'], cwd=REPO, capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 1 and "out_of_limits" in bad.stderr  # the runtime refuses out of its limits too
    watch = subprocess.run([sys.executable, "-m", "server.console", "--socket", sock, "watch", "--count", "3"],
                           cwd=REPO, capture_output=True, text=True, timeout=30)
    assert watch.returncode == 0 and len([ln for ln in watch.stdout.splitlines() if ln.startswith("#")]) == 3
    assert call("estop")["state"] == "estop"


def test_a_line_a_harness_reads_is_one_write(monkeypatch) -> None:
    """The children of ``python -m server`` share its unbuffered pipe: a line is written whole, newline included, so a
    log line of another process cannot land between a URL's port and its newline (a hub restart in a 3-worker run
    printed ``...:38003`` then a recovery warning on the same line, and the harness read the port as the warning)."""
    from server.procutil import say_line

    writes: list[str] = []

    class Out:
        def write(self, text: str) -> None:
            writes.append(text)

        def flush(self) -> None:
            writes.append("<flush>")

    monkeypatch.setattr("sys.stdout", Out())
    say_line("teleop listening on http://127.0.0.1:38003", "teleop local mode")
    assert writes == ["teleop listening on http://127.0.0.1:38003\n", "teleop local mode\n", "<flush>"]


def test_console_watch_prints_exactly_count_snapshots(tmp_path) -> None:
    """``watch --count 3`` printed a fourth snapshot on a loaded machine: the reader thread went on printing what
    came after the third until the main thread woke to close the socket. Here a runtime stand-in sends ten at once."""
    import threading

    from server.runtime_api import protocol

    path = str(tmp_path / "rt.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def runtime() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(protocol.encode({"type": "hello", "protocol": protocol.PROTOCOL, "version": protocol.VERSION}))
            protocol.read_frame_sync(conn)  # the console's hello
            request, _ = protocol.read_frame_sync(conn)  # subscribe
            snaps = b"".join(protocol.encode({"type": "snapshot"}, json.dumps({"seq": i, "state": "idle"}).encode())
                             for i in range(10))
            conn.sendall(protocol.encode({"type": "response", "id": request["id"], "result": {}}) + snaps)
            try:
                while conn.recv(4096):
                    pass
            except OSError:
                pass

    thread = threading.Thread(target=runtime, daemon=True)
    thread.start()
    try:
        watch = subprocess.run([sys.executable, "-m", "server.console", "--socket", path, "watch", "--count", "3"],
                               cwd=REPO, capture_output=True, text=True, timeout=30)
    finally:
        listener.close()
    assert watch.returncode == 0, watch.stderr
    assert [ln.split()[0] for ln in watch.stdout.splitlines()] == ["#0", "#1", "#2"], watch.stdout
