"""Metrics (Prometheus), health checks and structured logs (see docs/observability.md)."""

from server.gateway.observability.config import ObservabilityConfig, load_observability_config
from server.gateway.observability.health import HealthMonitor, healthz_handler
from server.gateway.observability.logs import JsonFormatter, setup_logging
from server.gateway.observability.metrics import Metrics, flatten_health, metrics_handler

__all__ = ["ObservabilityConfig", "load_observability_config", "HealthMonitor", "healthz_handler", "JsonFormatter",
           "setup_logging", "Metrics", "flatten_health", "metrics_handler"]
