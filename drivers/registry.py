"""Driver names → ``"module:Class"`` strings, imported lazily.

The package loads without vendor libraries; a driver's module is imported only
when a config names it (python-can does the same).
"""

from __future__ import annotations

import importlib

from drivers.base import Driver
from drivers.errors import DriverError

DRIVERS: dict[str, str] = {
    "sim": "drivers.sim:SimDriver",
    "sim-scara": "drivers.sim_scara:ScaraSimDriver",
    "sim-stewart": "drivers.sim_stewart:StewartSimDriver",
    "firmata": "drivers.firmata.driver:FirmataDriver",
    "faulhaber-ascii": "drivers.faulhaber.driver:FaulhaberAsciiDriver",
    "faulhaber-mcv3": "drivers.faulhaber.driver:FaulhaberMcV3Driver",
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
    module_name, _, cls_name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, cls_name)


def driver_class(name: str) -> type[Driver]:
    """The driver class registered as ``name``."""
    return _load(DRIVERS, name, "driver")


def camera_class(name: str) -> type:
    """The camera source class registered as ``name``."""
    return _load(CAMERAS, name, "camera")
