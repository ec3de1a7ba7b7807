"""FAULHABER MCDC/MCBL 300x drives speaking ASCII, several on one RS232 line (net mode).

Written from the Communication and Function Manual's command reference (see
hardware-protocols §2.1), **not** from ``drivers.faulhaber.ascii``, so the
driver and this emulator cannot share one misreading.

Line discipline: a command is ``[node]COMMAND[argument]`` ended by CR; spaces
are ignored and case does not matter; LF is ignored. A command with a node
number goes to that drive only; without one it goes to every drive (with
several drives every one of them would answer at once: this emulator lets
only the first answer and counts the collision in ``collisions``).

Answers end with CR LF. Queries are always answered; commands are confirmed
with ``OK`` in answer mode 2 only; ``p``/``v`` (after ``NP``/``NV``) are sent in
answer modes 1 and 2 when the position / velocity is reached. Errors:
``Unknown command``, ``Invalid parameter`` (answered in every mode [verify]).
``ANSW`` takes effect before it is confirmed, so ``ANSW2`` is always
answered ``OK`` [verify].

Each drive moves a :class:`sim.devices.motor.MotorAxis` (a SCARA joint or a
wheel): ``V`` rpm, ``LA``/``LR`` + ``M`` in encoder increments, ``SP`` max
rpm, ``AC``/``DEC`` rev/s², ``DI`` lets the motor coast, ``GRC`` mA.

Fault injection (:meth:`AsciiLine.inject`): the bus's (:mod:`sim.devices.bus`:
``drop``, ``delay``, ``hold``/``release``, ``silent``, ``garbage``, ``reboot`` —
drives disabled, counters zero, silent for ``boot_s`` — and ``clear``) and
``unknown`` (every command answered ``Unknown command``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sim.devices.bus import SerialBus
from sim.devices.motor import AxisMode, MotorAxis
from sim.devices.pty import serve_forever

_LINE_RE = re.compile(r"^(\d*)([A-Z]+)(-?\d+)?$")
_MAX_LINE = 64


@dataclass
class DriveConfig:
    node: int = 1
    counts_per_rev: int = 2048  # encoder increments per motor revolution (4 × 512 lines)
    max_rpm: int = 6000  # the drive's own limit; SP may not exceed it
    answer_mode: int = 2
    coast_rev_s2: float = 200.0


@dataclass
class LineConfig:
    drives: list[DriveConfig] = field(default_factory=lambda: [DriveConfig(1), DriveConfig(2)])
    baudrate: int | None = None  # None: no wire delay (tests); 9600 emulates the default line
    response_delay_s: float = 0.0  # the drive's own processing time per command
    boot_s: float = 0.5
    seed: int = 1


class AsciiDrive:
    """One drive: its settings and its motor."""

    def __init__(self, cfg: DriveConfig) -> None:
        self.cfg = cfg
        self.reset()

    def reset(self) -> None:
        cfg = self.cfg
        self.answer_mode = cfg.answer_mode
        self.sp_rpm = min(3000, cfg.max_rpm)
        self.ac_rev_s2 = 30
        self.dec_rev_s2 = 30
        self.lcc_ma, self.lpc_ma = 2000, 4000
        self.loaded_target: int | None = None  # LA/LR waiting for M
        self.notify_position = False
        self.notify_velocity = False
        self.motor = MotorAxis(max_speed_rev_s=self.sp_rpm / 60.0, accel_rev_s2=self.ac_rev_s2,
                               decel_rev_s2=self.dec_rev_s2, coast_rev_s2=cfg.coast_rev_s2,
                               counts_per_rev=cfg.counts_per_rev)
        self.commands_seen: list[str] = []

    def apply_limits(self) -> None:
        m = self.motor
        m.max_speed_rev_s = self.sp_rpm / 60.0
        m.accel_rev_s2 = float(self.ac_rev_s2)
        m.decel_rev_s2 = float(self.dec_rev_s2)
        if m.mode is AxisMode.VELOCITY:
            m.set_speed(m.target_speed_rev_s)


class AsciiLine(SerialBus):
    """Several drives on one line; the device the pty runner serves (the wire and the answers' faults:
    :class:`sim.devices.bus.SerialBus`)."""

    COUNTED = (*SerialBus.COUNTED, "unknown")

    def __init__(self, config: LineConfig | None = None) -> None:
        config = config or LineConfig()
        super().__init__(config, {d.node: AsciiDrive(d) for d in config.drives})
        self.collisions = 0
        self.lines: list[tuple[float, str]] = []  # every command line received, with its time

    # runner interface ------------------------------------------------------------
    def host_opened(self, now_s: float) -> None:
        """An RS232 drive does not reset when the port opens."""

    def receive(self, data: bytes, now_s: float) -> None:
        self._physics(now_s)
        for b in data:
            if b == 0x0D:
                line = bytes(self._buf)
                self._buf.clear()
                self._line(line, now_s)
            elif b == 0x0A:
                continue
            elif len(self._buf) < _MAX_LINE:
                self._buf.append(b)

    # lines ---------------------------------------------------------------------------
    def _line(self, raw: bytes, now_s: float) -> None:
        if now_s < self._silent_until or "silent" in self.faults:
            return
        try:
            text = raw.decode("ascii").replace(" ", "").upper()
        except UnicodeDecodeError:
            text = "\x00"
        if not text:
            return
        self.lines.append((now_s, text))
        m = _LINE_RE.match(text)
        if m is None:
            # garbage on the line: a drive answers only if the line started with its number [verify]
            self._answer_first(None, "Unknown command", now_s)
            return
        node_s, cmd, arg_s = m.groups()
        arg = int(arg_s) if arg_s is not None else None
        if node_s:
            drive = self.drives.get(int(node_s))
            targets = [drive] if drive is not None else []
        else:
            targets = list(self.drives.values())
        if not targets:
            return  # another drive's number: nobody here answers
        answers = [self._execute(d, cmd, arg) for d in targets]
        answers = [a for a in answers if a is not None]
        if len(answers) > 1:
            self.collisions += 1
        if answers:
            self._reply(answers[0], now_s)

    def _answer_first(self, _node: int | None, text: str, now_s: float) -> None:
        self._reply(text, now_s)

    def _reply(self, text: str, now_s: float) -> None:
        if "unknown" in self.faults:
            text = "Unknown command"
        if self._take("drop"):
            return
        self._answer(text.encode("latin-1") + b"\r\n", now_s)

    def _execute(self, d: AsciiDrive, cmd: str, arg: int | None) -> str | None:
        """Run one command on a drive; the answer text, or None for no answer."""
        d.commands_seen.append(cmd if arg is None else f"{cmd}{arg}")
        m = d.motor
        ok = "OK" if d.answer_mode == 2 else None
        cpr = d.cfg.counts_per_rev

        def need_arg(lo: int, hi: int) -> str | None:
            if arg is None or not lo <= arg <= hi:
                return "Invalid parameter"
            return None

        queries = {
            "POS": lambda: m.counts,
            "TPOS": lambda: int(round(m.target_position_rev * cpr)),
            "GN": lambda: int(round(m.speed_rev_s * 60.0)),
            "GV": lambda: int(round(m.target_speed_rev_s * 60.0)),
            "GRC": lambda: int(round(m.current_a * 1000.0)),
            "GSP": lambda: d.sp_rpm, "GAC": lambda: d.ac_rev_s2, "GDEC": lambda: d.dec_rev_s2,
            "GCC": lambda: d.lcc_ma, "GPC": lambda: d.lpc_ma,
            "GST": lambda: (1 if m.enabled else 0) | (0x10000 if m.reached else 0),
            "OST": lambda: (0x10000 if m.reached else 0),
            "GFS": lambda: 0,
            "TEM": lambda: 35,
        }
        if cmd in queries:
            if arg is not None:
                return "Invalid parameter"
            return str(queries[cmd]())
        if cmd == "VER":
            return "MCDC3006S emulated"
        if cmd == "EN":
            m.enabled = True
            m.set_speed(0.0) if m.mode is AxisMode.VELOCITY else m.move_to(m.position_rev)
            return ok
        if cmd == "DI":
            m.enabled = False
            m.target_speed_rev_s = 0.0
            return ok
        if cmd == "V":
            err = need_arg(-d.cfg.max_rpm * 10, d.cfg.max_rpm * 10)
            if err:
                return err
            m.set_speed(min(abs(arg), d.sp_rpm) / 60.0 * (1 if arg >= 0 else -1))
            return ok
        if cmd in ("LA", "LR"):
            err = need_arg(-(2**31), 2**31 - 1)
            if err:
                return err
            base = int(round(m.target_position_rev * cpr)) if cmd == "LR" else 0
            d.loaded_target = base + arg
            return ok
        if cmd == "M":
            if arg is not None:
                return "Invalid parameter"
            if d.loaded_target is not None:
                m.move_to(d.loaded_target / cpr)
            return ok
        if cmd == "NP":
            d.notify_position = True
            return ok
        if cmd == "NV":
            d.notify_velocity = True
            return ok
        if cmd in ("SP", "AC", "DEC", "LCC", "LPC"):
            limits = {"SP": (0, d.cfg.max_rpm), "AC": (1, 30000), "DEC": (1, 30000),
                      "LCC": (0, 12000), "LPC": (0, 12000)}[cmd]
            err = need_arg(*limits)
            if err:
                return err
            if cmd == "SP":
                d.sp_rpm = arg
            elif cmd == "AC":
                d.ac_rev_s2 = arg
            elif cmd == "DEC":
                d.dec_rev_s2 = arg
            elif cmd == "LCC":
                d.lcc_ma = arg
            else:
                d.lpc_ma = arg
            d.apply_limits()
            return ok
        if cmd == "HO":
            m.home((arg or 0) / cpr)
            return ok
        if cmd == "ANSW":
            err = need_arg(0, 2)
            if err:
                return err
            d.answer_mode = arg
            return "OK" if arg == 2 else None
        if cmd in ("SAVE", "EEPSAV"):
            return "EEPROM writing done"
        return "Unknown command"

    # physics -------------------------------------------------------------------------
    def _physics(self, now_s: float) -> None:
        dt = self._elapsed(now_s)
        if dt <= 0:
            return
        for d in self.drives.values():
            m = d.motor
            was_reached = m.reached
            was_speed = abs(m.speed_rev_s - m.target_speed_rev_s) < 1e-9
            m.step(dt)
            if d.answer_mode >= 1 and now_s >= self._silent_until and "silent" not in self.faults:
                if d.notify_position and m.mode is AxisMode.POSITION and m.reached and not was_reached:
                    d.notify_position = False
                    self._send(b"p\r\n", now_s)
                if d.notify_velocity and m.mode is AxisMode.VELOCITY and not was_speed and \
                        abs(m.speed_rev_s - m.target_speed_rev_s) < 1e-9:
                    d.notify_velocity = False
                    self._send(b"v\r\n", now_s)


def main() -> None:  # pragma: no cover - interactive
    import argparse

    ap = argparse.ArgumentParser(description="FAULHABER ASCII drives (nodes 1 and 2) on a pty")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--baud", type=int, default=9600, help="emulated wire speed (0: none)")
    args = ap.parse_args()
    serve_forever(AsciiLine(LineConfig([DriveConfig(n) for n in args.nodes], baudrate=args.baud or None)),
                  "faulhaber-ascii")


if __name__ == "__main__":  # pragma: no cover
    main()
