"""A frame listener that asks for fewer frames than the video's rate (:class:`RateCappedListener`).

Its own module, without OpenCV or numpy: the vision service holds one from its start, and a gateway with
vision off (most) builds that service without importing the video pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np

    from server.gateway.video.frames import EncodedFrame


class RateCappedListener:
    """A frame listener that needs at most ``max_fps`` frames a second (vision at its own rate): while it is
    the only reason to capture, the camera is read that often, not at the video ``fps``. With ``raw``
    (``raw(bgr, capture_t, seq)``), frames that nobody else wants are handed over as pictures, not JPEG."""

    __slots__ = ("fn", "max_fps", "raw")

    def __init__(self, fn: Callable[[EncodedFrame], None], max_fps: float,
                 raw: Callable[[np.ndarray, float, int], None] | None = None) -> None:
        self.fn = fn
        self.max_fps = max_fps
        self.raw = raw

    def __call__(self, frame: EncodedFrame) -> None:
        self.fn(frame)


__all__ = ["RateCappedListener"]
