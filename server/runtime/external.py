"""Channels measured outside the runtime (the gateway's vision pipeline), put into every tick's frame.

The camera and its pipeline run in the gateway (docs/vision.md); their measurements reach the
runtime through the runtime API (``declare_channels`` once per connection, ``measurements`` per
processed frame, docs/runtime-api.md). This stage holds the newest measurement of each source
and, every tick, writes its values into the frame **with the frame's capture time as their
sample time** (:attr:`ExternalChannels.sample_times`, merged into the tick's sample times by the
control loop). So a rule on an external channel goes stale like any sensor's: when the camera
stops, the pipeline falls behind or the gateway dies, its age passes ``safety.sensor_stale_s``
and the supervisor stops the robot (``sensor_stale``); a value older than that is written as NaN
(nothing trips on it, nothing steers by it, the dashboard shows "—").

Which names an external source may publish is fixed here, not learnt from the gateway:
the vision pipeline's channels are ``vision_*`` and ``marker_{id}_*`` (:func:`is_external`), so
a safety rule may name them in the profile before any gateway has connected (the robot then
refuses to start until they are fresh, fail safe), while a typo in any other rule's channel still
stops start-up. The launcher checks the names against the pipeline's own list
(:meth:`server.gateway.vision.config.VisionConfig.check_profile`).

Marker observations (range and bearing to markers of a known map) go to the estimator as
position fixes (:meth:`server.runtime.estimation.EstimationStage.update_markers`), in the control
thread, once per measurement.

Threads: :meth:`declare` and :meth:`measure` run on the runtime API's asyncio thread and only
swap in new immutable objects (copy-on-write); :meth:`process` runs in the control thread.

>>> ext = ExternalChannels(max_age_s=0.5)
>>> ext.declare("vision", [ChannelSpec("vision_clear_m", "m", 0.0, 2.0)], {})
>>> ext.measure("vision", {"vision_clear_m": 1.2}, sample_t=10.0, now=10.05)
>>> values = {}
>>> ext.process(values, 0.01, 10.1)
>>> values["vision_clear_m"], ext.sample_times["vision_clear_m"]
(1.2, 10.0)
>>> ext.process(values, 0.01, 10.6)          # 0.6 s after capture: stale
>>> values["vision_clear_m"]
nan
"""

from __future__ import annotations

import collections
import logging
import math
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from drivers.base import ChannelSpec
from robotics.estimation.markers import MarkerObservation
from server.runtime.stage import Stage
from server.runtime_api.params import EXTERNAL_SOURCES

log = logging.getLogger(__name__)

#: the sources the runtime accepts and the channel-name prefixes each may publish
SOURCES = EXTERNAL_SOURCES
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_CHANNELS = 256
MAX_MARKERS = 1000
MAX_OBSERVATIONS = 64
#: a sample time further ahead of the runtime's clock than this is refused (the clocks are the same
#: CLOCK_MONOTONIC on one host; a sample "from the future" would never go stale)
MAX_AHEAD_S = 0.05


def is_external(name: str) -> bool:
    """Whether ``name`` is a channel an external source may publish (a safety rule may name it).

    >>> is_external("vision_clear_m"), is_external("marker_3_range_m"), is_external("range_front_m")
    (True, True, False)
    """
    return bool(_NAME.match(name)) and any(name.startswith(p) for ps in SOURCES.values() for p in ps)


class ExternalError(ValueError):
    """A declaration or a measurement that cannot be used; the message names what is wrong."""


@dataclass(frozen=True)
class Declaration:
    """What a source publishes: its channel specs (``gauge``: listed with the robot's channels, so the
    dashboard shows a widget) and, for markers, the map ``id → (x, y, psi)``."""

    specs: tuple[ChannelSpec, ...]
    gauges: frozenset[str]
    markers: Mapping[int, tuple[float, float, float]]
    names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(s.name for s in self.specs))


@dataclass(frozen=True)
class Measurement:
    """One result of a source: values (NaN: nothing to say), capture time and arrival time
    (monotonic s), marker observations."""

    seq: int
    values: Mapping[str, float]
    sample_t: float
    arrival_t: float
    observations: tuple[MarkerObservation, ...] = ()


class ExternalChannels(Stage):
    """The stage (``name = "external"``); see the module docstring. ``reserved``: the driver's and the
    estimator's channel names, which no source may shadow; ``max_age_s``: older values become NaN."""

    name = "external"

    def __init__(self, *, max_age_s: float, reserved: Iterable[str] = (), clock=time.monotonic) -> None:
        if not max_age_s > 0:
            raise ValueError("max_age_s must be > 0")
        self.max_age_s = float(max_age_s)
        self.reserved = frozenset(reserved)
        self.clock = clock  # for status() (the loop's clock)
        self.estimation: Any = None  # an EstimationStage: marker observations become position fixes
        self._declared: dict[str, Declaration] = {}
        self._latest: dict[str, Measurement] = {}
        self._seq = 0
        self._counts: dict[str, dict[str, int]] = {}
        self._last_error: dict[str, str | None] = {}
        self._latencies: dict[str, collections.deque[float]] = {}
        # control thread only
        self.sample_times: dict[str, float] = {}
        self._written: dict[str, tuple[int, bool]] = {}  # source → (seq, fresh) of what process() wrote last
        self._fused_seq: dict[str, int] = {}
        self._blank: dict[str, dict[str, float]] = {}

    # ------------------------------------------------------------------ API thread
    def declare(self, source: str, specs: Sequence[ChannelSpec], markers: Mapping[int, Sequence[float]],
                gauges: Iterable[str] | None = None) -> None:
        """Replace ``source``'s declaration (each gateway connection declares again)."""
        prefixes = SOURCES.get(source)
        if prefixes is None:
            raise ExternalError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
        if len(specs) > MAX_CHANNELS:
            raise ExternalError(f"{len(specs)} channels: at most {MAX_CHANNELS}")
        seen: set[str] = set()
        for s in specs:
            if not _NAME.match(s.name) or not s.name.startswith(prefixes):
                raise ExternalError(f"channel {s.name!r}: a {source} channel is named "
                                    f"{' or '.join(p + '…' for p in prefixes)} (lower case, digits, _)")
            if s.name in self.reserved:
                raise ExternalError(f"channel {s.name!r} is the robot's own")
            if s.name in seen:
                raise ExternalError(f"channel {s.name!r} is declared twice")
            seen.add(s.name)
        if len(markers) > MAX_MARKERS:
            raise ExternalError(f"{len(markers)} markers: at most {MAX_MARKERS}")
        clean: dict[int, tuple[float, float, float]] = {}
        for mid, pose in markers.items():
            p = tuple(float(v) for v in pose)
            if len(p) != 3 or not all(map(math.isfinite, p)):
                raise ExternalError(f"marker {mid}: its pose must be three finite numbers (x_m, y_m, yaw_rad)")
            clean[int(mid)] = p  # type: ignore[assignment]
        shown = frozenset(seen if gauges is None else set(gauges) & seen)
        self._declared = {**self._declared, source: Declaration(tuple(specs), shown, clean)}
        # a measurement made against the previous declaration may name other channels: the next one counts
        self._latest = {k: v for k, v in self._latest.items() if k != source}
        self._counts.setdefault(source, {"received": 0, "refused": 0})
        self._latencies.setdefault(source, collections.deque(maxlen=64))
        log.info("%s: %d external channel(s) declared, %d marker(s) in its map", source, len(specs), len(clean))

    def measure(self, source: str, values: Mapping[str, float | None], sample_t: float, now: float,
                observations: Sequence[MarkerObservation] = ()) -> None:
        """The newest result of ``source`` (values of declared channels, None = NaN); refused, it changes
        nothing and is counted."""
        try:
            m = self._check(source, values, sample_t, now, observations)
        except ExternalError as err:
            counts = self._counts.get(source)
            if counts is not None:
                counts["refused"] += 1
                if self._last_error.get(source) is None:
                    log.warning("%s: measurement refused: %s", source, err)
                self._last_error[source] = str(err)
            raise
        self._latest = {**self._latest, source: m}
        self._counts[source]["received"] += 1
        self._last_error[source] = None
        self._latencies[source].append(now - m.sample_t)

    def _check(self, source: str, values: Mapping[str, float | None], sample_t: float, now: float,
               observations: Sequence[MarkerObservation]) -> Measurement:
        decl = self._declared.get(source)
        if decl is None:
            raise ExternalError(f"source {source!r} has not declared its channels (declare_channels first)")
        if not math.isfinite(sample_t):
            raise ExternalError("sample_t must be a finite monotonic time")
        if sample_t > now + MAX_AHEAD_S:
            raise ExternalError(f"sample_t is {sample_t - now:.3f} s in the runtime's future (not CLOCK_MONOTONIC?)")
        unknown = [k for k in values if k not in decl.names]
        if unknown:
            raise ExternalError(f"undeclared channel(s): {', '.join(sorted(unknown)[:5])}")
        clean = {}
        for k in decl.names:
            v = values.get(k)
            v = math.nan if v is None else float(v)
            if math.isinf(v):
                raise ExternalError(f"{k} must be finite or null")
            clean[k] = v
        if len(observations) > MAX_OBSERVATIONS:
            raise ExternalError(f"{len(observations)} observations: at most {MAX_OBSERVATIONS}")
        for o in observations:
            if o.marker_id not in decl.markers:
                raise ExternalError(f"observation of marker {o.marker_id}, which is not in the declared map")
        self._seq += 1
        return Measurement(self._seq, clean, min(float(sample_t), now), now, tuple(observations))

    # ------------------------------------------------------------------ control thread
    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        latest = self._latest
        for source, decl in self._declared.items():
            m = latest.get(source)
            if m is None:
                values.update(self._blank_for(source, decl))
                continue
            fresh = now - m.sample_t <= self.max_age_s
            values.update(m.values if fresh else self._blank_for(source, decl))
            if self._written.get(source) != (m.seq, fresh):
                self._written[source] = (m.seq, fresh)
                self.sample_times.update(dict.fromkeys(decl.names, m.sample_t))
            if fresh and m.observations and self._fused_seq.get(source) != m.seq:
                self._fused_seq[source] = m.seq
                if self.estimation is not None:
                    self.estimation.update_markers(m.observations, decl.markers, m.sample_t, now)

    def _blank_for(self, source: str, decl: Declaration) -> dict[str, float]:
        blank = self._blank.get(source)
        if blank is None or blank.keys() != decl.names:
            blank = self._blank[source] = dict.fromkeys(decl.names, math.nan)
        return blank

    # ------------------------------------------------------------------ reading
    def declared(self, source: str) -> Declaration | None:
        return self._declared.get(source)

    def latest(self, source: str) -> Measurement | None:
        return self._latest.get(source)

    def age_s(self, source: str, now: float) -> float:
        """Seconds since the newest measurement's capture (inf: none yet)."""
        m = self._latest.get(source)
        return math.inf if m is None else now - m.sample_t

    def channels(self) -> list[ChannelSpec]:
        """The declared channels listed with the robot's (``gauge``), in declaration order."""
        return [s for d in self._declared.values() for s in d.specs if s.name in d.gauges]

    def describe(self) -> dict[str, Any]:
        """``GET /api/robot``'s ``external``: every declared channel and the marker maps."""
        return {src: {"channels": [s.to_json() for s in d.specs],
                      "markers": [{"id": i, "x_m": p[0], "y_m": p[1], "yaw_rad": p[2]}
                                  for i, p in sorted(d.markers.items())]}
                for src, d in self._declared.items()}

    def status(self) -> dict[str, Any]:
        """The snapshot's ``external`` field: per source, the age of its newest sample, its transport
        latency (capture → arrival here) and counts."""
        now = self.clock()
        out = {}
        for src in self._declared:
            m = self._latest.get(src)
            counts = self._counts.get(src, {})
            out[src] = {
                "channels": len(self._declared[src].specs),
                "sample_t": m.sample_t if m else None,
                "age_s": None if m is None else round(now - m.sample_t, 4),
                "latency_s": round(m.arrival_t - m.sample_t, 4) if m else None,
                "fresh": m is not None and now - m.sample_t <= self.max_age_s,
                **counts,
                "last_error": self._last_error.get(src),
            }
        return out

    def latency_stats(self, source: str) -> dict[str, float] | None:
        """Capture → arrival over the last 64 measurements (p50, max, s)."""
        lat = list(self._latencies.get(source) or ())
        if not lat:
            return None
        return {"p50_s": round(statistics.median(lat), 4), "max_s": round(max(lat), 4), "n": len(lat)}


__all__ = ["Declaration", "ExternalChannels", "ExternalError", "Measurement", "SOURCES", "is_external"]
