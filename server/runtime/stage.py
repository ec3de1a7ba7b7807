"""A stage: per-tick processing of a frame in the control thread, before the safety rules see it.

Estimators (:mod:`server.runtime.estimation`) and the external channels
(:mod:`server.runtime.external`) are stages. Each tick the loop hands every stage the frame's
``values`` (in order: external first, then the estimators) and the stage adds its derived
channels in place. A stage must be fast and never block: it runs under the loop's lock.

What a stage declares, so the loop asks nothing by probing (:class:`Stage`'s defaults fit a stage
that has none of it):

* :meth:`Stage.status`: its part of the snapshot (under its ``name``), or ``None`` for none;
* :meth:`Stage.sources`: the driver channels a derived channel comes from (a rule on a derived
  channel keeps them acquired, and is as fresh as the oldest of them);
* :attr:`Stage.sample_times`: the host times of values it adds that were sampled elsewhere (a
  camera frame's capture time), merged into the frame's so they go stale like a sensor's;
* :meth:`Stage.take_events`: events it raised this tick (the estimator's "magnetometer disturbed"),
  which the loop appends to its log like a controller's.

A controller names the stages it needs (``Controller.stages``); :data:`STAGES` maps each name to
its builder (``"module:function"``, imported lazily), which returns ``None`` when the driver lacks
the stage's inputs or the profile turns it off.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from drivers.base import ChannelSpec

#: no values sampled elsewhere (shared, read-only)
NO_SAMPLE_TIMES: Mapping[str, float] = MappingProxyType({})


class Stage:
    """Base of every stage; see the module docstring. A subclass sets :attr:`name` and overrides
    :meth:`process`, and what else it has."""

    name: str = ""
    sample_times: Mapping[str, float] = NO_SAMPLE_TIMES

    def process(self, values: dict[str, float], dt_s: float, now: float) -> None:
        """Add derived channels to ``values`` (in place); ``dt_s`` the measured period, ``now`` the loop's clock."""
        raise NotImplementedError

    def channels(self) -> list[ChannelSpec]:
        """The channels it derives, as the dashboard shows them (``[]``: none to show)."""
        return []

    def sources(self, channels: Iterable[str]) -> set[str]:
        """The driver channels that must stay acquired for ``channels`` (default: themselves)."""
        return set(channels)

    def status(self) -> dict[str, Any] | None:
        """The stage's part of the snapshot, under its :attr:`name`; ``None``: it has none."""
        return None

    def take_events(self) -> Iterable[tuple[str, str, str, dict[str, Any]]]:
        """Events since the last call as ``(trigger, message, kind, values)``, as a controller's (default none)."""
        return ()


#: stage name → ``"module:builder"``; a builder takes (profile, driver) and returns the stage or ``None``
STAGES: dict[str, str] = {
    "estimation": "server.runtime.estimation:build_estimation",
}


def stage_builder(name: str) -> Callable[[Any, Any], Stage | None]:
    """The builder of the stage registered as ``name``."""
    try:
        target = STAGES[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; known: {', '.join(sorted(STAGES))}") from None
    module_name, _, fn = target.partition(":")
    return getattr(importlib.import_module(module_name), fn)


__all__ = ["NO_SAMPLE_TIMES", "STAGES", "Stage", "stage_builder"]
