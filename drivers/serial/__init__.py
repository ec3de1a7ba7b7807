"""The serial transport shared by the serial drivers (Firmata, FAULHABER).

:class:`SerialLink` opens a port by pyserial URL, runs one reader thread that
decodes bytes with a sans-IO decoder, one writer thread fed by a queue (so a
write never blocks its caller) and a separate stop lane that jumps the queue.
"""

from drivers.serial.codec import Decoder, Invalid
from drivers.serial.link import LinkCounters, SerialLink

__all__ = ["Decoder", "Invalid", "LinkCounters", "SerialLink"]
