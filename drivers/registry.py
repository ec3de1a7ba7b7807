"""Driver names → ``"module:Class"`` strings, imported lazily; and drivers of other packages, by entry point.

The package loads without vendor libraries; a driver's module is imported only
when a config names it (python-can does the same).

A driver the project does not ship plugs in without editing it: its package declares an entry point in the
``teleop.drivers`` group (``[project.entry-points."teleop.drivers"] linebot = "linebot.driver:LineBotDriver"``
in its ``pyproject.toml``), and ``[driver] name = "linebot"`` finds it once the package is installed
(docs/drivers.md). The built-in names come first: an entry point cannot replace ``sim`` or ``firmata``.
python-can finds its interface plugins the same way (``can.interface`` entry points).
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import EntryPoint, entry_points

from drivers.base import Driver
from drivers.errors import DriverError

logger = logging.getLogger(__name__)

#: the entry-point group other packages register their drivers in
ENTRY_POINT_GROUP = "teleop.drivers"

DRIVERS: dict[str, str] = {
    "sim": "drivers.sim.rover:SimDriver",
    "sim-scara": "drivers.sim.scara:ScaraSimDriver",
    "sim-stewart": "drivers.sim.stewart:StewartSimDriver",
    "firmata": "drivers.firmata.driver:FirmataDriver",
    "faulhaber-ascii": "drivers.faulhaber.driver:FaulhaberAsciiDriver",
    "faulhaber-mcv3": "drivers.faulhaber.driver:FaulhaberMcV3Driver",
    "mavlink": "drivers.mavlink.driver:MavlinkDriver",
}

CAMERAS: dict[str, str] = {
    "opencv": "drivers.camera.opencv:OpenCvCamera",
    "sim": "drivers.camera.sim:SimCamera",
}


def _load(table: dict[str, str], name: str, what: str) -> type:
    try:
        target = table[name]
    except KeyError:
        raise DriverError(f"unknown {what} {name!r}; known: {', '.join(sorted(table))}") from None
    return load_target(target)


def load_target(target: str) -> type:
    """The class a ``"module:Class"`` string names; :class:`DriverError` saying which part is missing."""
    module_name, sep, cls_name = target.partition(":")
    if not sep or not module_name or not cls_name:
        raise DriverError(f"{target!r}: want 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise DriverError(f"{target!r}: cannot import {module_name}: {err}") from err
    try:
        return getattr(module, cls_name)
    except AttributeError:
        raise DriverError(f"{target!r}: {module_name} has no {cls_name}") from None


def plugin_drivers() -> dict[str, EntryPoint]:
    """The drivers installed packages declare (``teleop.drivers`` entry points), by name; one that reuses a
    built-in name is ignored with a warning."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in DRIVERS:
            logger.warning("driver entry point %r (%s) ignored: the name is a built-in driver's", ep.name, ep.value)
            continue
        found.setdefault(ep.name, ep)
    return found


def driver_names() -> list[str]:
    """Every driver a config may name: the built-in ones and the installed packages'."""
    return sorted({*DRIVERS, *plugin_drivers()})


def driver_class(name: str) -> type[Driver]:
    """The driver class registered as ``name`` (built in, or a ``teleop.drivers`` entry point)."""
    if name in DRIVERS:
        return _load(DRIVERS, name, "driver")
    ep = plugin_drivers().get(name)
    if ep is None:
        raise DriverError(f"unknown driver {name!r}; known: {', '.join(driver_names())} (a driver of your own: "
                          f"an entry point in the {ENTRY_POINT_GROUP!r} group, docs/drivers.md)")
    try:
        cls = ep.load()
    except Exception as err:  # noqa: BLE001 - a plugin's import error, worded with where it came from
        raise DriverError(f"driver {name!r} from entry point {ep.value!r}: {type(err).__name__}: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverError(f"driver {name!r} from entry point {ep.value!r} is not a drivers.base.Driver subclass")
    return cls


def camera_class(name: str) -> type:
    """The camera source class registered as ``name``."""
    return _load(CAMERAS, name, "camera")


__all__ = ["CAMERAS", "DRIVERS", "ENTRY_POINT_GROUP", "camera_class", "driver_class", "driver_names", "load_target",
           "plugin_drivers"]
