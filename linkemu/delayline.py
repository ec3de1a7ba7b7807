"""The delay line: one process in the middle namespace holding each direction's packets for their
one-way delay, with jitter (order kept), Gilbert–Elliott bursts, blackouts and stalls — the part of a
link the kernel here cannot do (no ``sch_netem``), after mahimahi's mm-delay.

``python -m linkemu.delayline UPLINK_DEV DOWNLINK_DEV`` (started by :class:`~linkemu.link.Link`
through ``ip netns exec``) opens one TUN device per direction. Routing in the middle namespace
sends what arrives from the robot into the uplink device and what arrives from the operator
into the downlink device; this process reads each packet, decides its fate and release time,
and writes it back into the *same* device, where the kernel receives it and routes it on by
destination. The tbf bottleneck queue sits on the device, before this process, so a packet
queues first and then travels, as on a real path.

One thread, one ``select`` over the two devices and stdin (the control protocol,
:mod:`linkemu.control`), sleeping until the next release time. The process asks for
``SCHED_FIFO`` priority 1: measured on this 2-core VM at load 12, a 2 ms ``select`` overslept
0.05 / 1.0 / 1.5 ms (p50 / p99 / max) at that priority and 0.11 / 22 / 134 ms at normal
priority, which would have added the machine's load to every packet's delay.

Each direction is a FIFO released from its head only, so order is kept by construction;
release times are made non-decreasing (a packet drawn a shorter delay than its predecessor
leaves right after it), so the head is always the next packet due. A packet is lost to a
blackout if the link is dark when it arrives *or* when it would leave (it was in the air); a
stall holds the head, and so everything, until it ends.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import select
import sys
import time
from collections import deque

import msgspec

from linkemu import control
from linkemu.gilbert_elliott import LossChain
from linkemu.profiles import Blackouts, Direction
from linkemu.tun import open_tun

log = logging.getLogger("linkemu.delayline")

MAX_PACKET = 65535
REALTIME_PRIORITY = 1  # the lowest real-time priority: above every normal task, below the robot's loop (50)


class Darkness:
    """When a direction is dark: one-off blackouts from the API and the profile's schedule."""

    def __init__(self) -> None:
        self.until = 0.0  # monotonic end of a one-off blackout; math.inf: until told otherwise
        self.schedule: Blackouts | None = None
        self.schedule_t0 = 0.0

    def set_schedule(self, schedule: Blackouts | None, now: float) -> None:
        self.schedule, self.schedule_t0 = schedule, now

    def dark(self, now: float) -> bool:
        if now < self.until:
            return True
        s = self.schedule
        if s is None:
            return False
        since = now - self.schedule_t0 - s.first_s
        if since < 0:
            return False
        if s.every_s is None:
            return since < s.off_s
        return since % s.every_s < s.off_s


class Lane:
    """One direction: its TUN descriptor, the packets in flight and its counters."""

    def __init__(self, name: str, fd: int) -> None:
        self.name = name
        self.fd = fd
        self.queue: deque[tuple[float, bytes]] = deque()
        self.last_release = 0.0
        self.delay_s = 0.0
        self.jitter_s = 0.0
        self.rng = random.Random()
        self.chain: LossChain | None = None
        self.darkness = Darkness()
        self.held_until = 0.0  # a stall: nothing leaves before this (monotonic s)
        self.counts = {"received": 0, "passed": 0, "lost_bursts": 0, "lost_blackout": 0, "write_errors": 0}

    def configure(self, d: Direction, rng: random.Random, schedule: Blackouts | None, now: float) -> None:
        self.delay_s, self.jitter_s, self.rng = d.delay_s, d.jitter_s, rng
        # a new chain only if the parameters changed: a live profile change keeps a burst in progress
        if d.bursts is None:
            self.chain = None
        elif self.chain is None or self.chain.params != d.bursts:
            self.chain = LossChain(d.bursts, rng)
        else:
            self.chain.rng = rng
        self.darkness.set_schedule(schedule, now)

    def receive(self, now: float) -> None:
        """Take every packet waiting on the device."""
        while True:
            try:
                packet = os.read(self.fd, MAX_PACKET)
            except BlockingIOError:
                return
            self.counts["received"] += 1
            if self.darkness.dark(now):
                self.counts["lost_blackout"] += 1
                continue
            if self.chain is not None and self.chain.lose():
                self.counts["lost_bursts"] += 1
                continue
            delay = self.delay_s
            if self.jitter_s:
                delay = max(0.0, delay + self.rng.uniform(-self.jitter_s, self.jitter_s))
            release = max(now + delay, self.last_release)
            self.last_release = release
            self.queue.append((release, packet))

    def release(self, now: float) -> None:
        """Write back every packet that is due."""
        queue = self.queue
        if now < self.held_until:
            return
        while queue and queue[0][0] <= now:
            _, packet = queue.popleft()
            if self.darkness.dark(now):
                self.counts["lost_blackout"] += 1
                continue
            try:
                os.write(self.fd, packet)
                self.counts["passed"] += 1
            except OSError:  # the device went down under us (teardown)
                self.counts["write_errors"] += 1

    def next_due(self) -> float:
        return max(self.queue[0][0], self.held_until) if self.queue else math.inf

    def stats(self, now: float) -> dict:
        return {**self.counts, "in_flight": len(self.queue), "dark": self.darkness.dark(now)}


class DelayLine:
    def __init__(self, uplink_fd: int, downlink_fd: int, control_in: int, control_out) -> None:
        self.lanes = {"uplink": Lane("uplink", uplink_fd), "downlink": Lane("downlink", downlink_fd)}
        self.control_in = control_in
        self.control_out = control_out
        self._pending = b""
        self.running = True

    # ------------------------------------------------------------------ control
    def _lanes(self, which: str) -> list[Lane]:
        return list(self.lanes.values()) if which == "both" else [self.lanes[which]]

    def handle(self, request: control.Request) -> control.Reply:
        now = time.monotonic()
        if isinstance(request, control.Configure):
            seed = request.seed
            for i, (name, lane) in enumerate(self.lanes.items()):
                rng = random.Random(None if seed is None else seed * 2 + i)
                lane.configure(request.profile.direction(name), rng, request.profile.blackouts, now)
            return control.Reply(ok=True)
        if isinstance(request, control.Blackout):
            lanes = self._lanes(request.direction)
            if request.on and request.duration_s is not None and not (
                    math.isfinite(request.duration_s) and request.duration_s > 0):
                return control.Reply(ok=False, error=f"duration_s must be > 0, got {request.duration_s!r}")
            for lane in lanes:
                if not request.on:
                    lane.darkness.until = 0.0
                elif request.duration_s is None:
                    lane.darkness.until = math.inf
                else:
                    lane.darkness.until = now + request.duration_s
            return control.Reply(ok=True, data={"now": now})
        if isinstance(request, control.Stall):
            if not (math.isfinite(request.duration_s) and request.duration_s > 0):
                return control.Reply(ok=False, error=f"duration_s must be > 0, got {request.duration_s!r}")
            for lane in self._lanes(request.direction):
                lane.held_until = now + request.duration_s
            return control.Reply(ok=True, data={"now": now})
        if isinstance(request, control.Stats):
            return control.Reply(ok=True, data={name: lane.stats(now) for name, lane in self.lanes.items()})
        self.running = False
        return control.Reply(ok=True)

    def read_control(self) -> None:
        chunk = os.read(self.control_in, 65536)
        if not chunk:  # the owner is gone
            self.running = False
            return
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                reply = self.handle(control.decode_request(line))
            except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as err:
                reply = control.Reply(ok=False, error=str(err))
            self.control_out.write(control.encode(reply))
            self.control_out.flush()

    # ------------------------------------------------------------------ packets
    def run(self) -> None:
        lanes = list(self.lanes.values())
        by_fd = {lane.fd: lane for lane in lanes}
        watched = [lane.fd for lane in lanes] + [self.control_in]
        while self.running:
            due = min(lane.next_due() for lane in lanes)
            timeout = None if due == math.inf else max(0.0, due - time.monotonic())
            ready, _, _ = select.select(watched, [], [], timeout)
            now = time.monotonic()
            for fd in ready:
                if fd == self.control_in:
                    self.read_control()
                else:
                    by_fd[fd].receive(now)
            now = time.monotonic()
            for lane in lanes:
                lane.release(now)


def try_realtime() -> str:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
    except (PermissionError, OSError, AttributeError) as err:
        return f"normal priority (SCHED_FIFO refused: {err})"
    return f"SCHED_FIFO {REALTIME_PRIORITY}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m linkemu.delayline", description=__doc__.split("\n\n")[0])
    ap.add_argument("uplink_dev")
    ap.add_argument("downlink_dev")
    ap.add_argument("--no-realtime", action="store_true", help="stay at normal priority")
    args = ap.parse_args(argv)
    logging.basicConfig(level="INFO", format="linkemu.delayline: %(message)s", stream=sys.stderr)
    priority = "normal priority (asked)" if args.no_realtime else try_realtime()
    up, down = open_tun(args.uplink_dev), open_tun(args.downlink_dev)
    line = DelayLine(up, down, sys.stdin.fileno(), sys.stdout.buffer)
    ready = control.Reply(ok=True, data={"pid": os.getpid(), "priority": priority,
                                         "devices": [args.uplink_dev, args.downlink_dev]})
    sys.stdout.buffer.write(control.encode(ready))
    sys.stdout.buffer.flush()
    line.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
