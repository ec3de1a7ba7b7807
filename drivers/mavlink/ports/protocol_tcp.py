"""pyserial's handler for ``tcp://`` (see :mod:`drivers.mavlink.ports`)."""

from drivers.mavlink.ports import TcpPort as Serial

__all__ = ["Serial"]
