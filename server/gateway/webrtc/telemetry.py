"""Telemetry on the ``telemetry`` WebRTC data channel: snapshots that no lost packet holds back.

Why: on ``4g`` (2 % loss, ~120 ms round trip) a TCP socket holds every snapshot behind a lost one until
it is retransmitted (head-of-line blocking): the telemetry age's p99 was 231 ms on the websocket (aiohttp's
plain broadcast 239, foxglove-sdk 311), where a snapshot that is simply lost costs nothing (the next one is
50 ms behind). The browser opens the channel unordered with no retransmission
(web/static/js/video/datachannels.js); a lost snapshot stays lost.

- **What is sent**: the browser's first message is a ``subscribe`` (the websocket's: channels, fields,
  rate_hz, checked against this robot the same way, :func:`~server.gateway.ws_telemetry.check_subscription`).
  Snapshots are decimated to its rate on the same fixed schedule as the socket's.
- **Latest wins, sent only onto an idle association**: a snapshot goes out only when the SCTP association has
  nothing queued (aiortc's outbound queue empty: everything is in flight or acked), otherwise it waits in a
  one-slot mailbox and a newer one replaces it (``dropped``). So a congestion window shrunk by loss costs rate,
  never age, and the ``estop`` and ``control`` channels on the same association never queue behind telemetry.
  A snapshot older than ``telemetry.max_age_s`` when its turn comes is never sent (``expired``).
- **Delta against an acknowledged keyframe**: a keyframe ``{"type": "telemetry", "encoding": "delta", "key": k,
  "data": {...}}`` is acknowledged by the browser (``{"type": "key_ack", "key": k}``); every later message is the
  patch from the newest acknowledged keyframe (``"base": k``), so any message that arrives can be decoded alone
  (a patch from the previous message could not be: that one may be lost). A new keyframe every
  ``keyframe_every`` messages keeps the patches small; until one is acknowledged, keyframes go out.
- **Compressed, one message at a time**: each message is sent as a binary zlib stream of its JSON (no context
  shared between messages: any of them may be lost). The sim rover's dashboard set at 20 Hz: patches from a
  keyframe are ~1.5 KB of JSON (runtime floats have 17 digits), 0.25 Mbit/s; compressed ~0.85 KB, 0.13 Mbit/s,
  under the 0.2 Mbit/s goal and well under the association's congestion window after a loss (4.8 KB per round
  trip, aiortc's floor), so the mailbox seldom waits. The browser inflates with ``DecompressionStream``.
- **The socket stays**: events, replies and the lease stay on ``/ws/telemetry``; the dashboard drops that
  socket's snapshot rate to 2 Hz while the channel delivers, and shows the newest snapshot from either
  (by ``mono_t``), so if the channel dies the socket carries on.

No command arrives here: the channel accepts only ``subscribe`` and ``key_ack`` (anything else is answered with
an error), so it adds no way in (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from typing import Any, Callable

import orjson

from server.errors import ValidationError
from server.gateway.ratelimit import TokenBucket
from server.gateway.subscription import Subscription, diff
from server.gateway.telemetry import Frames, dumps

log = logging.getLogger(__name__)

TELEMETRY = "telemetry"
MAX_MESSAGE = 32 * 1024  # a subscribe of this robot's names fits (the dashboard's is ~2 KB)
KEYS_KEPT = 8  # keyframes sent and not yet acknowledged that an ack may still name
RETRY_S = 0.005  # how often a waiting snapshot looks again for an idle association
MESSAGES_HZ, MESSAGES_BURST = 5.0, 20  # the browser's subscribes and key acks (a keyframe every 2 s: ~0.5 Hz)
#: zlib level of each message (1.6 KB of JSON: ~45 µs on this machine at level 1 or 6, the same size within 1 %)
ZLIB_LEVEL = 1


def association_idle(channel: Any) -> bool:
    """Nothing of ``channel``'s association waits to be sent: the channel's own buffer is empty and aiortc's
    SCTP outbound queue too (what is left is in flight or acknowledged)."""
    if getattr(channel, "bufferedAmount", 0):
        return False
    transport = getattr(channel, "transport", None)
    queue = getattr(transport, "_outbound_queue", None)
    return not queue and not getattr(transport, "_data_channel_queue", None)


class TelemetryChannel:
    """One peer's ``telemetry`` data channel (see the module docstring); the hub offers it every snapshot."""

    def __init__(self, channel: Any, *, check: Callable[[dict[str, Any]], Subscription], max_age_s: float,
                 source_rate_hz: float, idle: Callable[[Any], bool] = association_idle) -> None:
        self.channel = channel
        self._check = check
        self.max_age_s = max_age_s
        self._idle = idle
        self.subscription: Subscription | None = None
        self.slot: Frames | None = None
        self.sent = self.dropped = self.expired = self.decimated = self.keyframes = self.acked = 0
        self.bucket = TokenBucket(MESSAGES_HZ, MESSAGES_BURST)
        self.refused = 0  # browser messages over the budget: dropped unanswered
        self.bytes_sent = 0  # on the channel (compressed)
        self.json_bytes = 0  # the same messages as JSON text
        self._keys: dict[int, dict[str, Any]] = {}  # keyframes sent, by id, that an ack may still name
        self._base: tuple[int, dict[str, Any]] | None = None  # the newest acknowledged keyframe
        self._next_key = 1
        self._since_key = 0
        self._next_due = 0.0
        self._tolerance_s = 0.5 / max(source_rate_hz, 1e-3)
        self._retry: asyncio.TimerHandle | None = None
        self.closed = False

    # ---------------------------------------------------------------- from the browser
    def handle(self, message: Any) -> str | None:
        """A message from the browser; the reply to send back, if any (errors say what was wrong). Beyond the
        message budget nothing is parsed or answered (``refused``): a flood costs neither work nor a send queue
        (aiortc's outbound queue has no bound, and a peer that stops reading would grow it by our replies)."""
        if not self.bucket.take():
            self.refused += 1
            return None
        try:
            if not isinstance(message, str):
                raise ValidationError("the telemetry channel takes JSON text, not binary", code="malformed")
            if len(message) > MAX_MESSAGE:
                raise ValidationError(f"message of {len(message)} characters is over {MAX_MESSAGE}", code="too_large")
            try:
                body = orjson.loads(message)
            except orjson.JSONDecodeError as err:
                raise ValidationError(f"malformed JSON: {err}", code="malformed") from err
            if not isinstance(body, dict):
                raise ValidationError("a message is a JSON object", code="wrong_type")
            kind = body.get("type")
            if kind == "key_ack":
                self._ack(body)
                return None
            if kind == "subscribe":
                sub = self._check({k: v for k, v in body.items() if k != "type"})
                self.subscription = sub
                self._next_due = 0.0
                self._base = None
                self._keys.clear()
                self._since_key = 0
                return dumps({"type": "ack", "id": body.get("id"), "command": "subscribe",
                              "subscription": sub.to_json()})
            raise ValidationError(f"unknown message type {str(kind)[:40]!r} on the telemetry channel: expected "
                                  "subscribe or key_ack (commands go on control and estop)", code="unknown_type")
        except ValidationError as err:
            return dumps({"type": "error", "error": {"code": err.code, "message": str(err)}})

    def _ack(self, body: dict[str, Any]) -> None:
        if set(body) - {"type", "key"}:
            raise ValidationError(f"unknown field(s): {', '.join(sorted(set(body) - {'type', 'key'}))}",
                                  code="unknown_field")
        key = body.get("key")
        if isinstance(key, bool) or not isinstance(key, int):
            raise ValidationError("key_ack needs key, the integer of a keyframe", code="wrong_type")
        part = self._keys.get(key)
        if part is None:
            return  # an old or unknown keyframe (a newer one was acknowledged first): nothing to do
        if self._base is None or key > self._base[0]:
            self._base = (key, part)
            self.acked += 1
        for k in [k for k in self._keys if k < key]:
            del self._keys[k]

    # ---------------------------------------------------------------- to the browser
    def offer(self, frames: Frames) -> None:
        sub = self.subscription
        if sub is None or self.closed:
            return
        period = 1.0 / sub.rate_hz
        if frames.t < self._next_due - self._tolerance_s:
            self.decimated += 1
            return
        self._next_due = self._next_due + period if frames.t - self._next_due < period else frames.t + period
        if self.slot is not None:
            self.dropped += 1
        self.slot = frames
        self._pump()

    def _pump(self) -> None:
        self._retry = None
        frames = self.slot
        if frames is None or self.closed:
            return
        if getattr(self.channel, "readyState", "open") != "open":
            return
        if not self._idle(self.channel):
            if self._retry is None:
                self._retry = asyncio.get_running_loop().call_later(RETRY_S, self._pump)
            return
        self.slot = None
        if self.max_age_s > 0 and time.monotonic() - frames.t > self.max_age_s:
            self.expired += 1
            return
        text = self._message(frames)
        data = zlib.compress(text.encode(), ZLIB_LEVEL)
        try:
            self.channel.send(data)
        except Exception:  # noqa: BLE001 - a channel closing under us: the socket still carries telemetry
            log.debug("telemetry data channel send failed", exc_info=True)
            return
        self.sent += 1
        self.bytes_sent += len(data)
        self.json_bytes += len(text)

    def _message(self, frames: Frames) -> str:
        sub = self.subscription
        assert sub is not None
        part, data = frames.selected(sub)
        if self._base is None or self._since_key + 1 >= sub.keyframe_every:
            key = self._next_key
            self._next_key += 1
            self._keys[key] = part
            while len(self._keys) > KEYS_KEPT:
                del self._keys[min(self._keys)]
            self._since_key = 0
            self.keyframes += 1
            return f'{{"type":"telemetry","dropped":{self.dropped},"encoding":"delta","key":{key},' \
                   f'"data":{data.decode()}}}'
        self._since_key += 1
        base_key, base = self._base
        patch, deleted = diff(base, part)
        return f'{{"type":"telemetry","dropped":{self.dropped},"encoding":"delta","base":{base_key},' \
               f'"data":{dumps(patch)}' + (f',"deleted":{dumps(deleted)}}}' if deleted else "}")

    def close(self) -> None:
        self.closed = True
        self.slot = None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def to_json(self) -> dict[str, Any]:
        sub = self.subscription
        return {"subscription": None if sub is None else sub.to_json(), "sent": self.sent, "dropped": self.dropped,
                "expired": self.expired, "decimated": self.decimated, "keyframes": self.keyframes,
                "acked": self.acked, "refused": self.refused, "bytes_sent": self.bytes_sent,
                "json_bytes": self.json_bytes}
