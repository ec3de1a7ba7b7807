"""The simulated drivers: ros2_control's mock hardware, real drivers the server cannot tell from hardware.

One module per concept: :mod:`~drivers.sim.rover` (``sim``, the rover and its virtual sensors),
:mod:`~drivers.sim.arm` (what the arm drivers share) with :mod:`~drivers.sim.scara` (``sim-scara``)
and :mod:`~drivers.sim.stewart` (``sim-stewart``), :mod:`~drivers.sim.config` (their ``[driver]``
tables as msgspec Structs) and :mod:`~drivers.sim.debug` (fault injection and the other test hooks).
The registry (:mod:`drivers.registry`) names each module; this package is the only one of the driver
layer that imports ``sim``.
"""

from drivers.sim.rover import DOPPLER_CHANNELS, SimDriver

__all__ = ["DOPPLER_CHANNELS", "SimDriver"]
