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


# ---------------------------------------------------------------------- a long run, shaped like the real rover's
#: the real sim rover's channels (GET /api/state of config/rover-sim.toml): 35 values, ~2 KB of JSON a snapshot
ROVER_CHANNELS = [
    "wheel_left_rad_s", "wheel_right_rad_s", "encoder_left_ticks", "encoder_right_ticks", "linear_m_s",
    "angular_rad_s", "range_front_m", "battery_v", "current_left_a", "current_right_a", "imu_acc_x_m_s2",
    "imu_acc_y_m_s2", "imu_acc_z_m_s2", "imu_gyro_x_rad_s", "imu_gyro_y_rad_s", "imu_gyro_z_rad_s", "mag_x_ut",
    "mag_y_ut", "mag_z_ut", "doppler_speed_m_s", "doppler_motion", "doppler_target_speed_m_s", "uwb_range_0_m",
    "uwb_range_1_m", "uwb_range_2_m", "uwb_range_3_m", "roll_rad", "pitch_rad", "yaw_rad", "tilt_rad",
    "heading_deg", "est_x_m", "est_y_m", "uwb_x_m", "uwb_y_m"]
ROVER_ROBOT = {"name": "Simulated rover", "profile": "rover", "driver": "sim",
               "channels": [{"name": c, "unit": c.rsplit("_", 1)[-1]} for c in ROVER_CHANNELS],
               "geometry": {"wheel_radius_m": 0.05, "track_m": 0.3}}


def rover_snapshot(i: int, t: float, noise) -> bytes:
    """Snapshot ``i`` of a long run: the real rover's fields, full-precision noisy values (so it
    compresses like real telemetry: ~440 B a snapshot after zstd, as the issue's 30-min file)."""
    lin = 0.3 * math.sin(i / 500.0)
    ang = 0.2 * math.cos(i / 700.0)
    values = {c: float(v) for c, v in zip(ROVER_CHANNELS, noise)}
    values["linear_m_s"] = lin + float(noise[0]) * 0.01
    values["angular_rad_s"] = ang + float(noise[1]) * 0.01
    return orjson.dumps({
        "seq": i, "t": t, "state": "running", "cause": None,
        "setpoint": {"linear": lin, "angular": ang, "source": "websocket"}, "command": {"linear": lin, "angular": ang},
        "values": values,
        "truth": {"x": float(noise[2]), "y": float(noise[3]), "yaw": float(noise[4]), "roll": 0.0, "pitch": 0.0,
                  "z": 0.0, "collided": False, "collisions": 0, "sim_time_s": i * 0.02, "soc": 0.99,
                  "contact_point": None, "uwb_true_m": [float(x) for x in noise[5:9]],
                  "doppler_true_speed_m_s": lin, "doppler_targets": [[4.68, 3.6]]},
        "stale": [], "behavior": None, "link": {"age_s": 0.012, "timeout_s": 0.5}, "driver": {"state": "active"},
        "external": {}, "estimation": {"heading_calibrated": False},
        "loop": {"rate_hz": 100.0, "measured_hz": 99.4, "ticks": i * 2, "missed": 1, "overruns": 1,
                 "jitter_p50_us": 0.2, "jitter_p99_us": 1.1, "jitter_max_us": 153.3, "exec_p99_us": 171.2,
                 "gc_collections": 1, "realtime": "SCHED_FIFO 50"}})


def write_long_recording(directory, seconds: float, *, rate_hz: float = 50.0, t0: float = 1.8e9,
                         name: str | None = "long", events_every_s: float = 60.0, safety_at_s: tuple = ()):
    """Write a finished recording of ``seconds`` at ``rate_hz`` into ``directory`` with the real recorder
    and return its path. An info event every ``events_every_s``; a safety e-stop event at each of
    ``safety_at_s`` (seconds from the start). 30 minutes (90,000 snapshots) take ~10-20 s here."""
    import time
    from pathlib import Path

    import numpy as np

    from server.gateway.recording import Recorder, RecordingConfig

    directory = Path(directory)
    rec = Recorder(RecordingConfig(dir=str(directory), queue_size=1_000_000, queue_bytes=2**31),
                   robot=ROVER_ROBOT, clock=lambda: t0)
    rec.start()
    file = rec.start_recording(name)
    rng = np.random.default_rng(11)
    n = int(seconds * rate_hz)
    noise = rng.normal(1.0, 0.3, (4096, len(ROVER_CHANNELS)))
    safety = sorted(int(s * rate_hz) for s in safety_at_s)
    every = max(1, int(events_every_s * rate_hz))
    handed = 0
    for i in range(n):
        t = t0 + i / rate_hz
        rec.record_snapshot(rover_snapshot(i, t, noise[i % 4096]), t)
        handed += 1
        if i % every == every // 2:
            rec.record_event({"t": 1000.0 + i, "wall_t": t, "trigger": "notice", "message": f"info {i}",
                              "values": {}, "state_before": "running", "state_after": "running", "kind": "info"})
            handed += 1
        if safety and i == safety[0]:
            safety.pop(0)
            rec.record_event(event(i, t))
            handed += 2  # the event and its state change
        if i % 20_000 == 0:  # keep the writer's backlog (memory) bounded
            while rec.status()["total_messages"] < handed - 50_000:
                time.sleep(0.01)
    deadline = time.monotonic() + 600
    while rec.status()["total_messages"] < handed and time.monotonic() < deadline:
        time.sleep(0.01)
    rec.close()
    return directory / file
