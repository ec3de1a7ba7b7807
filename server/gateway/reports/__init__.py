"""Run reports: channel statistics, commanded-vs-measured tracking and SVG plots (see docs/recording.md)."""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.reports.report import (ROVER_PAIRS, Pair, channel_stats, load_series, report_from_arrays,
                                               report_html, run_report, tracking)
    from server.gateway.reports.svg import line_plot

# imported on first use (server/lazy.py): the gateway imports a report module (numpy) when it renders a report
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "report": ("Pair", "ROVER_PAIRS", "channel_stats", "tracking", "load_series", "report_from_arrays",
               "run_report", "report_html"),
    "svg": ("line_plot",),
})
