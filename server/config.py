"""Load a TOML profile (stdlib ``tomllib``) into typed tables, in one place.

Each table is a ``msgspec.Struct`` owned by the module that uses it (``[loop]`` by
:mod:`server.runtime.loop`, ``[video]`` by :mod:`server.gateway.video.settings`, …) and
listed here by name as a lazy ``"module:Class"`` string, so the runtime process never
imports gateway code and the other way round: each process loads the tables it uses, and
the launcher loads them all before it starts anything. ``[driver]`` and ``[sim]`` stay
plain tables: the driver validates its own (``Driver.from_config``).

An unknown key, a wrong type, an out-of-range or non-finite value or a missing file stops
start-up with a :class:`ConfigError` that names the file and the key. Human units in the
file (degrees) are converted where the table says so.

>>> cfg = load_config(None, overrides={"loop": {"rate_hz": 200}})
>>> cfg.loop.rate_hz, cfg.safety.command_timeout_s
(200.0, 0.5)
>>> load_config(None, overrides={"loop": {"rte_hz": 1}})
Traceback (most recent call last):
...
server.config.ConfigError: <defaults>: unknown key 'loop.rte_hz'
"""

from __future__ import annotations

import copy
import importlib
import logging
import re
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping

import msgspec

from drivers.tables import explain, non_finite_path

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "config" / "rover-sim.toml"

#: table name → the struct that owns it (imported only when a process loads that table)
TABLES: dict[str, str] = {
    "robot": "server.runtime.controllers.registry:RobotTable",
    "loop": "server.runtime.settings:LoopConfig",
    "limits": "server.runtime.controllers.registry:LimitsTable",
    "safety": "server.runtime.supervisor:SafetyConfig",
    "uwb": "server.runtime.settings:UwbConfig",
    "estimation": "server.runtime.settings:EstimationConfig",
    "heading": "server.runtime.settings:HeadingConfig",
    "mission": "server.runtime.settings:MissionConfig",
    "calibration": "server.runtime.settings:CalibrationConfig",
    "telemetry": "server.settings:TelemetryConfig",
    "server": "server.settings:ServerConfig",
    "debug": "server.settings:DebugConfig",
    "video": "server.gateway.video.settings:VideoConfig",
    "webrtc": "server.gateway.webrtc.config:WebRtcConfig",
    "recording": "server.gateway.recording.config:RecordingConfig",
    "observability": "server.gateway.observability.config:ObservabilityConfig",
    "auth": "server.gateway.auth.config:AuthConfig",
    "vision": "server.gateway.vision.config:VisionConfig",
    "fleet": "server.gateway.fleet.config:FleetConfig",
    "hub": "server.hub.config:HubConfig",
}
#: plain tables the driver validates itself
RAW_TABLES = ("driver", "sim")

RUNTIME_TABLES = ("robot", "loop", "limits", "safety", "uwb", "estimation", "heading", "mission", "calibration",
                  "telemetry", "server", "debug")
GATEWAY_TABLES = ("telemetry", "server", "debug", "video", "webrtc", "recording", "observability", "auth", "vision",
                  "fleet")
#: the hub's process (python -m server hub): its own users and sessions, where it listens, the fleet
HUB_TABLES = ("server", "auth", "observability", "hub")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file and the key."""


class Table(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every config table: unknown keys refused, every key named (``__post_init__`` may
    normalise: degrees to radians, defaults that depend on other keys).

    ``deprecated`` maps a key the table no longer has to its new name, or to ``None`` when it has no
    effect any more: such a key still loads (moved to its new name, or dropped) with a warning that
    names it, so an old profile keeps working. ``check_profile`` is the table's cross-table check
    (a rule needs the loop's rate, …), run once every table is loaded; a ``ValueError`` stops start-up."""

    deprecated: ClassVar[Mapping[str, str | None]] = {}

    def check_profile(self, profile: "Profile") -> None:
        """Checks against the other tables; raise ``ValueError`` naming the key."""


class ProfileTable:
    """A table whose struct depends on the profile (``[robot]`` and ``[limits]`` are the controller's):
    :meth:`struct_for` picks it from the raw config; :meth:`structs` lists every possible one (docs)."""

    @classmethod
    def struct_for(cls, raw: Mapping[str, Any]) -> type:
        """The struct of this table for the raw config ``raw``; ``ValueError`` naming the key that decides it."""
        raise NotImplementedError

    @classmethod
    def structs(cls) -> tuple[type, ...]:
        raise NotImplementedError


def table_structs(name: str) -> tuple[type, ...]:
    """Every struct table ``name`` may load as (one, but a :class:`ProfileTable`'s are many)."""
    cls = table_class(name)
    return cls.structs() if isinstance(cls, type) and issubclass(cls, ProfileTable) else (cls,)


class Profile:
    """The loaded tables as attributes (``profile.loop.rate_hz``), the raw ``driver`` and ``sim``
    tables, and where they came from."""

    def __init__(self, tables: dict[str, Any], raw: dict[str, Any], source: str, path: Path | None) -> None:
        self._tables = tables
        self.driver: dict[str, Any] = raw.get("driver", {})
        self.sim: dict[str, Any] = raw.get("sim", {})
        self.source = source
        self.path = path
        for name, table in tables.items():
            setattr(self, name, table)

    def __getattr__(self, name: str) -> Any:
        if name in TABLES:
            raise AttributeError(f"table [{name}] was not loaded in this process")
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dicts (for ``Driver.from_config`` and anything else outside ``server``)."""
        out = {name: msgspec.to_builtins(t) for name, t in self._tables.items()}
        out["driver"] = copy.deepcopy(self.driver)
        out["sim"] = copy.deepcopy(self.sim)
        return out


def table_class(name: str) -> type:
    module, _, cls = TABLES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def _explain(table: str, err: msgspec.ValidationError, where: str) -> ConfigError:
    """msgspec's error (:func:`drivers.tables.explain`) in the words of a config file: the quoted dotted key."""
    e = explain(err)
    key = table + e.path
    if e.kind == "unknown_field":
        return ConfigError(f"{where}: unknown key '{key}.{e.field}'")
    if e.kind == "missing_field":
        return ConfigError(f"{where}: missing key '{key}.{e.field}'")
    msg = e.detail
    if msg.startswith("Expected object"):
        return ConfigError(f"{where}: '{key}' must be a table ({msg.lower()})")
    return ConfigError(f"{where}: '{key}' {msg[0].lower()}{msg[1:]}")


def _undeprecate(name: str, value: dict[str, Any], cls: type, where: str) -> dict[str, Any]:
    """``value`` with the struct's deprecated keys moved to their new names (or dropped), each named in a warning."""
    old = [k for k in cls.deprecated if k in value] if issubclass(cls, Table) else []
    if not old:
        return value
    value = dict(value)
    for key in old:
        new = cls.deprecated[key]
        v = value.pop(key)
        if new is None:
            log.warning("%s: '%s.%s' has no effect on this profile and is ignored; remove it (a later version "
                        "will refuse it)", where, name, key)
        elif new in value:
            raise ConfigError(f"{where}: '{name}.{key}' is the old name of '{name}.{new}': give only '{name}.{new}'")
        else:
            log.warning("%s: '%s.%s' is deprecated: it is now '%s.%s'", where, name, key, name, new)
            value[new] = v
    return value


def _check_finite(obj: Any, key: str, where: str) -> None:
    """msgspec has no "finite" constraint: refuse NaN and infinities anywhere in a table."""
    bad = non_finite_path(obj)
    if bad is not None:
        value = _at(obj, bad)
        raise ConfigError(f"{where}: '{key}{bad}' must be finite (got {value!r})")


def _at(obj: Any, path: str) -> Any:
    """The value at a :func:`drivers.tables.non_finite_path` path."""
    for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        obj = obj[name] if name else obj[int(index)]
    return obj


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_overrides(items: list[str]) -> dict:
    """``--set`` items → nested tables: ``["safety.command_timeout_s=2", "robot.name=Bob"]``; VALUE is
    TOML, and a bare word that is not TOML is taken as a string.

    >>> parse_overrides(["safety.command_timeout_s=2", "robot.name=Bob"])
    {'safety': {'command_timeout_s': 2}, 'robot': {'name': 'Bob'}}
    """
    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. safety.command_timeout_s=2")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        *tables, leaf = key.strip().split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: '{t}' is both a value and a table")
        node[leaf] = value
    return out


def load_config(path: str | Path | None, overrides: dict | None = None,
                tables: Iterable[str] | None = None) -> Profile:
    """Read ``path`` (``None``: only defaults), deep-merge ``overrides``, validate ``tables``
    (default: all), return a :class:`Profile`."""
    where = "<defaults>"
    raw: dict[str, Any] = {}
    p = None
    if path is not None:
        p = Path(path)
        where = str(p)
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{where}: config file not found") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{where}: not valid TOML: {err}") from err
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{where}: cannot read: {err}") from err
    if overrides:
        raw = _merge(raw, overrides)
    unknown = sorted(set(raw) - set(TABLES) - set(RAW_TABLES))
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}' (known tables: "
                          f"{', '.join(sorted(set(TABLES) | set(RAW_TABLES)))})")
    for name in RAW_TABLES:
        if name in raw and not isinstance(raw[name], dict):
            raise ConfigError(f"{where}: '{name}' must be a table")
    loaded: dict[str, Any] = {}
    for name in (tables if tables is not None else TABLES):
        value = raw.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: '{name}' must be a table")
        _check_finite(value, name, where)
        cls = table_class(name)
        if isinstance(cls, type) and issubclass(cls, ProfileTable):
            try:
                cls = cls.struct_for(raw)
            except ValueError as err:
                raise ConfigError(f"{where}: {err}") from None
        value = _undeprecate(name, value, cls, where)
        try:
            loaded[name] = msgspec.convert(value, cls)
        except msgspec.ValidationError as err:
            raise _explain(name, err, where) from None
    profile = Profile(loaded, {k: copy.deepcopy(raw.get(k, {})) for k in RAW_TABLES}, where, p)
    profile.driver.setdefault("name", "sim")
    for name, table in loaded.items():  # cross-table checks (a rule needs the loop's rate, …)
        if not isinstance(table, Table):
            continue  # a plain msgspec Struct table (recording, observability) has none
        try:
            table.check_profile(profile)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None
    return profile


__all__ = ["ConfigError", "DEFAULT_CONFIG", "GATEWAY_TABLES", "Profile", "ProfileTable", "REPO_ROOT", "RUNTIME_TABLES",
           "TABLES", "Table", "load_config", "parse_overrides", "table_structs"]
