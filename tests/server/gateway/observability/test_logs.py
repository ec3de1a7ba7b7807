"""Structured logs: JSON lines with the message, level, logger, extras and tracebacks."""

from __future__ import annotations

import doctest
import io
import json
import logging

import pytest

import server.gateway.observability.logs
from server.gateway.observability import setup_logging


def test_doctests():
    assert doctest.testmod(server.gateway.observability.logs).failed == 0


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


def test_json_lines_carry_fields_extras_and_tracebacks(restore_root):
    out = io.StringIO()
    setup_logging("json", "DEBUG", stream=out)
    log = logging.getLogger("teleop.test")
    log.info("state %s → %s", "running", "estop", extra={"trigger": "link_loss", "values": {"age_s": float("nan")}})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("tick failed")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["msg"] == "state running → estop" and lines[0]["level"] == "INFO"
    assert lines[0]["logger"] == "teleop.test" and lines[0]["trigger"] == "link_loss"
    assert lines[0]["values"] == {"age_s": None} and lines[0]["ts"].endswith("Z")
    assert lines[1]["level"] == "ERROR" and "RuntimeError: boom" in lines[1]["exc"]


def test_setup_twice_keeps_one_handler_and_text_is_the_default(restore_root):
    out = io.StringIO()
    setup_logging("json", stream=out)
    setup_logging("text", stream=out)
    ours = [h for h in logging.getLogger().handlers if h.get_name() == "teleop-observability"]
    assert len(ours) == 1
    logging.getLogger("teleop.test").warning("plain %d", 1)
    assert out.getvalue().rstrip().endswith("WARNING teleop.test: plain 1")


def test_unknown_format_is_refused(restore_root):
    with pytest.raises(ValueError, match="log_format"):
        setup_logging("xml")
