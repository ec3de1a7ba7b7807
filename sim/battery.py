"""A battery pack: open-circuit voltage from the state of charge, sag under load.

Terminal voltage ``V = V_oc(soc) − I·R_int``; the state of charge falls by the
charge drawn, ``soc -= I·dt / (3600·capacity_ah)`` (coulomb counting, no
recovery or temperature effects). Defaults describe a 3S Li-ion pack
(12.6 V full, 11.1 V nominal).

>>> b = Battery(BatteryParams(), soc=1.0)
>>> b.step(1.0, 0.0)
>>> round(b.voltage_v, 2)
12.6
>>> b.step(1.0, 2.0)                 # 2 A through 0.15 Ω sags by 0.3 V
>>> round(b.voltage_v, 2)
12.3
"""

from __future__ import annotations

import logging
import math
from typing import Annotated

import msgspec
import numpy as np
from msgspec import Meta

logger = logging.getLogger(__name__)

# Open-circuit voltage of one Li-ion cell against the state of charge
# (typical NMC discharge curve at low rate).
_SOC_POINTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_CELL_OCV_V = (3.00, 3.45, 3.60, 3.68, 3.74, 3.79, 3.85, 3.92, 4.00, 4.08, 4.20)


class BatteryParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Pack description, SI units; the ranges are checked when a table is converted (``Meta``).

    ``full_v`` scales the cell curve (the pack reads ``full_v`` at soc = 1);
    ``nominal_v`` is informational (dashboards use it for the scale).
    """

    full_v: Annotated[float, Meta(gt=0.0)] = 12.6
    nominal_v: float = 11.1
    internal_resistance_ohm: Annotated[float, Meta(ge=0.0)] = 0.15
    capacity_ah: Annotated[float, Meta(gt=0.0)] = 2.2
    idle_current_a: Annotated[float, Meta(ge=0.0)] = 0.35
    initial_soc: Annotated[float, Meta(ge=0.0, le=1.0)] = 1.0
    noise_v: Annotated[float, Meta(ge=0.0)] = 0.005

    @property
    def empty_v(self) -> float:
        """Open-circuit voltage at soc = 0."""
        return self.full_v * _CELL_OCV_V[0] / _CELL_OCV_V[-1]


def open_circuit_v(params: BatteryParams, soc: float) -> float:
    """Open-circuit voltage of the pack at state of charge ``soc`` (clipped to [0, 1]).

    >>> round(open_circuit_v(BatteryParams(), 1.0), 2), round(open_circuit_v(BatteryParams(), 0.0), 2)
    (12.6, 9.0)
    """
    cell = float(np.interp(min(max(soc, 0.0), 1.0), _SOC_POINTS, _CELL_OCV_V))
    return params.full_v * cell / _CELL_OCV_V[-1]


class Battery:
    """State of charge and terminal voltage; step it with the total current drawn.

    ``force_voltage(v)`` pins the reported voltage (fault injection for tests),
    ``force_voltage(None)`` releases it; the charge keeps integrating meanwhile.
    """

    def __init__(self, params: BatteryParams, soc: float | None = None) -> None:
        self.params = params
        self.soc = params.initial_soc if soc is None else float(soc)
        self.current_a = 0.0
        self._forced_v: float | None = None
        self._true_v = open_circuit_v(params, self.soc)

    @property
    def voltage_v(self) -> float:
        """Terminal voltage without measurement noise (or the forced value)."""
        return self._true_v if self._forced_v is None else self._forced_v

    @property
    def forced_v(self) -> float | None:
        return self._forced_v

    def force_voltage(self, v: float | None) -> None:
        """Pin the terminal voltage to ``v`` volts, or release it with ``None``.

        >>> b = Battery(BatteryParams())
        >>> b.force_voltage(10.0); b.voltage_v
        10.0
        """
        if v is not None:
            v = float(v)
            if not math.isfinite(v):
                raise ValueError("forced battery voltage must be finite")
        self._forced_v = v

    def step(self, dt_s: float, current_a: float) -> None:
        """Draw ``current_a`` amperes for ``dt_s`` seconds (the idle draw is added by the caller)."""
        self.current_a = float(current_a)
        self.soc = max(0.0, self.soc - self.current_a * dt_s / (3600.0 * self.params.capacity_ah))
        self._true_v = max(0.0, open_circuit_v(self.params, self.soc) - self.current_a * self.params.internal_resistance_ohm)
