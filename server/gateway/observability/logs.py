"""Structured logs: one JSON object per line (``[observability] log_format = "json"``).

Each line has ``ts`` (ISO 8601, UTC, ms), ``level``, ``logger``, ``msg`` (the formatted
message), ``exc`` when there is a traceback, and any ``extra={...}`` fields given to
the logging call, so a log shipper (Loki, journald, Elastic) can index them.

>>> import logging
>>> rec = logging.LogRecord("server.safety", logging.WARNING, __file__, 1, "e-stop: %s", ("link_loss",), None)
>>> rec.created = 0.0; rec.msecs = 0.0; rec.trigger = "link_loss"
>>> JsonFormatter().format(rec)
'{"ts":"1970-01-01T00:00:00.000Z","level":"WARNING","logger":"server.safety","msg":"e-stop: link_loss","trigger":"link_loss"}'
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

import orjson

# attributes every LogRecord has; anything else came from ``extra=``
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_HANDLER_NAME = "teleop-observability"


class JsonFormatter(logging.Formatter):
    """Formats a record as one compact JSON line (NaN becomes null; unknown objects become strings)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        return orjson.dumps(out, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def setup_logging(log_format: str = "text", level: str | int = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """Install one root handler (replacing the one a previous call installed) with text or JSON lines."""
    if log_format not in ("text", "json"):
        raise ValueError(f"log_format must be 'text' or 'json', not {log_format!r}")
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == _HANDLER_NAME:
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    return handler
