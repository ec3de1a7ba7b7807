"""Open a TUN device with the stdlib: ``/dev/net/tun`` and one ``TUNSETIFF`` ioctl.

``struct ifreq`` (linux/if.h) is 40 bytes on 64-bit Linux: ``char ifr_name[16]`` then a union
whose first member we use, ``short ifr_flags``. ``IFF_TUN | IFF_NO_PI``: every ``read`` is one
IP packet without the 4-byte packet-information header, every ``write`` injects one as if it
had been received on the device. The device lives in the network namespace of the thread that
opens it and disappears when the last descriptor closes (not ``TUNSETPERSIST``), so a dead
delay line leaves nothing behind.

>>> len(_ifreq("tunU", IFF_TUN | IFF_NO_PI))
40
"""

from __future__ import annotations

import fcntl
import os
import struct

TUNSETIFF = 0x400454CA  # _IOW('T', 202, int)
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFNAMSIZ = 16


def _ifreq(name: str, flags: int) -> bytes:
    raw = name.encode()
    if not 0 < len(raw) < IFNAMSIZ:
        raise ValueError(f"an interface name has 1..{IFNAMSIZ - 1} bytes, not {name!r}")
    return struct.pack("16sH22x", raw, flags)


def open_tun(name: str) -> int:
    """A non-blocking descriptor of a new TUN device ``name`` (down: bring it up with ``ip link``)."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, _ifreq(name, IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd
