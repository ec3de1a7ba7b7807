"""A synthetic run shaped like the real one: snapshots as the gateway serialises them, events, commands."""

from __future__ import annotations

import math

import orjson

CHANNELS = ["wheel_left_rad_s", "wheel_right_rad_s", "encoder_left_ticks", "encoder_right_ticks", "linear_m_s",
            "angular_rad_s", "range_front_m", "range_left_m", "range_right_m", "battery_v", "current_left_a",
            "current_right_a", "acc_x_m_s2", "acc_y_m_s2", "acc_z_m_s2", "gyro_z_rad_s", "heading_deg", "tilt_rad"]
ROBOT = {"name": "test rover", "profile": "rover", "driver": "sim",
         "channels": [{"name": c, "unit": "u"} for c in CHANNELS],
         "geometry": {"wheel_radius_m": 0.05, "track_m": 0.3}}


def snapshot(i: int, t: float, rate_hz: float = 50.0) -> dict:
    """Snapshot ``i`` at unix time ``t``: values are simple functions of ``i`` so tests can check them."""
    lin = 0.2 * math.sin(i / 50.0)
    ang = 0.1
    values = {c: float(i % 97) + k * 0.5 for k, c in enumerate(CHANNELS)}
    values["linear_m_s"] = lin + 0.01
    values["angular_rad_s"] = ang - 0.02
    values["wheel_left_rad_s"] = (lin - ang * 0.15) / 0.05 + 0.1
    values["wheel_right_rad_s"] = (lin + ang * 0.15) / 0.05 - 0.1
    values["range_left_m"] = None if i % 10 == 0 else 1.5
    return {
        "seq": i, "t": t, "state": "running" if i > 5 else "idle", "cause": None,
        "setpoint": {"linear": lin, "angular": ang}, "command": {"linear": lin, "angular": ang},
        "values": values, "truth": {"x": i * 0.001, "y": 0.0, "yaw": 0.0},
        "behavior": None, "link": {"age_s": 0.01, "timeout_s": 0.5},
        "loop": {"rate_hz": 100.0, "measured_hz": 100.0, "ticks": i * 2, "overruns": 0, "missed": 0,
                 "jitter_p50_us": 3.1, "jitter_p99_us": 80.0, "jitter_max_us": 450.0, "exec_p99_us": 120.0,
                 "realtime": "SCHED_FIFO 50"},
    }


def snapshot_bytes(i: int, t: float) -> bytes:
    return orjson.dumps(snapshot(i, t))


def event(k: int, wall_t: float, before: str = "running", after: str = "estop") -> dict:
    return {"t": 1000.0 + k, "wall_t": wall_t, "trigger": f"rule_{k}", "message": f"event {k}",
            "values": {"range_front_m": 0.1 * k}, "state_before": before, "state_after": after, "kind": "safety"}


def record_run(rec, n: int, t0: float, dt: float = 0.02, events_every: int = 100) -> dict:
    """Hand ``n`` snapshots, an event every ``events_every`` and a command per event to ``rec``;
    returns what was handed over."""
    sent = {"snapshots": [], "events": [], "commands": 0}
    for i in range(n):
        t = t0 + i * dt
        data = snapshot_bytes(i, t)
        assert rec.record_snapshot(data, t)
        sent["snapshots"].append(data)
        if i % events_every == events_every // 2:
            ev = event(i, t)
            assert rec.record_event(ev)
            sent["events"].append(ev)
            assert rec.record_command("speed", {"linear": 0.5, "angular": 0.0}, accepted=False, principal="alice",
                                      source="http", state="estop",
                                      error={"code": "estop_latched", "message": "reset first"}, t=t)
            sent["commands"] += 1
    return sent
