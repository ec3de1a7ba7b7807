"""The capture-time strip survives what the video path does to a picture: H.264 at a low tier's bitrate,
a 2:1 downscale, JPEG; and a damaged strip reads as no strip, never as a wrong time."""

from __future__ import annotations

import time

import cv2
import numpy as np

from drivers.camera import strip
from server.gateway.video.encoder import EncoderSettings, TierEncoder


def noisy_frame(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(120, 40, (480, 640, 3)), 0, 255).astype(np.uint8)


def test_the_strip_reads_back_after_h264_at_the_lowest_tier_and_a_2_to_1_downscale() -> None:
    packets = []
    enc = TierEncoder("320x240@10", "h264", 320, 240, 10, 60_000, 60_000, EncoderSettings(max_frame_age_s=10.0),
                      packets.append)
    enc.start()
    stamps = []
    try:
        for i in range(12):
            img = noisy_frame(i)
            t = 1764460800.0 + i * 0.1
            strip.stamp(img, t)
            stamps.append(round(t * 1000) & 0xFFFFFFFF)
            enc.offer(img, time.monotonic(), i + 1)
            deadline = time.time() + 10
            while len(packets) < i + 1 and time.time() < deadline:
                time.sleep(0.005)
            time.sleep(0.1)
    finally:
        enc.stop()
    import av

    dec = av.CodecContext.create("h264", "r")
    read = []
    for p in packets:
        for fr in dec.decode(av.Packet(p.data)):
            read.append((p.seq, strip.read(fr.to_ndarray(format="bgr24"))))
    assert read, "nothing decoded"
    assert all(v == stamps[seq - 1] for seq, v in read), read


def test_the_strip_survives_jpeg_and_a_damaged_strip_is_no_strip() -> None:
    img = noisy_frame(1)
    strip.stamp(img, 12.345)
    jpeg = cv2.imdecode(cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 30])[1], cv2.IMREAD_COLOR)
    assert strip.read(jpeg) == 12345
    bw = 640 // strip.BLOCKS
    jpeg[-bw:, 5 * bw:6 * bw] = 255 - jpeg[-bw:, 5 * bw:6 * bw]  # one data block flipped
    assert strip.read(jpeg) is None
    assert strip.read(noisy_frame(2)) is None  # no strip at all
