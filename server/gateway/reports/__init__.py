"""Run reports: channel statistics, commanded-vs-measured tracking and SVG plots (see docs/recording.md)."""

from server.gateway.reports.report import (ROVER_PAIRS, Pair, channel_stats, load_series, report_from_arrays, report_html,
                                   run_report, tracking)
from server.gateway.reports.svg import line_plot

__all__ = ["Pair", "ROVER_PAIRS", "channel_stats", "tracking", "load_series", "report_from_arrays", "run_report",
           "report_html", "line_plot"]
