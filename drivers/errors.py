"""The driver layer's exception tree. The server maps these to the ``fault`` state."""


class DriverError(Exception):
    """A driver could not do what was asked."""


class DriverOpenError(DriverError):
    """The device could not be opened or did not identify itself."""


class DriverTimeoutError(DriverError):
    """The device did not answer or send a frame in time."""


class DriverProtocolError(DriverError):
    """The device sent bytes that do not decode."""


class AcquisitionError(DriverError, ValueError):
    """Acquisition settings the device cannot honour (the message names the setting)."""
