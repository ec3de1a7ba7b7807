"""The camera source interface: open, read the latest frame with its capture time, close.

A source is driven by one thread only (the video service's capture thread), so
implementations need no locking. ``read()`` blocks until a frame is available
(a live device paces itself; a file or the simulator returns at once and the
caller paces it).

>>> CameraSettings.from_mapping({"width": 320, "height": 240, "fps": 15, "quality": 70})
CameraSettings(width=320, height=240, fps=15.0)
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from drivers.errors import DriverError


class CameraError(DriverError):
    """The camera could not be opened, was lost, or returned no frame."""


@dataclass(frozen=True)
class CameraSettings:
    """What the source is asked to deliver: frame size in pixels and rate in frames per second."""

    width: int = 640
    height: int = 480
    fps: float = 30.0

    def __post_init__(self) -> None:
        for key in ("width", "height"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise CameraError(f"{key} must be a positive integer, not {v!r}")
        fps = self.fps
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
            raise CameraError(f"fps must be a positive finite number, not {fps!r}")
        object.__setattr__(self, "fps", float(fps))

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | "CameraSettings") -> "CameraSettings":
        """Pick width/height/fps out of a settings table (other keys are ignored)."""
        if isinstance(m, CameraSettings):
            return m
        d = cls()
        return cls(int(m.get("width", d.width)), int(m.get("height", d.height)), m.get("fps", d.fps))


class CameraSource(abc.ABC):
    """Base class of every camera source.

    Subclasses implement ``_open``, ``_read`` and ``_close``; the public methods
    add the lifecycle checks so every backend behaves the same (python-can's
    ``recv``/``_recv_internal`` split).
    """

    #: registry name, e.g. "opencv"
    name: str = "base"
    #: True if ``read()`` blocks until the device's next frame (a live camera or stream);
    #: False if it returns at once (a file, the simulator) and the caller must pace it
    self_paced: bool = False

    def __init__(self, settings: Mapping[str, Any] | CameraSettings | None = None) -> None:
        self._settings = CameraSettings.from_mapping(settings or {})
        self.is_open = False

    @property
    def settings(self) -> CameraSettings:
        """The requested width, height and fps."""
        return self._settings

    def open(self) -> None:
        """Connect to the camera; raises :class:`CameraError`. Opening an open source is a no-op."""
        if self.is_open:
            return
        self._open()
        self.is_open = True

    def read(self) -> tuple[np.ndarray, float]:
        """The next frame as an (H, W, 3) uint8 BGR array and its capture time (``time.monotonic()``, s:
        the clock every age on the robot computer is computed on; a wall-clock step moves no age).

        The frame may differ in size from :attr:`settings` when the device does
        not honour the request; the caller scales it. Raises :class:`CameraError`.
        """
        if not self.is_open:
            raise CameraError(f"camera {self.name!r} is not open")
        frame, t = self._read()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise CameraError(f"camera {self.name!r} returned a frame that is not (H, W, 3) uint8")
        return frame, t

    def last_packet(self) -> tuple[bytes, bool] | None:
        """The camera's own H.264 access unit of the frame :meth:`read` returned last, as ``(Annex B
        bytes, keyframe)``, when the device encodes in hardware (or a stream carries H.264); None
        otherwise (the default). The video service then sends it on without re-encoding."""
        return None

    def close(self) -> None:
        """Release the camera; never raises, may be called twice."""
        if not self.is_open:
            return
        self.is_open = False
        try:
            self._close()
        except Exception:  # noqa: BLE001 - closing a lost device must not mask the original error
            pass

    def apply(self, width: int, height: int, fps: float) -> CameraSettings:
        """Change the requested size and rate while open; returns the new settings.

        The default only records them (sources that scale or render on demand
        need nothing more); device backends override ``_apply``. Raises
        :class:`CameraError` if the device refuses, in which case the caller
        reopens the source.
        """
        new = CameraSettings(width, height, fps)
        if self.is_open:
            self._apply(new)
        self._settings = new
        return new

    @classmethod
    def from_context(cls, settings: Mapping[str, Any], context: Mapping[str, Any]) -> "CameraSource":
        """Build from the ``[video]`` settings; ``context`` carries what a camera bound to the robot needs
        (the simulator's camera: ``world`` and ``pose``). Plain cameras ignore it."""
        return cls(settings)

    def describe(self) -> dict[str, Any]:
        """What the status page shows about the source (name, device, …)."""
        return {"name": self.name}

    # for subclasses -------------------------------------------------------
    @abc.abstractmethod
    def _open(self) -> None: ...

    @abc.abstractmethod
    def _read(self) -> tuple[np.ndarray, float]: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    def _apply(self, settings: CameraSettings) -> None:
        return None

    def __enter__(self) -> "CameraSource":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
