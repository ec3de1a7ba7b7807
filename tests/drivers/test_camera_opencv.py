"""OpenCV camera source against a video file the test writes itself, plus the camera contract.

:class:`TestCameraContract` runs against every camera backend (the OpenCV file
source and the sim camera), as the driver contract does for drivers.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from drivers.camera.base import CameraError, CameraSource
from drivers.camera.opencv import OpenCvCamera
from drivers.camera.sim import SimCamera
from drivers.registry import camera_class
from sim.world import World
from tests.conftest import wait_until

pytestmark = pytest.mark.timeout(30)

LEVELS = [30, 80, 130, 180, 230]  # grey level of each frame


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    """A 5-frame 64×48 MJPG .avi, frame i a flat grey of ``LEVELS[i]``."""
    path = tmp_path / "clip.avi"
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (64, 48))
    assert out.isOpened()
    for level in LEVELS:
        out.write(np.full((48, 64, 3), level, np.uint8))
    out.release()
    return path


def levels(cam: OpenCvCamera, n: int) -> list[int]:
    return [int(round(cam.read()[0].mean())) for _ in range(n)]


def test_registry_names_the_opencv_camera():
    assert camera_class("opencv") is OpenCvCamera


def test_reads_the_file_frames_in_order_with_capture_times(clip):
    cam = OpenCvCamera({"device": str(clip), "width": 64, "height": 48})
    with cam:
        frame, t = cam.read()
        assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8
        assert t == pytest.approx(time.monotonic(), abs=5.0)
        got = [int(round(frame.mean()))] + levels(cam, 4)
    assert got == pytest.approx(LEVELS, abs=3)
    assert cam.describe()["kind"] == "file" and not cam.self_paced


def test_file_loops_at_the_end(clip):
    with OpenCvCamera({"device": str(clip), "loop_file": True}) as cam:
        assert levels(cam, 7) == pytest.approx(LEVELS + LEVELS[:2], abs=3)


def test_end_of_file_without_loop_is_a_camera_error(clip):
    with OpenCvCamera({"device": str(clip)}, loop_file=False) as cam:
        levels(cam, 5)
        with pytest.raises(CameraError, match="end of video file"):
            cam.read()


def test_missing_file_fails_on_open(tmp_path):
    cam = OpenCvCamera({"device": str(tmp_path / "nope.avi")})
    with pytest.raises(CameraError, match="no such video file"):
        cam.open()
    assert not cam.is_open


def test_missing_device_path_fails_on_open():
    with pytest.raises(CameraError, match="no such camera device"):
        OpenCvCamera({"device": "/dev/video-does-not-exist"}).open()


def test_unreachable_stream_fails_on_open_without_leaking_credentials():
    cam = OpenCvCamera({"device": "rtsp://admin:hunter2@127.0.0.1:9/stream"}, open_timeout_s=2.0)
    assert cam.self_paced
    with pytest.raises(CameraError) as info:
        cam.open()
    assert "hunter2" not in str(info.value) and "***@127.0.0.1:9" in str(info.value)
    assert "hunter2" not in str(cam.describe())


@pytest.mark.parametrize("device, kind", [(0, "device"), ("1", "device"), ("/dev/video0", "device"),
                                          ("http://cam/mjpg", "stream"), ("clip.mp4", "file")])
def test_device_kind(device, kind):
    assert OpenCvCamera({"device": device}).kind == kind


def test_fail__device_of_the_wrong_type():
    with pytest.raises(CameraError):
        OpenCvCamera({"device": 1.5})


# --------------------------------------------------------------------------- contract for every backend


@pytest.fixture(params=["opencv-file", "sim"])
def backend(request, clip) -> CameraSource:
    settings = {"width": 64, "height": 48, "fps": 30}
    if request.param == "opencv-file":
        return OpenCvCamera({**settings, "device": str(clip)})
    world = World.from_config({"size_m": [6.0, 4.0]})
    return SimCamera(settings, world, lambda: {"x": 1.0, "y": 2.0, "yaw": 0.0}, np.random.default_rng(0))


class TestCameraContract:
    def test_read_before_open_is_an_error(self, backend):
        with pytest.raises(CameraError):
            backend.read()

    def test_open_read_close(self, backend):
        backend.open()
        backend.open()  # no-op
        try:
            for _ in range(3):
                frame, t = backend.read()
                assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
                assert isinstance(t, float) and abs(t - time.monotonic()) < 5.0
        finally:
            backend.close()
        backend.close()  # twice is fine
        with pytest.raises(CameraError):
            backend.read()

    def test_reopen_after_close(self, backend):
        with backend:
            backend.read()
        with backend:
            backend.read()

    def test_apply_records_the_new_settings(self, backend):
        with backend:
            s = backend.apply(32, 24, 10)
            assert (s.width, s.height, s.fps) == (32, 24, 10.0) == tuple(backend.settings.__dict__.values())
            backend.read()

    def test_describe_names_the_backend(self, backend):
        assert backend.describe()["name"] == backend.name


def test_sim_camera_render_process_draws_the_same_picture() -> None:
    """The out-of-process renderer (default) and the in-process one give identical frames."""
    from drivers.camera.sim import SimCamera
    from sim.world import World

    world = World.from_config({"size_m": [6.0, 4.0], "boxes": [{"center": [4.5, 2.0], "size": [0.4, 0.4]}]})
    pose = {"x": 3.0, "y": 2.0, "z": 0.0, "yaw": 0.1, "pitch": 0.02, "roll": -0.03, "t": 1.5}
    frames = []
    for remote in (True, False):
        cam = SimCamera({"width": 160, "height": 120, "render_process": remote}, world, lambda: pose,
                        clock=lambda: 100.0)  # one capture time: the time strips match too
        cam.open()
        try:
            cam.read()  # the first read (the capture's check at start-up) is drawn here: no process yet
            assert cam._worker is None
            if remote:  # the second starts the process; frames are drawn here until it is ready
                wait_until(lambda: cam.read() is not None and cam._worker_ready, 30, "the render process ready")
                assert cam._worker is not None and cam._worker.is_alive()
            cam.frame_no = 7  # the overlay shows the frame number: the same in both
            frames.append(cam.read()[0])
            assert (cam._worker is not None) is remote
        finally:
            cam.close()
        assert cam._worker is None
    assert frames[0].shape == (120, 160, 3)
    assert (frames[0] == frames[1]).all()
