"""The ``[video]`` table and the run-time settings (``PUT /api/video``) of the camera.

>>> validate_video_settings({"fps": 15})["fps"]
15
>>> validate_video_settings({"fps": 15.5})
Traceback (most recent call last):
...
ValueError: video.fps must be an integer, not float
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Mapping

import msgspec
from msgspec import Meta

from server.config import Table
from server.validation import convert

#: settings the operator may change at run time: key → (min, max), all integers
RUNTIME_LIMITS: dict[str, tuple[int, int]] = {
    "width": (32, 3840),
    "height": (32, 2160),
    "fps": (1, 60),
    "quality": (10, 100),
}


def _f(lo: float, hi: float, *, gt: bool = False) -> type:
    return Annotated[float, Meta(gt=lo, le=hi) if gt else Meta(ge=lo, le=hi)]


def _i(lo: int, hi: int) -> type:
    return Annotated[int, Meta(ge=lo, le=hi)]


class VideoConfig(Table):
    """The ``[video]`` table (docs/video.md)."""

    enabled: bool = True
    source: Literal["sim", "opencv"] = "sim"  # "sim" renders the simulator's world; "opencv" reads a camera
    device: int | str = 0  # OpenCV: an index, a device path, a file or a stream URL
    width: _i(*RUNTIME_LIMITS["width"]) = 640
    height: _i(*RUNTIME_LIMITS["height"]) = 480
    fps: _i(*RUNTIME_LIMITS["fps"]) = 30
    quality: _i(*RUNTIME_LIMITS["quality"]) = 70  # JPEG quality
    retry_initial_s: _f(0.01, 60.0) = 0.5
    retry_max_s: _f(0.01, 3600.0) = 10.0
    retry_limit: _i(0, 10**9) = 0  # 0 = retry forever
    loop_file: bool = True
    # sim camera only
    hfov_deg: _f(10.0, 170.0) = 70.0
    mount_height_m: _f(0.0, 10.0) = 0.25
    mount_forward_m: _f(-5.0, 5.0) = 0.10
    mount_pitch_deg: _f(-90.0, 90.0) = 0.0
    noise_sigma: _f(0.0, 64.0) = 0.0
    render_process: bool = True
    # viewers (websocket + MJPEG) at once; more are refused with 503 busy
    max_viewers: _i(1, 10000) = 20

    def __post_init__(self) -> None:
        if isinstance(self.device, int) and self.device < 0 or self.device == "":
            raise ValueError("device must be a device index >= 0 or a non-empty path or URL")
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("retry_max_s must be >= retry_initial_s")


DEFAULTS: dict[str, Any] = msgspec.structs.asdict(VideoConfig())


def validate_video_settings(table: Mapping[str, Any] | VideoConfig) -> dict[str, Any]:
    """A ``[video]`` table (or its struct) as a plain dict with defaults; ``ValueError`` names the key.

    >>> s = validate_video_settings({"source": "opencv", "device": "/dev/video0"})
    >>> s["device"], s["width"], s["retry_max_s"]
    ('/dev/video0', 640, 10.0)
    >>> validate_video_settings({"colour": "red"})
    Traceback (most recent call last):
    ...
    ValueError: video: unknown key(s): colour
    """
    if isinstance(table, VideoConfig):
        return msgspec.structs.asdict(table)
    from server.config import ConfigError, load_config

    if not isinstance(table, Mapping):
        raise ValueError("video must be a table")
    unknown = sorted(set(table) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"video: unknown key(s): {', '.join(map(str, unknown))}")
    if isinstance(table.get("device"), bool):
        raise ValueError("video.device must be a device index >= 0 or a non-empty path or URL")
    try:
        cfg = load_config(None, overrides={"video": dict(table)}, tables=("video",)).video
    except ConfigError as err:
        msg = str(err).split(": ", 1)[1].replace("'", "")
        for key in DEFAULTS:
            if msg.startswith(f"video.{key} expected `int`") or msg.startswith(f"video.{key} expected int,"):
                got = msg.rsplit("got ", 1)[-1].rstrip(")").replace("`", "")
                raise ValueError(f"video.{key} must be an integer, not {got}") from None
        raise ValueError(msg) from None
    return msgspec.structs.asdict(cfg)


class RuntimeSettings(msgspec.Struct, forbid_unknown_fields=True):
    """``PUT /api/video``: any of the run-time settings, integers in range."""

    width: int | None = None
    height: int | None = None
    fps: int | None = None
    quality: int | None = None


def validate_runtime_settings(obj: Mapping[str, Any]) -> dict[str, int]:
    """Check a ``PUT /api/video`` body: any of width, height, fps, quality as integers in range.

    Raises :class:`server.errors.ValidationError` (422); unknown fields, floats, booleans and
    NaN are refused."""
    from server.errors import ValidationError

    s = convert(dict(obj), RuntimeSettings)
    out = {}
    for key, (lo, hi) in RUNTIME_LIMITS.items():
        v = getattr(s, key)
        if v is None:
            if key in obj:
                raise ValidationError(f"{key} must be an integer, not NoneType", code="wrong_type")
            continue
        if not lo <= v <= hi:
            raise ValidationError(f"{key}={v} is outside the limits [{lo}, {hi}]", code="out_of_limits")
        out[key] = v
    return out
