"""The capture-time strip: a camera's capture time written into its own picture, for glass-to-glass latency.

Why in the picture: every transport (WebRTC, H.264 or JPEG over the websocket) and every tier
(scaled, re-encoded) carries the pixels, so the age of what the screen *shows* can be read back from
the screen itself, on the robot's clock, without trusting any timestamp on the way (the dashboard
reads it with ``requestVideoFrameCallback`` and a canvas: web/static/js/video/strip.js; the bench and
the tests read the same figure).

Layout: the bottom ``width // 40`` pixel rows, 40 square blocks across, each black (luma 16) or white
(235), aligned to 8×8 transform blocks at 640 and 320 pixels wide so their mean survives H.264 at
60 kbit/s and a 2:1 downscale (tests/drivers/test_camera_strip.py):

    block 0: white, block 1: black (the decoder's threshold is their mean)
    blocks 2-33: capture time in ms modulo 2**32, most significant bit first
    blocks 34-39: check bits: (b0 ^ b1 ^ b2 ^ b3) folded to 6 bits, of the time's 4 bytes

The time wraps every 49.7 days; :func:`unwrap_ms` puts it back next to a clock that is roughly right.

>>> import numpy as np
>>> img = np.zeros((480, 640, 3), np.uint8)
>>> stamp(img, 1764460800.1234)
>>> read(img)
3524208763
>>> unwrap_ms(read(img), 1764460800500.0)
1764460800123.0
"""

from __future__ import annotations

import numpy as np

BLOCKS = 40
DATA_BITS = 32
CHECK_BITS = 6
WHITE, BLACK = 235, 16


def _check(value: int) -> int:
    x = (value ^ (value >> 8) ^ (value >> 16) ^ (value >> 24)) & 0xFF
    return (x ^ (x >> 6)) & 0x3F


def bits_of(t_s: float) -> list[int]:
    """The 40 block values (0/1) for capture time ``t_s`` (s, any epoch)."""
    value = int(round(t_s * 1000.0)) & 0xFFFFFFFF
    data = [(value >> (DATA_BITS - 1 - i)) & 1 for i in range(DATA_BITS)]
    check = _check(value)
    return [1, 0] + data + [(check >> (CHECK_BITS - 1 - i)) & 1 for i in range(CHECK_BITS)]


def stamp(img: np.ndarray, t_s: float) -> None:
    """Write the strip into the bottom rows of ``img`` (H, W, 3) uint8, in place."""
    h, w = img.shape[:2]
    bw = w // BLOCKS
    if bw < 2 or h < 4 * bw:
        return  # too small to carry it legibly
    row = np.repeat(np.array([WHITE if b else BLACK for b in bits_of(t_s)], np.uint8), bw)
    img[h - bw:, :BLOCKS * bw] = row[None, :, None]
    img[h - bw:, BLOCKS * bw:] = BLACK


def read(img: np.ndarray) -> int | None:
    """The strip's time in ms modulo 2**32, or None when there is no valid strip (check bits wrong)."""
    h, w = img.shape[:2]
    bw = w // BLOCKS
    if bw < 2 or h < 4 * bw:
        return None
    luma = img[h - bw:, :BLOCKS * bw].astype(np.float32)
    if luma.ndim == 3:
        luma = luma.mean(axis=2)
    q = max(1, bw // 4)
    means = [float(luma[q:bw - q, i * bw + q:(i + 1) * bw - q].mean()) for i in range(BLOCKS)]
    white, black = means[0], means[1]
    if white - black < 60:
        return None
    thr = (white + black) / 2
    bits = [1 if m > thr else 0 for m in means]
    value = 0
    for b in bits[2:2 + DATA_BITS]:
        value = (value << 1) | b
    check = 0
    for b in bits[2 + DATA_BITS:]:
        check = (check << 1) | b
    return value if check == _check(value) else None


def unwrap_ms(value: int, near_ms: float) -> float:
    """The full time in ms of a strip value, taking the wrap nearest ``near_ms`` (a clock within 24 days)."""
    base = near_ms - ((near_ms - value) % 2**32)
    return base + 2**32 if near_ms - base > 2**31 else base
