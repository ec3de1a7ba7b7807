"""The simulator's camera: :func:`sim.camera.render` of the world from the robot's pose.

The sim driver builds it in ``camera_source(settings)``::

    SimCamera(settings, world, pose_fn=lambda: dict(self._pose), rng=self._camera_rng)

``pose_fn`` is called from the video capture thread, so it must be cheap and
thread-safe: return a copy of the latest pose (``x, y, z`` m; ``yaw, pitch,
roll`` rad; optionally ``t``, the sim time in s, shown in the overlay) that the
control thread replaces as a whole each tick. ``rng`` must be the camera's own
``numpy.random.Generator`` (a Generator is not thread-safe; spawn one from the
sim's seed), used only for sensor noise.

Settings keys (the ``[video]`` table; degrees at this edge, radians inside):
``width``, ``height``, ``fps``, ``hfov_deg`` (70), ``mount_height_m`` (0.25),
``mount_forward_m`` (0.10), ``mount_pitch_deg`` (0, positive tilts down),
``noise_sigma`` (0, grey levels), ``texture`` (false: a textured floor and walls, real-camera-size
frames), ``time_strip`` (true: the capture time as blocks in the bottom rows, drivers/camera/strip.py),
``render_process`` (true), ``format`` (``"bgr"``; ``"h264"``: each picture is also encoded to H.264 by
:class:`sim.camera_h264.H264Sensor`, the stand-in for a camera's hardware encoder, and handed on by
:meth:`last_packet`, so the gateway sends it without re-encoding; keyframes on :meth:`request_keyframe`).

With ``render_process`` the picture is drawn in a separate process (started by the second read; the
first, the capture's check at start-up, and those until it is ready are drawn in-thread): rendering is
numpy work that holds the GIL for a few milliseconds per frame, and in the
server's process that time is taken from the control-loop thread (measured:
1 kHz deadlines met fell from 100 % to 99.6 % with the renderer in a thread). The
capture thread then only sends the pose (a few bytes) and receives the pixels,
and pipe I/O releases the GIL.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import time
from typing import Any, Callable, Mapping

import numpy as np

from drivers.camera import strip
from drivers.camera.base import CameraError, CameraSettings, CameraSource
from sim.camera import CameraIntrinsics, CameraMount, render
from sim.world import World


#: the render process imports numpy and cv2: about a second on a loaded machine
WORKER_START_S = 30.0
#: how long a read waits for the simulator's first pose
POSE_WAIT_S = 10.0


class SimCamera(CameraSource):
    """A synthetic camera on the simulated robot; ``read()`` renders at once (the caller paces it)."""

    name = "sim"

    def __init__(
        self,
        settings: Mapping[str, Any] | CameraSettings | None,
        world: World,
        pose_fn: Callable[[], Mapping[str, float]],
        rng: np.random.Generator | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings)
        table = settings if isinstance(settings, Mapping) else {}
        self.world = world
        self.pose_fn = pose_fn
        self.rng = rng
        self.clock = clock
        self.hfov_rad = math.radians(float(table.get("hfov_deg", 70.0)))
        self.noise_sigma = float(table.get("noise_sigma", 0.0))
        self.texture = bool(table.get("texture", False))
        self.time_strip = bool(table.get("time_strip", True))
        self.mount = CameraMount(
            forward_m=float(table.get("mount_forward_m", 0.10)),
            height_m=float(table.get("mount_height_m", 0.25)),
            pitch_rad=math.radians(float(table.get("mount_pitch_deg", 0.0))),
        )
        self.frame_no = 0
        self._intrinsics = self._make_intrinsics(self._settings)
        self.render_process = bool(table.get("render_process", True))
        self._worker: mp.process.BaseProcess | None = None
        self._conn = None
        self._worker_ready = False
        self._worker_started_t = 0.0
        self.format = str(table.get("format", "bgr"))
        self._sensor = None  # format "h264": the camera's encoder
        self._packet: tuple[bytes, bool] | None = None

    @classmethod
    def from_context(cls, settings: Mapping[str, Any], context: Mapping[str, Any]) -> "SimCamera":
        """``context``: ``world`` (the ``[sim.world]`` table, as ``GET /api/robot`` describes it) and
        ``pose`` (a callable returning the latest true pose, e.g. from the runtime's snapshots)."""
        if "pose" not in context:
            raise ValueError("the sim camera needs the robot's pose (a simulated robot)")
        world_cfg = context.get("world")
        if callable(world_cfg):  # known once the robot is described (the runtime connected)
            world_cfg = world_cfg()
        if world_cfg is None:
            raise CameraError("sim camera: the simulated world is not known yet (is the robot runtime up?)")
        try:
            world = World.from_config(world_cfg)
        except (KeyError, TypeError, ValueError) as err:
            raise CameraError(f"sim camera: the world does not build: {err}") from err
        return cls(settings, world, context["pose"], np.random.default_rng(int(context.get("seed", 0))))

    def _make_intrinsics(self, s: CameraSettings) -> CameraIntrinsics:
        try:
            return CameraIntrinsics(s.width, s.height, self.hfov_rad, self.noise_sigma)
        except ValueError as err:
            raise CameraError(f"sim camera: {err}") from err

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "sim", "hfov_deg": round(math.degrees(self.hfov_rad), 2)}

    def _open(self) -> None:
        self._intrinsics = self._make_intrinsics(self._settings)
        self.frame_no = 0
        if self.format == "h264":
            self._start_sensor()

    def _start_sensor(self) -> None:
        from sim.camera_h264 import H264Sensor

        if self._sensor is not None:
            self._sensor.close()
        s = self._settings
        self._sensor = H264Sensor(s.width, s.height, s.fps)

    def last_packet(self) -> tuple[bytes, bool] | None:
        """Format ``h264``: the access unit of the picture :meth:`read` returned last."""
        return self._packet

    def request_keyframe(self) -> None:
        """A viewer needs a keyframe of the camera's own stream (forwarded by the gateway)."""
        if self._sensor is not None:
            self._sensor.request_keyframe()

    def _start_worker(self) -> None:
        """Start the render process; it says "ready" once its imports are done (:meth:`_remote`)."""
        # "spawn": forking a process that runs threads (control loop, event loop) is unsafe
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        seed = int(self.rng.integers(2**63)) if self.rng is not None else None
        self._worker = ctx.Process(target=_render_worker, args=(child, self.world, self.mount, seed, self.texture),
                                   name="teleop-sim-camera", daemon=True)
        self._worker.start()
        child.close()
        self._conn = parent
        self._worker_ready = False
        self._worker_started_t = time.monotonic()

    def _remote(self):
        """The render process's pipe once it is ready, else None (frames are drawn here meanwhile)."""
        conn = self._conn
        if conn is None or self._worker_ready:
            return conn
        try:
            if conn.poll(0):
                conn.recv()  # "ready"
                self._worker_ready = True
                return conn
        except (EOFError, OSError) as err:
            self._stop_worker()
            raise CameraError(f"sim camera: the render process died while starting: {err}") from err
        if time.monotonic() - self._worker_started_t > WORKER_START_S:
            self._stop_worker()
            raise CameraError(f"sim camera: the render process did not start within {WORKER_START_S:g} s")
        return None

    def _read(self) -> tuple[np.ndarray, float]:
        # the render process starts with the second read: the first is the capture's check that the camera works
        # (at every server start), and a camera nobody watches then costs no interpreter importing numpy and cv2;
        # until the process is ready (~1 s) frames are drawn in this thread
        if self.render_process and self._conn is None and self.frame_no > 0:
            self._start_worker()
        pose = self._pose()
        t = self.clock()  # the pose is the instant the picture shows
        t_sim = float(pose.get("t", self.frame_no / self._settings.fps))
        if self._remote() is not None:
            frame = self._render_remote(dict(pose), t_sim)
        else:
            frame = render(self.world, pose, self._intrinsics, t_sim, self.frame_no, self.rng, mount=self.mount,
                           texture=self.texture)
        self.frame_no += 1
        if self.time_strip:
            frame = np.array(frame)  # the render process's buffer is read-only
            strip.stamp(frame, t)  # the capture time, in the picture (glass-to-glass latency)
        if self._sensor is not None:
            self._packet = self._sensor.encode(frame, t)
        return frame, t

    def _pose(self) -> Mapping[str, float]:
        """The robot's pose now; until the simulator has sent one (the gateway's camera opens as it connects to the
        runtime) this waits, as a real camera's first frame takes a moment: a picture from a made-up pose showed
        vision the wrong marker at start-up."""
        deadline = time.monotonic() + POSE_WAIT_S
        while True:
            try:
                pose = self.pose_fn()
            except Exception as err:  # noqa: BLE001 - a broken pose source is a camera failure, not a crash
                raise CameraError(f"sim camera: pose unavailable: {err}") from err
            if "x" in pose and "y" in pose:
                return pose
            if time.monotonic() > deadline:
                raise CameraError(f"sim camera: the robot's pose is not known (none within {POSE_WAIT_S:g} s)")
            time.sleep(0.01)

    def _render_remote(self, pose: dict[str, float], t_sim: float) -> np.ndarray:
        intr = self._intrinsics
        try:
            self._conn.send((pose, (intr.width, intr.height, intr.hfov_rad, intr.noise_sigma), t_sim, self.frame_no))
            if not self._conn.poll(5.0):
                raise CameraError("sim camera: the render process did not answer within 5 s")
            data = self._conn.recv_bytes()
        except (EOFError, OSError, BrokenPipeError) as err:
            raise CameraError(f"sim camera: the render process died: {err}") from err
        if not data:
            raise CameraError("sim camera: the render process failed (see its log)")
        return np.frombuffer(data, dtype=np.uint8).reshape(intr.height, intr.width, 3)

    def _stop_worker(self) -> None:
        conn, self._conn = self._conn, None
        worker, self._worker = self._worker, None
        self._worker_ready = False
        if conn is not None:
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            conn.close()
        if worker is not None:
            worker.join(2.0)
            if worker.is_alive():
                worker.kill()
                worker.join(2.0)

    def _apply(self, settings: CameraSettings) -> None:
        self._intrinsics = self._make_intrinsics(settings)
        if self._sensor is not None:
            self._settings = settings
            self._start_sensor()  # a new size: a new encoder (its first frame is a keyframe)

    def _close(self) -> None:
        self._stop_worker()
        sensor, self._sensor = self._sensor, None
        if sensor is not None:
            sensor.close()
        self._packet = None


def _render_worker(conn, world: World, mount: CameraMount, seed: int | None, texture: bool = False) -> None:
    """The render process: pose in, BGR pixels out, until ``None`` or the pipe closes."""
    rng = np.random.default_rng(seed) if seed is not None else None
    conn.send("ready")
    cache: dict[tuple, CameraIntrinsics] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        pose, key, t_sim, frame_no = msg
        try:
            intr = cache.get(key) or cache.setdefault(key, CameraIntrinsics(*key))
            frame = render(world, pose, intr, t_sim, frame_no, rng, mount=mount, texture=texture)
            conn.send_bytes(np.ascontiguousarray(frame).data.cast("B"))  # flat: send_bytes counts items
        except Exception:  # noqa: BLE001 - reported to the capture thread as a failed frame
            conn.send_bytes(b"")
