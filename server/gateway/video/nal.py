"""H.264 access units as length-prefixed NAL units: the payload of an H.264 frame on ``/ws/video``.

libx264 writes Annex B (NAL units after ``00 00 01`` or ``00 00 00 01`` start codes); WebCodecs
decodes AVC format when the decoder is configured with an ``avcC`` description (ISO 14496-15):
each NAL unit after its length as a 4-byte big-endian integer. The browser builds the
description from the SPS and PPS every keyframe carries (web/static/js/video/h264.js), so the
stream needs no out-of-band set-up and survives a tier change (a new size: new SPS).

>>> annexb = b"\\x00\\x00\\x00\\x01\\x67\\x42" + b"\\x00\\x00\\x01\\x68\\xce" + b"\\x00\\x00\\x01\\x65\\x88\\x84"
>>> [u[0] & 0x1F for u in split_annexb(annexb)]
[7, 8, 5]
>>> length_prefixed(annexb).hex()
'0000000267420000000268ce00000003658884'
"""

from __future__ import annotations

from typing import Iterator

#: NAL unit types (ITU-T H.264 table 7-1) the framing cares about
IDR, SPS, PPS = 5, 7, 8


def split_annexb(buf: bytes) -> Iterator[bytes]:
    """The NAL units of an Annex B byte stream, without their start codes."""
    i = buf.find(b"\x00\x00\x01")
    while i != -1:
        start = i + 3
        j = buf.find(b"\x00\x00\x01", start)
        if j == -1:
            unit = buf[start:]
        else:
            end = j - 1 if buf[j - 1] == 0 else j  # a 4-byte start code's leading zero
            unit = buf[start:end]
        if unit:
            yield unit
        i = j


def length_prefixed(annexb: bytes) -> bytes:
    """Annex B → NAL units each after a 4-byte big-endian length (AVC format)."""
    return b"".join(len(u).to_bytes(4, "big") + u for u in split_annexb(annexb))


def nal_types(annexb: bytes) -> list[int]:
    return [u[0] & 0x1F for u in split_annexb(annexb)]
