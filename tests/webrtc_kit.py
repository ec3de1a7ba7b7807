"""What the aiortc test clients share: read a signalling socket (its messages kept, the answer applied), and wait
for a condition with a deadline."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable


async def read_signals(ws: Any, pc: Any, signals: list[dict] | None = None) -> None:
    """Every message of a ``/ws/webrtc`` socket into ``signals``; the ``answer`` set as ``pc``'s remote description."""
    from aiortc import RTCSessionDescription

    async for msg in ws:
        d = json.loads(msg.data)
        if signals is not None:
            signals.append(d)
        if d["type"] == "answer":
            await pc.setRemoteDescription(RTCSessionDescription(d["sdp"], "answer"))


async def until(cond: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """``cond()``'s first true value, polled every 20 ms; fails saying ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)
    return value
