"""The driver layer's exception tree. The runtime maps these to the ``fault`` state."""


class DriverError(Exception):
    """A driver could not do what was asked."""


class DriverOpenError(DriverError):
    """The device could not be opened or did not identify itself."""


class DriverTimeoutError(DriverError):
    """The device did not answer or send a frame in time."""


class DriverProtocolError(DriverError):
    """The device sent bytes that do not decode."""


class DriverLinkError(DriverError):
    """The link to the device is gone (port unplugged, closed by the other side)."""


class DriverStateError(DriverError):
    """The call is not allowed in the driver's lifecycle state (read from a closed driver)."""


class DriverCommandError(DriverError, ValueError):
    """An actuator command the driver refuses (unknown actuator, non-finite, beyond limits)."""


class DriverConfigError(DriverError, ValueError):
    """The driver's config table is wrong; ``key`` names the offending key (dotted, within the table)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.message = message


class AcquisitionError(DriverError, ValueError):
    """Acquisition settings the device cannot honour (the message names the setting)."""


class ProgramGenerationError(DriverError, ValueError):
    """A joint motion that cannot become a program for the drives (the message names the segment and joint)."""
