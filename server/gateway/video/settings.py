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

from drivers.tables import explain, non_finite_path
from server.config import Table
from server.settings import SlotLimits
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


class TierTable(msgspec.Struct, forbid_unknown_fields=True):
    """One ``[[video.tiers]]`` entry: a size, a frame rate and the bitrate range the controller may use."""

    name: Annotated[str, Meta(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.@x-]+$")]
    width: _i(32, 3840)
    height: _i(32, 2160)
    fps: _i(1, 60)
    min_bitrate_bit_s: _i(20_000, 50_000_000)
    max_bitrate_bit_s: _i(20_000, 50_000_000)

    def __post_init__(self) -> None:
        if self.width % 2 or self.height % 2:
            raise ValueError(f"tier {self.name}: width and height must be even (4:2:0 video)")
        if self.max_bitrate_bit_s < self.min_bitrate_bit_s:
            raise ValueError(f"tier {self.name}: max_bitrate_bit_s must be >= min_bitrate_bit_s")


#: the default ladder (docs/video.md): the bitrate steps first, then the frame rate, then the size. Each
#: tier's top is at least 1.1 × the floor of the one above: a receiver's estimate (REMB) grows to at most
#: 1.5 × what it receives, so 70 % of it must be able to clear the better tier's floor (+15 %) from inside.
#: Formant's 480p runs at 2.5 Mbit/s, Viam cut its cap to 3 (notes/networks.md); 1.5 Mbit/s gives SSIM
#: 0.96-0.98 on 640x480@30 with texture and noise here (bench/bench_webrtc.py)
DEFAULT_TIERS = (
    TierTable("640x480@30", 640, 480, 30, 700_000, 1_500_000),
    TierTable("640x480@15", 640, 480, 15, 400_000, 900_000),
    TierTable("480x360@15", 480, 360, 15, 220_000, 500_000),
    TierTable("320x240@10", 320, 240, 10, 60_000, 280_000),
)


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
    texture: bool = False  # sim: a textured floor (real-camera-size frames: JPEG q70 >= 50 KB at 640x480)
    time_strip: bool = True  # sim: the capture time as a strip of blocks (glass-to-glass latency)
    render_process: bool = True
    #: sim: "h264" also encodes each picture in the camera (a hardware encoder's stand-in, sim/camera_h264.py):
    #: the gateway passes it through as tier "native", no encoder of its own
    format: Literal["bgr", "h264"] = "bgr"
    # encoded video (H.264/VP8 for WebRTC and for H.264 over the websocket): one encoder per tier
    tiers: list[TierTable] = msgspec.field(default_factory=lambda: list(DEFAULT_TIERS))
    h264_preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium"] = "veryfast"
    encoder_threads: _i(1, 16) = 1
    gop_s: _f(0.1, 60.0) = 2.0  # a keyframe at least this often; more on request
    keyframe_min_interval_s: _f(0.0, 60.0) = 1.0  # requests within this of the last forced keyframe merge
    max_frame_age_s: _f(0.02, 5.0) = 0.25  # a frame older than this at the sender is dropped, not sent
    passthrough: bool = True  # send a camera's own H.264 without re-encoding it (tier "native")
    rate_share: _f(0.1, 1.0) = 0.7  # the target: this share of the measured path
    # issue 20 §5: a JPEG websocket viewer's stream stays under this share of its path's measured throughput
    # (quality, size, then fps stepped down from its ack timing; server.gateway.video.jpeg_pacing)
    jpeg_link_share: _f(0.05, 1.0) = 0.5
    jpeg_pacing: bool = True
    # viewers (websocket + MJPEG) at once; more are refused with 503 busy. The same numbers, counted apart,
    # bound the vision overlay sockets (drawn over the video). Who gets them (server.gateway.admission):
    # per login session, per address and tier, and slots kept for the lease holder and for operators
    max_viewers: _i(1, 10000) = 20
    max_per_session: _i(1, 10000) = 4
    max_per_address: _i(1, 10000) = 8
    reserved_for_lease: _i(0, 10000) = 2
    reserved_for_operators: _i(0, 10000) = 4

    def __post_init__(self) -> None:
        if isinstance(self.device, int) and self.device < 0 or self.device == "":
            raise ValueError("device must be a device index >= 0 or a non-empty path or URL")
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError("retry_max_s must be >= retry_initial_s")
        if not self.tiers:
            raise ValueError("tiers must list at least one tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names) or "native" in names:
            raise ValueError("tier names must be unique (and 'native' is the camera's own stream)")
        if any(b.max_bitrate_bit_s > a.max_bitrate_bit_s for a, b in zip(self.tiers, self.tiers[1:])):
            raise ValueError("tiers must be listed best first (max_bitrate_bit_s not increasing)")
        viewer_slots(self).check("max_viewers")


def viewer_slots(settings: "Mapping[str, Any] | VideoConfig") -> SlotLimits:
    """The limits of video viewers, and (counted apart) of vision overlay sockets, from a ``[video]`` table."""
    if isinstance(settings, VideoConfig):
        settings = msgspec.structs.asdict(settings)
    return SlotLimits(total=settings["max_viewers"], per_session=settings["max_per_session"],
                      per_address=settings["max_per_address"], lease=settings["reserved_for_lease"],
                      operators=settings["reserved_for_operators"])


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
    if not isinstance(table, Mapping):
        raise ValueError("video must be a table")
    unknown = sorted(set(table) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"video: unknown key(s): {', '.join(map(str, unknown))}")
    if isinstance(table.get("device"), bool):
        raise ValueError("video.device must be a device index >= 0 or a non-empty path or URL")
    bad = non_finite_path(dict(table))
    if bad is not None:
        raise ValueError(f"video{bad} must be finite")
    try:
        cfg = msgspec.convert(dict(table), VideoConfig)
    except msgspec.ValidationError as err:  # the one explainer's verdict, worded for this table
        e = explain(err)
        if e.kind == "wrong_type" and e.want == ("int",):
            raise ValueError(f"video{e.path} must be an integer, not {e.got}") from None
        raise ValueError(f"video{e.path} {e.detail[0].lower()}{e.detail[1:]}") from None
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
