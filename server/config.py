"""Load and validate a TOML profile (stdlib ``tomllib``).

Every key is declared here with its type and default; an unknown key, a wrong
type, an out-of-range value or a missing file stops start-up with a
:class:`ConfigError` that names the file and the key. Human units in the file
(degrees) are converted once, here.

>>> cfg = load_config(None, overrides={"loop": {"rate_hz": 200}})
>>> cfg["loop"]["rate_hz"], cfg["safety"]["command_timeout_s"]
(200.0, 0.5)
>>> load_config(None, overrides={"loop": {"rte_hz": 1}})
Traceback (most recent call last):
...
server.config.ConfigError: <defaults>: unknown key 'loop.rte_hz' (known: max_consecutive_overruns, rate_hz, realtime, spin_us)
"""

from __future__ import annotations

import copy
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "rover-sim.toml"


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class F:
    """A field: accepted types, default (``REQUIRED`` if none), optional check returning an error or None."""

    types: tuple[type, ...]
    default: Any
    check: Callable[[Any], str | None] | None = None


REQUIRED = object()
ANY_TABLE = "any-table"  # a table validated elsewhere (driver, world, video)


def rng(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, float) and not math.isfinite(v):
            return "must be finite"
        if lo is not None and (v <= lo if lo_open else v < lo):
            return f"must be {'>' if lo_open else '>='} {lo:g}"
        if hi is not None and v > hi:
            return f"must be <= {hi:g}"
        return None

    return check


def one_of(*choices: Any) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(map(repr, choices))}"


def points3(min_count: int) -> Callable[[Any], str | None]:
    """A list of ``[x, y, z]`` finite numbers: none, or at least ``min_count`` of them."""

    def check(v: Any) -> str | None:
        ok = all(isinstance(p, list) and len(p) == 3 and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in p) for p in v)
        if not ok:
            return "must be a list of [x, y, z] points (finite numbers, metres)"
        if v and len(v) < min_count:
            return f"needs at least {min_count} points (or none)"
        return None

    return check


def coefficients(v: Any) -> str | None:
    if not v or not all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) for c in v):
        return "must be a non-empty list of finite numbers (polynomial coefficients, highest power first)"
    return None


NUM = (int, float)
RULE = {
    "name": F((str,), REQUIRED),
    "channel": F((str,), REQUIRED),
    "below": F(NUM, None, rng()),
    "above": F(NUM, None, rng()),
    "when": F((str,), "always", one_of("always", "moving", "moving_forward", "moving_backward", "running")),
    "category": F((int,), 0, one_of(0, 1, 2)),
    "message": F((str,), ""),
}

SCHEMA: dict[str, Any] = {
    "robot": {
        "profile": F((str,), "rover", one_of("rover")),
        "name": F((str,), "Simulated rover"),
        "wheel_radius_m": F(NUM, 0.05, rng(0.0, 10.0, lo_open=True)),
        "track_m": F(NUM, 0.30, rng(0.0, 10.0, lo_open=True)),
    },
    "driver": ANY_TABLE,
    "loop": {
        "rate_hz": F(NUM, 100.0, rng(1.0, 2000.0)),
        "realtime": F((bool,), True),
        "spin_us": F(NUM, 200.0, rng(0.0, 2000.0)),
        "max_consecutive_overruns": F((int,), 10, rng(1, 100000)),
        # one tick later than this is a trigger of its own (a frozen process counts one overrun)
        "max_stall_s": F(NUM, None, rng(0.0, 60.0, lo_open=True)),
    },
    "limits": {
        "linear_m_s": F(NUM, 0.5, rng(0.0, 20.0, lo_open=True)),
        "angular_rad_s": F(NUM, 2.0, rng(0.0, 50.0, lo_open=True)),
        "linear_accel_m_s2": F(NUM, 0.8, rng(0.0, 100.0, lo_open=True)),
        "angular_accel_rad_s2": F(NUM, 4.0, rng(0.0, 500.0, lo_open=True)),
        "linear_decel_m_s2": F(NUM, 1.5, rng(0.0, 100.0, lo_open=True)),
        "angular_decel_rad_s2": F(NUM, 6.0, rng(0.0, 500.0, lo_open=True)),
        "ttl_max_s": F(NUM, 10.0, rng(0.0, 3600.0, lo_open=True)),
    },
    "safety": {
        "command_timeout_s": F(NUM, 0.5, rng(0.01, 60.0)),
        "link_loss_category": F((int,), 1, one_of(0, 1, 2)),
        "operator_estop_category": F((int,), 0, one_of(0, 1, 2)),
        "overrun_category": F((int,), 0, one_of(0, 1, 2)),
        "sensor_stale_s": F(NUM, 0.5, rng(0.001, 60.0)),
        "rules": [RULE],
    },
    "telemetry": {
        "rate_hz": F(NUM, 50.0, rng(0.1, 1000.0)),
        "max_clients": F((int,), 100, rng(1, 10000)),
        "event_log_size": F((int,), 500, rng(10, 100000)),
        "send_buffer_bytes": F((int,), 32768, rng(4096, 16 * 1024 * 1024)),
        # per websocket client: commands a second and the burst saved up (the e-stop is exempt)
        "command_rate_hz": F(NUM, 100.0, rng(1.0, 100000.0)),
        "command_burst": F((int,), 200, rng(1, 1000000)),
    },
    "server": {
        "host": F((str,), "127.0.0.1"),
        "port": F((int,), 8080, rng(0, 65535)),
        "state_dir": F((str,), "state"),
        "max_connections": F((int,), 256, rng(1, 100000)),  # beyond this, new connections are closed at once
        "request_timeout_s": F(NUM, 15.0, rng(0.1, 3600.0)),  # a connection with no complete request this long closes
        "body_timeout_s": F(NUM, 5.0, rng(0.1, 3600.0)),  # a request body must arrive within this
        # a websocket/MJPEG client whose writer cannot make progress (it does not read or ack) this long is closed
        "writer_stall_s": F(NUM, 10.0, rng(0.1, 3600.0)),
    },
    "debug": {
        "routes": F((bool,), False),
    },
    "sim": {
        "world": ANY_TABLE,
    },
    "video": ANY_TABLE,
    # inertial and UWB sensing (docs/sensing.md); the sim's sensor models are [driver.imu],
    # [driver.magnetometer] and [driver.uwb]
    "uwb": {
        "anchors": F((list,), [], points3(3)),  # [[x, y, z], ...] m, world frame: the sim and the estimator
        "tag_height_m": F(NUM, 0.15, rng(-10.0, 10.0)),  # tag above the body origin
    },
    "estimation": {
        "enabled": F((bool,), True),
        "k_acc": F(NUM, 2.0, rng(0.0, 100.0)),  # attitude filter gains, 1/s (robotics.estimation.attitude)
        "k_mag": F(NUM, 1.0, rng(0.0, 100.0)),
        "k_bias": F(NUM, 0.2, rng(0.0, 100.0)),
        "declination_deg": F(NUM, 0.0, rng(-180.0, 180.0)),  # magnetic north east of true north
        "encoder_ticks_per_rev": F((int,), 1024, rng(1, 10**9)),
        "uwb_z": F((str,), "fixed", one_of("fixed", "free")),  # fixed: solve x, y at the tag height
        "uwb_sigma_m": F(NUM, 0.05, rng(0.0, 10.0, lo_open=True)),  # noise of one fix, per axis
        "uwb_range_correction": F((list,), [1.0, 0.0], coefficients),  # default until a calibration is stored
        "odom_sigma_m_per_sqrt_m": F(NUM, 0.05, rng(0.0, 10.0)),
        "yaw_sigma_deg": F(NUM, 2.0, rng(0.0, 180.0, lo_open=True)),
        "gate_chi2": F(NUM, 13.8, rng(0.0, 1e6, lo_open=True)),
    },
    "heading": {
        "tolerance_deg": F(NUM, 5.0, rng(0.1, 45.0)),
        "step_deg": F(NUM, 45.0, rng(1.0, 180.0)),  # turn at most this far between two measurements
        "turn_rate_rad_s": F(NUM, 0.8, rng(0.01, 50.0)),
        "min_turn_rate_rad_s": F(NUM, 0.08, rng(0.001, 50.0)),
        "settle_s": F(NUM, 0.4, rng(0.0, 10.0)),  # pause before each measurement
        "coast_s": F(NUM, 0.1, rng(0.0, 10.0)),  # the turn goes on ~this long after a zero command
        "timeout_s": F(NUM, 60.0, rng(1.0, 3600.0)),
    },
    "calibration": {
        "state_file": F((str,), "calibration.json"),  # in [server] state_dir
        "mag_turn_rate_rad_s": F(NUM, 0.4, rng(0.01, 50.0)),
        "mag_revolutions": F(NUM, 1.25, rng(1.0, 10.0)),
        "mag_timeout_s": F(NUM, 120.0, rng(1.0, 3600.0)),
    },
}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _validate(table: dict, schema: dict, prefix: str, where: str) -> dict:
    out: dict[str, Any] = {}
    unknown = sorted(set(table) - set(schema))
    if unknown:
        key = f"{prefix}{unknown[0]}"
        raise ConfigError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(schema))})")
    for key, spec in schema.items():
        path = f"{prefix}{key}"
        present = key in table
        value = table.get(key)
        if spec is ANY_TABLE:
            if present and not isinstance(value, dict):
                raise ConfigError(f"{where}: '{path}' must be a table")
            out[key] = copy.deepcopy(value) if present else {}
        elif isinstance(spec, dict):
            if present and not isinstance(value, dict):
                raise ConfigError(f"{where}: '{path}' must be a table")
            out[key] = _validate(value if present else {}, spec, path + ".", where)
        elif isinstance(spec, list):
            items = value if present else []
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ConfigError(f"{where}: '{path}' must be an array of tables ([[{path}]])")
            out[key] = [_validate(item, spec[0], f"{path}[{i}].", where) for i, item in enumerate(items)]
        else:
            if not present:
                if spec.default is REQUIRED:
                    raise ConfigError(f"{where}: missing key '{path}'")
                out[key] = spec.default
                continue
            if isinstance(value, bool) and bool not in spec.types or not isinstance(value, spec.types):
                names = " or ".join(t.__name__ for t in spec.types)
                raise ConfigError(f"{where}: '{path}' must be {names}, not {type(value).__name__} ({value!r})")
            if spec.types == NUM:
                value = float(value)
            if spec.check is not None:
                problem = spec.check(value)
                if problem:
                    raise ConfigError(f"{where}: '{path}' {problem} (got {value!r})")
            out[key] = value
    return out


def _check_rules(cfg: dict, where: str) -> None:
    for i, rule in enumerate(cfg["safety"]["rules"]):
        if (rule["below"] is None) == (rule["above"] is None):
            raise ConfigError(f"{where}: 'safety.rules[{i}]' needs exactly one of 'below' or 'above'")
        if not rule["message"]:
            op, thr = ("<", rule["below"]) if rule["below"] is not None else (">", rule["above"])
            rule["message"] = f"{rule['channel']} {op} {thr:g}"


def load_config(path: str | Path | None, overrides: dict | None = None) -> dict[str, Any]:
    """Read ``path`` (``None``: only defaults), deep-merge ``overrides``, validate, return plain dicts."""
    where = "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        where = str(p)
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{where}: config file not found") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{where}: not valid TOML: {err}") from err
        except OSError as err:
            raise ConfigError(f"{where}: cannot read: {err}") from err
    if overrides:
        raw = _merge(raw, overrides)
    cfg = _validate(raw, SCHEMA, "", where)
    _check_rules(cfg, where)
    if cfg["loop"]["max_stall_s"] is None:  # default: five periods
        cfg["loop"]["max_stall_s"] = 5.0 / cfg["loop"]["rate_hz"]
    cfg["uwb"]["anchors"] = [[float(c) for c in p] for p in cfg["uwb"]["anchors"]]
    cfg["estimation"]["uwb_range_correction"] = [float(c) for c in cfg["estimation"]["uwb_range_correction"]]
    cfg["driver"].setdefault("name", "sim")
    from server.video import validate_video_settings  # the video module owns its keys

    try:
        cfg["video"] = validate_video_settings(cfg["video"])
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    cfg["_source"] = where
    return cfg
