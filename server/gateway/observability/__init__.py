"""Metrics (Prometheus), health checks and structured logs (see docs/observability.md)."""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.observability.config import ObservabilityConfig, load_observability_config
    from server.gateway.observability.health import HealthMonitor, healthz_handler
    from server.gateway.observability.logs import JsonFormatter, setup_logging
    from server.gateway.observability.metrics import Metrics, flatten_health, metrics_handler

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__ = lazy_exports(__name__, {
    "ObservabilityConfig": "config",
    "load_observability_config": "config",
    "HealthMonitor": "health",
    "healthz_handler": "health",
    "JsonFormatter": "logs",
    "setup_logging": "logs",
    "Metrics": "metrics",
    "flatten_health": "metrics",
    "metrics_handler": "metrics",
})

__all__ = ["ObservabilityConfig", "load_observability_config", "HealthMonitor", "healthz_handler", "JsonFormatter",
           "setup_logging", "Metrics", "flatten_health", "metrics_handler"]
