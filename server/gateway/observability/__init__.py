"""Metrics (Prometheus), health checks and structured logs (see docs/observability.md)."""

from typing import TYPE_CHECKING

from server.lazy import lazy_exports

if TYPE_CHECKING:
    from server.gateway.observability.config import ObservabilityConfig, load_observability_config
    from server.gateway.observability.health import HealthMonitor, healthz_handler
    from server.gateway.observability.logs import JsonFormatter, setup_logging
    from server.gateway.observability.metrics import Metrics, flatten_health, metrics_handler

# imported on first use (server/lazy.py): loading a profile reads this package's settings class only
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "config": ("ObservabilityConfig", "load_observability_config"),
    "health": ("HealthMonitor", "healthz_handler"),
    "logs": ("JsonFormatter", "setup_logging"),
    "metrics": ("Metrics", "flatten_health", "metrics_handler"),
})
