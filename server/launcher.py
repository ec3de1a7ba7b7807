"""``python -m server``: start the robot runtime and the web gateway, print one URL, keep both up.

Three processes (docs/architecture.md):

* this launcher: validates the whole profile, binds the listening TCP socket (so the port
  is the same for every gateway it starts, and connections wait in the backlog while a
  gateway restarts), starts the children and restarts either one when it dies, with
  exponential backoff;
* the runtime (``python -m server.runtime``): driver, supervisor, control loop; it stops the
  robot by itself when the gateway goes silent (link loss);
* the gateway (``python -m server.gateway``): aiohttp, serving on the inherited socket.

Before anything starts it refuses (exit 2) to listen beyond loopback while no user exists
(anyone who reached the port could drive: docs/security.md), and checks the users file
and the TLS files of ``[auth]``.

SIGINT/SIGTERM: the runtime is stopped first (the robot halts, a ``shutdown`` event and a
last snapshot go out through the gateway), then the gateway (websockets close with 1001).
Both children ask the kernel to SIGTERM them if the launcher dies (``PR_SET_PDEATHSIG``),
so a ``kill -9`` of the launcher leaves no orphan and a halted robot.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from server.config import ConfigError, Profile
from server.procutil import say_line

log = logging.getLogger("teleop")

READY_TIMEOUT_S = 60.0
BACKOFF_INITIAL_S = 0.5
BACKOFF_MAX_S = 10.0
HEALTHY_AFTER_S = 30.0  # a child that lived this long starts its backoff over


class Child:
    """One supervised child process; its stdout is echoed and watched for the ready line."""

    def __init__(self, name: str, argv: list[str], ready_marker: str, pass_fds: tuple[int, ...] = ()) -> None:
        self.name = name
        self.argv = argv
        self.ready_marker = ready_marker
        self.pass_fds = pass_fds
        self.proc: subprocess.Popen | None = None
        self.ready = threading.Event()
        self.ready_line = ""
        self.started_t = 0.0
        self.restarts = 0
        self.backoff_s = BACKOFF_INITIAL_S
        self.next_start_t = 0.0

    def start(self) -> None:
        self.ready.clear()
        # a session of its own: a Ctrl-C at the terminal reaches only the launcher, which stops the
        # runtime first and the gateway after (it dies with the launcher anyway: PR_SET_PDEATHSIG)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1,
                                     pass_fds=self.pass_fds, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                     start_new_session=True)
        self.started_t = time.monotonic()
        threading.Thread(target=self._pump, args=(self.proc,), name=f"{self.name}-stdout", daemon=True).start()

    def _pump(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if self.ready_marker in line and proc is self.proc:
                self.ready_line = line.strip()
                self.ready.set()
            else:
                sys.stdout.write(line)
                sys.stdout.flush()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> int | None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc else None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.error("%s did not stop within %.0f s of SIGTERM: killing it", self.name, timeout_s)
            proc.kill()
            return proc.wait(5)


class Launcher:
    def __init__(self, profile: Profile, config_path: str, overrides: list[str], host: str, port: int,
                 log_level: str) -> None:
        self.profile = profile
        self.config_path = config_path
        self.overrides = overrides
        self.host = host
        self.port = port
        self.log_level = log_level
        self._stop = threading.Event()
        self._tmpdir: str | None = None

    def _socket_path(self) -> str:
        configured = self.profile.server.runtime_socket
        if configured:
            return configured
        # a private directory per run: 0700, so only this user reaches the runtime
        self._tmpdir = tempfile.mkdtemp(prefix="teleop-")
        return str(Path(self._tmpdir) / "runtime.sock")

    def _common(self) -> list[str]:
        args = ["--config", self.config_path]
        if self.log_level:  # else each child takes its level from the profile
            args += ["--log-level", self.log_level]
        for item in self.overrides:
            args += ["--set", item]
        return args

    def _listen(self) -> socket.socket:
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(512)
        sock.set_inheritable(True)
        return sock

    def run(self) -> int:
        try:
            notice = check_trust(self.profile, self.host)
        except StartRefused as err:
            print(f"teleop: {err}", file=sys.stderr)
            return 2
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self._stop.set())
        try:
            listener = self._listen()
        except OSError as err:
            print(f"teleop: cannot listen on {self.host}:{self.port}: {err}", file=sys.stderr)
            return 3
        sock_path = self._socket_path()
        py = sys.executable
        runtime = Child("runtime", [py, "-m", "server.runtime", *self._common(), "--socket", sock_path],
                        "teleop runtime ready on")
        gateway = Child("gateway", [py, "-m", "server.gateway", *self._common(), "--socket", sock_path,
                                    "--fd", str(listener.fileno()), "--host", self.host], "teleop gateway serving on",
                        pass_fds=(listener.fileno(),))
        children = (runtime, gateway)
        try:
            # both at once: the gateway's start-up waits for the runtime's socket (retrying), so its imports and
            # set-up overlap the runtime's (a start ~0.8 s sooner); the runtime is still the one waited for first
            for child in children:
                child.start()
            for child in children:
                if not self._wait_ready(child):
                    code = child.proc.poll() if child.proc else None
                    if code is None:
                        print(f"teleop: the {child.name} did not start within {READY_TIMEOUT_S:.0f} s", file=sys.stderr)
                        return 3
                    return code or 3
            bound = listener.getsockname()
            shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            log.info("runtime API on %s (python -m server.console --socket %s)", sock_path, sock_path)
            scheme = "https" if self.profile.auth.tls_enabled else "http"
            say_line(f"teleop listening on {scheme}://{shown}:{bound[1]}", f"teleop {notice}")
            while not self._stop.wait(0.1):
                for child in children:
                    self._supervise(child)
            log.info("shutting down: halting the robot first")
            return 0
        finally:
            runtime.stop()  # the robot halts first; its last snapshot goes out through the gateway
            gateway.stop()
            listener.close()
            if self._tmpdir:
                shutil.rmtree(self._tmpdir, ignore_errors=True)

    def _wait_ready(self, child: Child) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not child.ready.wait(0.05):
            if self._stop.is_set() or not child.alive() or time.monotonic() > deadline:
                return False
        return True

    def _supervise(self, child: Child) -> None:
        if child.alive():
            if child.backoff_s > BACKOFF_INITIAL_S and time.monotonic() - child.started_t > HEALTHY_AFTER_S:
                child.backoff_s = BACKOFF_INITIAL_S
            return
        now = time.monotonic()
        if child.next_start_t == 0.0:  # it just died: schedule the restart
            code = child.proc.returncode if child.proc else None
            child.next_start_t = now + child.backoff_s
            log.error("the %s exited (status %s); restarting it in %.1f s", child.name, code, child.backoff_s)
            child.backoff_s = min(child.backoff_s * 2, BACKOFF_MAX_S)
            return
        if now >= child.next_start_t:
            child.next_start_t = 0.0
            child.restarts += 1
            child.start()
            log.info("%s restarted (%d restart(s))", child.name, child.restarts)


class StartRefused(Exception):
    """Starting would be unsafe or cannot work (the message says why and what to do)."""


def check_trust(profile: Profile, host: str) -> str:
    """The ``[auth]`` checks the gateway would fail, made before anything listens; returns the
    start-up notice (local mode and how to add users, or how many users)."""
    from server.gateway.auth.net import BindRefused, check_bind
    from server.gateway.auth.tls import TlsError, ssl_context
    from server.gateway.auth.users import UsersFileError, UserStore, startup_notice

    users = UserStore(profile.auth.users_file)
    try:
        users.load()
        check_bind(host, users.configured)
        ssl_context(profile.auth, [host])  # makes the self-signed pair when asked to
    except (BindRefused, UsersFileError, TlsError) as err:
        raise StartRefused(str(err)) from None
    return startup_notice(users)


__all__ = ["ConfigError", "Launcher", "StartRefused", "check_trust"]
