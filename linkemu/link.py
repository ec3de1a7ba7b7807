"""An emulated network link between a *robot* and an *operator*, each in its own network namespace.

::

    robot ns                    middle ns                                   operator ns
    10.77.1.2 link0 ─veth─ to-robot ─▶ [tbf] uplink TUN ─▶ delay line ─▶ to-operator ─veth─ link0 10.77.2.2
                           to-robot ◀─ delay line ◀─ downlink TUN [tbf] ◀─ to-operator
    nft input: downlink loss                                             nft input: uplink loss

The middle namespace routes by incoming interface (``ip rule iif``): what comes from the robot
goes into the ``uplink`` TUN device, what comes from the operator into ``downlink``; the
delay line (:mod:`linkemu.delayline`, its own process, real-time priority when granted)
holds each packet and writes it back into the same device, and the kernel routes it on by
destination. Each direction therefore has its own bottleneck queue (``tbf`` on the TUN
device), delay, jitter, bursts and blackouts; random loss is an nftables rule on the
receiving namespace's input hook. Nothing has a route out of the three namespaces.

Use::

    with Link("4g") as link:
        server = link.popen_in("robot", ["python", "-m", "server", "--host", link.robot_ip, ...])
        with link.netns("operator"):          # this thread's new sockets are the operator's
            urllib.request.urlopen(f"http://{link.robot_ip}:8080/api/state")
        link.blackout(3.0)                    # both directions dark for 3 s, from now
        link.stall(0.4)                       # everything held 0.4 s, then delivered in order
        link.set_profile("bad")               # live, without a restart
        link.block_udp()                      # a firewall that passes TCP only (link.block_udp(False) undoes it)

Clean-up: :meth:`close` (also at interpreter exit, and by ``with``) stops the delay line, kills
whatever still runs in the three namespaces and deletes them; a run that died without
closing is swept by the next :meth:`start` on the machine (:func:`linkemu.netns.remove_stale`).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import select
import shlex
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from linkemu import control, netns, shaping
from linkemu.profiles import Profile, profile as lookup_profile
from linkemu.requirements import missing

log = logging.getLogger("linkemu")

T = TypeVar("T")

ROBOT_IP, ROBOT_GATEWAY = "10.77.1.2", "10.77.1.1"
OPERATOR_IP, OPERATOR_GATEWAY = "10.77.2.2", "10.77.2.1"
PREFIX_LEN = 24
VETH = "link0"  # the robot's and the operator's one interface
MIDDLE_TO = {"robot": "to-robot", "operator": "to-operator"}
TUN = {"uplink": "uplink", "downlink": "downlink"}
ROUTE_TABLE = {"uplink": 101, "downlink": 102}
START_TIMEOUT_S = 20.0
CONTROL_TIMEOUT_S = 10.0
PACKAGE_ROOT = Path(__file__).resolve().parent.parent

_numbers = itertools.count()
_open_links: "weakref.WeakSet[Link]" = weakref.WeakSet()


class LinkError(RuntimeError):
    """The link cannot be built here, or a change to it failed."""


def _close_all() -> None:
    for link in list(_open_links):
        if link.owner_pid == os.getpid():  # a forked child exiting must not tear down its parent's links
            with contextlib.suppress(Exception):
                link.close()


atexit.register(_close_all)


class Link:
    """Three namespaces and the delay line between them. ``profile``: a name from
    :data:`linkemu.PROFILES` or a :class:`~linkemu.profiles.Profile`; ``nat``: the middle is a NAT
    router (the robot can dial out, the operator cannot dial in, and sees the robot's traffic
    from ``10.77.2.1``); ``seed``: makes jitter and bursts reproducible (nftables' random loss
    never is); ``realtime``: run the delay line at ``SCHED_FIFO`` 1 when granted."""

    def __init__(self, profile: str | Profile = "lan", *, nat: bool = False, seed: int | None = None,
                 prefix: str | None = None, realtime: bool = True) -> None:
        self._profile = lookup_profile(profile)
        self.nat = nat
        self.seed = seed
        self.realtime = realtime
        self.prefix = prefix or os.environ.get("LINKEMU_PREFIX") or netns.DEFAULT_PREFIX
        number = next(_numbers)
        self.owner_pid = os.getpid()
        #: side ("robot", "middle", "operator") → namespace name
        self.names = {side: netns.name_for(self.prefix, os.getpid(), number, side) for side in netns.SIDES}
        self.delayline_info: dict[str, Any] = {}
        self._delayline: subprocess.Popen | None = None
        self._delayline_log: Any = None
        self._lock = threading.RLock()
        self._wrappers: tempfile.TemporaryDirectory | None = None
        self._started = False
        self._udp_blocked = False

    # ------------------------------------------------------------------ addresses
    robot_ip = ROBOT_IP
    operator_ip = OPERATOR_IP

    @property
    def robot_ip_seen_by_operator(self) -> str:
        """Where the operator sees the robot's packets come from (the NAT's address with ``nat``)."""
        return OPERATOR_GATEWAY if self.nat else ROBOT_IP

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> "Link":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Link {self._profile.name} {self.names['middle']}{' nat' if self.nat else ''}>"

    @property
    def alive(self) -> bool:
        return self._started and self._delayline is not None and self._delayline.poll() is None

    def start(self) -> "Link":
        problems = missing()
        if problems:
            raise LinkError("cannot emulate a link here: " + "; ".join(problems))
        netns.remove_stale()
        netns.guard_root_route()
        _open_links.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        self._started = True
        log.info("link %s up: robot %s in %s, operator %s in %s", self._profile.name, ROBOT_IP,
                 self.names["robot"], OPERATOR_IP, self.names["operator"])
        return self

    def _build(self) -> None:
        robot, middle, operator = (self.names[s] for s in netns.SIDES)
        for name in (robot, middle, operator):
            netns.add(name)
        # before any device exists, so the veths and TUNs take these defaults: no IPv6 chatter on
        # the link (lo keeps ::1), and in the middle no reverse-path filter (what the delay line
        # writes back arrives on a TUN with a source routed elsewhere) and, for NAT, local sources
        for name in (robot, operator):
            self._sysctl(name, {"ipv6/conf/default/disable_ipv6": 1})
        self._sysctl(middle, {"ipv6/conf/default/disable_ipv6": 1, "ipv4/ip_forward": 1,
                              "ipv4/conf/all/rp_filter": 0, "ipv4/conf/default/rp_filter": 0,
                              "ipv4/conf/all/accept_local": 1})
        self._ip(middle, [
            "link set lo up",
            f"link add {MIDDLE_TO['robot']} type veth peer name {VETH} netns {robot}",
            f"link add {MIDDLE_TO['operator']} type veth peer name {VETH} netns {operator}",
            f"addr add {ROBOT_GATEWAY}/{PREFIX_LEN} dev {MIDDLE_TO['robot']}",
            f"addr add {OPERATOR_GATEWAY}/{PREFIX_LEN} dev {MIDDLE_TO['operator']}",
            f"link set {MIDDLE_TO['robot']} up",
            f"link set {MIDDLE_TO['operator']} up",
        ])
        for name, ip, gateway in ((robot, ROBOT_IP, ROBOT_GATEWAY), (operator, OPERATOR_IP, OPERATOR_GATEWAY)):
            self._ip(name, ["link set lo up", f"addr add {ip}/{PREFIX_LEN} dev {VETH}", f"link set {VETH} up",
                            f"route add default via {gateway}"])
        self._start_delayline()
        self._ip(middle, [
            f"link set {TUN['uplink']} up",
            f"link set {TUN['downlink']} up",
            f"rule add iif {MIDDLE_TO['robot']} lookup {ROUTE_TABLE['uplink']} pref 100",
            f"rule add iif {MIDDLE_TO['operator']} lookup {ROUTE_TABLE['downlink']} pref 101",
            f"route add default dev {TUN['uplink']} table {ROUTE_TABLE['uplink']}",
            f"route add default dev {TUN['downlink']} table {ROUTE_TABLE['downlink']}",
        ])
        if self.nat:
            self._nft(middle, shaping.nat_script(MIDDLE_TO["robot"], MIDDLE_TO["operator"], TUN["uplink"],
                                                 (TUN["uplink"], TUN["downlink"]), OPERATOR_GATEWAY))
        self._apply(self._profile)

    def _start_delayline(self) -> None:
        argv = [sys.executable, "-m", "linkemu.delayline", TUN["uplink"], TUN["downlink"]]
        if not self.realtime:
            argv.append("--no-realtime")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_ROOT),
                                                                         os.environ.get("PYTHONPATH")])))
        self._delayline_log = tempfile.TemporaryFile()
        self._delayline = subprocess.Popen(netns.command(self.names["middle"], argv), stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=self._delayline_log, env=env)
        ready = self._read_reply(START_TIMEOUT_S)
        self.delayline_info = ready.data or {}

    def close(self) -> None:
        """Stop the delay line, kill what runs in the namespaces, delete them. Idempotent."""
        with self._lock:
            proc, self._delayline = self._delayline, None
            if proc is not None:
                if proc.poll() is None:
                    with contextlib.suppress(OSError, ValueError):
                        proc.stdin.write(control.encode(control.Exit()))
                        proc.stdin.flush()
                for pipe in (proc.stdin, proc.stdout):
                    with contextlib.suppress(OSError):
                        pipe.close()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            errors = []
            for name in self.names.values():
                try:
                    netns.delete(name)
                except netns.NetnsError as err:
                    errors.append(str(err))
            if self._delayline_log is not None:
                self._delayline_log.close()
                self._delayline_log = None
            if self._wrappers is not None:
                self._wrappers.cleanup()
                self._wrappers = None
            self._started = False
            _open_links.discard(self)
            netns.release_root_route()
            if errors:
                raise LinkError("; ".join(errors))

    # ------------------------------------------------------------------ the profile, live
    @property
    def profile(self) -> Profile:
        return self._profile

    def set_profile(self, profile: str | Profile) -> None:
        """Take a new profile now, without a restart (queued packets keep the release times they had;
        a burst in progress continues if the burst parameters are unchanged)."""
        new = lookup_profile(profile)
        with self._lock:
            self._require_up()
            self._apply(new)

    def _apply(self, p: Profile) -> None:
        middle = self.names["middle"]
        lines = [line for which in ("uplink", "downlink") for line in shaping.tc_lines(TUN[which], p.direction(which))]
        netns.run(["tc", "-n", middle, "-b", "-"], stdin="\n".join(lines) + "\n")
        # random loss where the packet arrives: uplink at the operator, downlink at the robot
        self._nft(self.names["operator"], shaping.loss_script(VETH, p.uplink.loss))
        self._nft(self.names["robot"], shaping.loss_script(VETH, p.downlink.loss))
        self._call(control.Configure(profile=p, seed=self.seed))
        self._profile = p

    # ------------------------------------------------------------------ a firewall that passes TCP only
    @property
    def udp_blocked(self) -> bool:
        return self._udp_blocked

    def block_udp(self, blocked: bool = True) -> None:
        """Drop every UDP packet between the two sides (``False``: let them through again), live; TCP and
        ICMP pass. Kept across :meth:`set_profile`; counted in ``stats()["udp"]``."""
        with self._lock:
            self._require_up()
            self._nft(self.names["middle"], shaping.udp_block_script(
                bool(blocked), (MIDDLE_TO["robot"], MIDDLE_TO["operator"])))
            self._udp_blocked = bool(blocked)

    def _udp_dropped(self) -> int:
        out = netns.call_in(self.names["middle"], netns.run,
                            ["nft", "-j", "list", "counter", "inet", f"{shaping.TABLE}_udp", "udp_dropped"])
        for item in json.loads(out).get("nftables", []):
            if "counter" in item:
                return int(item["counter"]["packets"])
        return 0

    # ------------------------------------------------------------------ a port forward through the NAT
    def forward_tcp(self, port: int) -> str:
        """With ``nat``: forward TCP ``port`` of the NAT's public address to the robot's (a router's port
        forward: the dashboard reachable from outside, nothing else, UDP still inbound-blocked). Returns the
        address the operator dials (``http://<it>:<port>``)."""
        if not self.nat:
            raise LinkError("forward_tcp needs a NAT link (Link(nat=True)); without one the robot is reachable")
        if not 0 < int(port) < 65536:
            raise ValueError(f"port must be 1..65535, not {port!r}")
        with self._lock:
            self._require_up()
            self._nft(self.names["middle"], shaping.tcp_forward_script(
                MIDDLE_TO["operator"], OPERATOR_GATEWAY, ROBOT_IP, int(port)))
        return OPERATOR_GATEWAY

    # ------------------------------------------------------------------ blackouts
    def blackout(self, duration_s: float | None = None, direction: str = "both") -> None:
        """Go dark now: every packet of ``direction`` ("both", "uplink", "downlink") is lost, for
        ``duration_s`` (timed by the delay line itself) or until :meth:`end_blackout`."""
        self._check_direction(direction)
        self._call(control.Blackout(on=True, duration_s=duration_s, direction=direction))

    def end_blackout(self, direction: str = "both") -> None:
        self._check_direction(direction)
        self._call(control.Blackout(on=False, direction=direction))

    def stall(self, duration_s: float, direction: str = "both") -> float:
        """Hold every packet of ``direction`` for ``duration_s`` from now, then release them in order:
        nothing is lost, what was sent meanwhile arrives in a burst (a radio's link-layer retries, a
        handover that buffers). Returns at once: the delay line's ``time.monotonic()`` when the stall began
        (the caller's own clock on this machine; the answer may come later than that on a loaded one)."""
        self._check_direction(direction)
        return float(self._call(control.Stall(duration_s=duration_s, direction=direction)).data["now"])

    @contextlib.contextmanager
    def dark(self, direction: str = "both") -> Iterator[None]:
        """A blackout for the duration of the block."""
        self.blackout(None, direction)
        try:
            yield
        finally:
            self.end_blackout(direction)

    @staticmethod
    def _check_direction(direction: str) -> None:
        if direction not in ("both", "uplink", "downlink"):
            raise ValueError(f"direction is 'both', 'uplink' or 'downlink', not {direction!r}")

    # ------------------------------------------------------------------ counters
    def stats(self) -> dict[str, dict[str, Any]]:
        """Per direction: the delay line's counters (``received``, ``passed``, ``lost_bursts``,
        ``lost_blackout``, ``in_flight``, ``dark``) and ``lost_random`` (nftables, since start); and
        ``udp``: ``blocked``, ``dropped`` (:meth:`block_udp`; dropped since it was switched on)."""
        data = self._call(control.Stats()).data or {}
        for which, side in (("uplink", "operator"), ("downlink", "robot")):
            data[which]["lost_random"] = self._lost_random(side)
        data["udp"] = {"blocked": self._udp_blocked, "dropped": self._udp_dropped() if self._udp_blocked else 0}
        return data

    def queued_bytes(self, direction: str) -> int:
        """What waits in ``direction``'s bottleneck queue now (its qdisc's backlog), bytes: a test waits on it
        for a flood to have filled the queue."""
        if direction not in ("uplink", "downlink"):
            raise ValueError(f"direction is 'uplink' or 'downlink', not {direction!r}")
        out = netns.run(["tc", "-n", self.names["middle"], "-s", "-j", "qdisc", "show", "dev", TUN[direction]])
        return sum(int(q.get("backlog", 0)) for q in json.loads(out or "[]") if q.get("root"))

    def _lost_random(self, side: str) -> int:
        out = netns.call_in(self.names[side], netns.run,
                            ["nft", "-j", "list", "counter", "inet", shaping.TABLE, "lost"])
        for item in json.loads(out).get("nftables", []):
            if "counter" in item:
                return int(item["counter"]["packets"])
        return 0

    # ------------------------------------------------------------------ being inside
    def _ns(self, side: str) -> str:
        try:
            return self.names[side]
        except KeyError:
            raise ValueError(f"a side is one of {', '.join(netns.SIDES)}, not {side!r}") from None

    def netns(self, side: str) -> contextlib.AbstractContextManager[None]:
        """The calling thread inside ``side``'s namespace for a ``with`` block: sockets it makes there
        (urllib, aiohttp, websockets, socket) belong to that side for good."""
        return netns.entered(self._ns(side))

    def call_in(self, side: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a fresh thread inside ``side`` (e.g. ``call_in("operator",
        asyncio.run, client())``); returns its result, raises its exception."""
        return netns.call_in(self._ns(side), fn, *args, **kwargs)

    def socket_in(self, side: str, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM,  # noqa: A002
                  proto: int = 0) -> socket.socket:
        """A new socket in ``side``'s network (use it from any thread)."""
        with self.netns(side):
            return socket.socket(family, type, proto)

    def command_in(self, side: str, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run inside ``side`` (``ip netns exec``; the process keeps its PID)."""
        return netns.command(self._ns(side), list(argv))

    def popen_in(self, side: str, argv: list[str], **popen_kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(self.command_in(side, argv), **popen_kwargs)

    def run_in(self, side: str, argv: list[str], **run_kwargs: Any) -> subprocess.CompletedProcess:
        return subprocess.run(self.command_in(side, argv), **run_kwargs)

    def wrapper(self, side: str, executable: str) -> str:
        """The path of an executable script that runs ``executable`` (with its arguments) inside
        ``side``: for tools that only take a program path, such as Playwright's
        ``executable_path`` (it talks to Chromium over inherited pipes, which the wrapper keeps)."""
        with self._lock:
            if self._wrappers is None:
                self._wrappers = tempfile.TemporaryDirectory(prefix=f"{self.names['middle']}-")
            path = Path(self._wrappers.name) / f"{side}-{Path(executable).name}"
            path.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in self.command_in(side, [executable]))
                            + ' "$@"\n')
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            return str(path)

    # ------------------------------------------------------------------ plumbing
    def _require_up(self) -> None:
        if not self.alive:
            raise LinkError(f"{self!r} is not up" + (f": the delay line exited: {self._delayline_stderr()}"
                                                      if self._delayline is not None else ""))

    def _call(self, request: control.Request) -> control.Reply:
        with self._lock:
            if self._delayline is None or self._delayline.poll() is not None:
                raise LinkError(f"the delay line of {self!r} is not running: {self._delayline_stderr()}")
            try:
                self._delayline.stdin.write(control.encode(request))
                self._delayline.stdin.flush()
            except OSError as err:
                raise LinkError(f"the delay line of {self!r} went away: {self._delayline_stderr()}") from err
            return self._read_reply(CONTROL_TIMEOUT_S)

    def _read_reply(self, timeout_s: float) -> control.Reply:
        proc = self._delayline
        assert proc is not None and proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        line = proc.stdout.readline() if ready else b""
        if not line:
            raise LinkError(f"no answer from the delay line of {self!r} within {timeout_s} s: "
                            f"{self._delayline_stderr()}")
        reply = control.decode_reply(line)
        if not reply.ok:
            raise LinkError(f"the delay line refused: {reply.error}")
        return reply

    def _delayline_stderr(self) -> str:
        f = self._delayline_log
        if f is None:
            return "(no log)"
        f.seek(0)
        text = f.read().decode(errors="replace").strip()
        return text[-2000:] or "(nothing on stderr)"

    @staticmethod
    def _ip(name: str, lines: list[str]) -> None:
        netns.run(["ip", "-n", name, "-b", "-"], stdin="\n".join(lines) + "\n")

    @staticmethod
    def _nft(name: str, script: str) -> None:
        netns.call_in(name, netns.run, ["nft", "-f", "-"], stdin=script)

    @staticmethod
    def _sysctl(name: str, values: dict[str, int]) -> None:
        def write() -> None:
            for key, value in values.items():
                Path("/proc/sys/net", key).write_text(f"{value}\n")

        netns.call_in(name, write)
