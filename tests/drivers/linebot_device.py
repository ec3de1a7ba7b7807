"""The robot of docs/drivers.md's worked example, emulated: the line protocol over a pty or TCP.

``M <left> <right>`` sets the wheel speeds (rad/s; each wheel follows with a 50 ms lag), ``S`` stops them at
once, and a robot that hears no ``M`` for 0.5 s stops by itself (its own watchdog, as the docs advise).
Every 50 ms it reports ``T <ms> <left> <right> <battery_v> <range_m>``: the range is to a wall ``wall_m`` ahead
of its start, closing as it drives forward on 5 cm wheels. ``inject("silent")`` stops its reports,
``inject("fault")`` sends ``E motor driver overheated``, ``inject("clear")`` heals both. Deterministic: time is
passed in (:class:`sim.devices.pty.PtyRunner`, :class:`sim.devices.net.TcpRunner` own the clock).
"""

from __future__ import annotations

import math

REPORT_S = 0.05
WATCHDOG_S = 0.5
TAU_S = 0.05
WHEEL_RADIUS_M = 0.05


class LineBot:
    runs_without_host = True

    def __init__(self, wall_m: float = 3.0) -> None:
        self.wall_m = wall_m
        self.x_m = 0.0
        self.wheels = [0.0, 0.0]
        self.target = [0.0, 0.0]
        self.last_t: float | None = None
        self.next_report_t = 0.0
        self.last_command_t = -math.inf
        self.silent = False
        self._fault = False
        self._buf = b""
        self.lines_in: list[tuple[float, str]] = []

    def host_opened(self, now_s: float) -> None:
        self._buf = b""

    def next_wakeup_s(self, now_s: float) -> float:
        return min(self.next_report_t, now_s + 0.01)

    def receive(self, data: bytes, now_s: float) -> None:
        *lines, self._buf = (self._buf + data).split(b"\n")
        for raw in lines:
            line = raw.decode("ascii", "replace").strip()
            self.lines_in.append((now_s, line))
            parts = line.split()
            if parts[:1] == ["S"]:
                self.target = [0.0, 0.0]
                self.wheels = [0.0, 0.0]
            elif parts[:1] == ["M"] and len(parts) == 3:
                try:
                    self.target = [float(parts[1]), float(parts[2])]
                    self.last_command_t = now_s
                except ValueError:
                    pass

    def inject(self, kind: str) -> None:
        if kind == "silent":
            self.silent = True
        elif kind == "fault":
            self._fault = True
        elif kind == "clear":
            self.silent = self._fault = False
        else:
            raise ValueError(kind)

    def advance(self, now_s: float) -> bytes:
        if self.last_t is None:
            self.last_t = self.next_report_t = now_s
        dt, self.last_t = now_s - self.last_t, now_s
        if now_s - self.last_command_t > WATCHDOG_S:
            self.target = [0.0, 0.0]
        k = 1.0 - math.exp(-max(dt, 0.0) / TAU_S)
        self.wheels = [w + (t - w) * k for w, t in zip(self.wheels, self.target)]
        self.x_m += WHEEL_RADIUS_M * (self.wheels[0] + self.wheels[1]) / 2.0 * dt
        out = b""
        if self._fault:
            out += b"E motor driver overheated\n"
            self._fault = False
        if now_s >= self.next_report_t:
            nxt = self.next_report_t + REPORT_S
            self.next_report_t = nxt if nxt > now_s else now_s + REPORT_S
            rng = min(4.0, max(0.02, self.wall_m - self.x_m))
            if not self.silent:
                out += (f"T {int(now_s * 1000)} {self.wheels[0]:.4f} {self.wheels[1]:.4f} 12.40 {rng:.3f}\n").encode()
        return out
