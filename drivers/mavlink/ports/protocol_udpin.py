"""pyserial's handler for ``udpin://`` (see :mod:`drivers.mavlink.ports`)."""

from drivers.mavlink.ports import UdpPort as Serial

__all__ = ["Serial"]
