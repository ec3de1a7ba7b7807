"""A real recording for the replay tests: the simulated rover driven on the real server, and
``python -m server replay FILE`` as a child process (talked to like :class:`ServerProc`)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import tomli_w

from tests.conftest import DEFAULT_CONFIG, REPO, TEST_DEFAULTS, ServerProc, deep_merge, wait_until
from tests.server.test_stop_paths import Heartbeat


def write_config(directory: Path, overrides: dict) -> Path:
    base = tomllib.loads((REPO / DEFAULT_CONFIG).read_text())
    path = directory / "config.toml"
    path.write_text(tomli_w.dumps(deep_merge(deep_merge(base, TEST_DEFAULTS), overrides)))
    return path


def record_driven_run(directory: Path, drive_s: float = 4.0) -> Path:
    """Start the server recording into ``directory``, drive in a curve for about ``drive_s`` (as
    counted by recorded snapshots), e-stop for about a second, reset, stop; returns the finished file."""
    directory.mkdir(parents=True, exist_ok=True)
    # the link timeout is out of the way: this thread's heartbeats, late on a loaded machine, once let the robot
    # stop by link loss 0.5 s after the start, and the recording had no drive in it (a fresh-clone run)
    srv = ServerProc(write_config(directory, {"recording": {"dir": str(directory / "rec"), "flush_s": 0.2},
                                              "safety": {"command_timeout_s": 5.0}}))
    srv.start()
    try:
        file = srv.post("/api/recordings/start", {"name": "replay-me"})[1]["file"]
        with Heartbeat(srv, 0.1):
            assert srv.post("/api/start")[0] == 200
            assert srv.post("/api/speed", {"linear": 0.3, "angular": 0.4})[0] == 200
            n0 = srv.get("/api/recordings/status")[1]["messages"]
            wait_until(lambda: srv.get("/api/recordings/status")[1]["messages"] > n0 + drive_s * 50, 30,
                       "a driven stretch recorded")
            state = srv.state()
            assert state["state"] == "running" and state["values"]["linear_m_s"] > 0.1, state  # it drove
            assert srv.post("/api/estop", {"reason": "end of the drive"})[0] == 200
        wait_until(lambda: srv.state()["state"] == "estop", 10, "e-stopped")
        n1 = srv.get("/api/recordings/status")[1]["messages"]
        # a second of e-stop on record, so a replay shows it (the dashboard renders the newest snapshot only)
        wait_until(lambda: srv.get("/api/recordings/status")[1]["messages"] > n1 + 50, 10, "e-stop recorded")
        assert srv.post("/api/reset")[0] == 200
        n1 = srv.get("/api/recordings/status")[1]["messages"]
        wait_until(lambda: srv.get("/api/recordings/status")[1]["messages"] > n1 + 25, 10, "idle recorded")
        assert srv.post("/api/recordings/stop")[0] == 200
        wait_until(lambda: srv.get("/api/recordings/status")[1]["state"] == "idle", 10, "the file finished")
    finally:
        srv.stop()
    return directory / "rec" / file


class ReplayProc(ServerProc):
    """``python -m server replay FILE`` in a child process (same helpers as :class:`ServerProc`)."""

    def __init__(self, file: Path, config_path: Path, *extra: str) -> None:
        super().__init__(config_path)
        self.file = file
        self.extra = extra

    what = "replay"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "server", "replay", str(self.file), "--config", str(self.config_path),
                "--port", str(self.port), *self.extra]
