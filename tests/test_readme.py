"""The README's terminal walkthrough works as typed (issue 8, item 13).

It used to fail: ``start``, then the ``speed`` command typed two seconds later got 409
``estop_latched``, because link loss tripped 0.5 s after start. The test runs the README's
lines literally (only ``localhost:8080`` becomes the test server's address), one at a time,
with a human's two-second pause between them.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.conftest import REPO, ServerProc

pytestmark = pytest.mark.timeout(90)

PAUSE_S = 2.0  # a person reading the output and typing the next line


def walkthrough_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"<!-- walkthrough[^>]*-->\s*```sh\n(.*?)```\s*<!-- /walkthrough -->", text, re.S)
    assert block, "README.md has the marked walkthrough block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_walkthrough_runs_as_typed(server_factory) -> None:
    # the README's own slack for a loaded machine (its next block): at load ~30 the 0.2 s curl loop missed the
    # 0.5 s timeout (a link-loss e-stop, 0.503 s). The stall limit stays the profile's 0.1 s: a tick that late
    # while moving still fails this test (at load 9-20 the runtime's event-loop thread, at normal priority, can be
    # preempted while it holds the GIL the SCHED_FIFO loop needs: ticks 22-219 ms late; not fixed yet)
    server: ServerProc = server_factory({"safety": {"command_timeout_s": 2.0}})
    lines = walkthrough_lines()
    assert lines[0].startswith("while sleep"), "the keep-alive comes first"
    here = f"127.0.0.1:{server.port}"
    script = []
    for i, line in enumerate(lines):
        script += [f"echo '::{i}'", line.replace("localhost:8080", here), "echo", f"sleep {PAUSE_S}"]
    out = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    outputs = dict(re.findall(r"::(\d+)\n(.*?)(?=\n::\d+\n|\Z)", out.stdout, re.S))

    def reply(fragment: str) -> dict:
        i = next(i for i, line in enumerate(lines) if fragment in line)
        return json.loads(outputs[str(i)].strip())

    assert reply("/api/start") == {"ok": True, "state": "running"}
    assert reply("/api/speed") == {"ok": True, "state": "running"}  # not 409 estop_latched
    state = reply("curl localhost:8080/api/state")
    assert state["state"] == "running" and state["setpoint"]["linear"] == 0.3
    assert state["values"]["linear_m_s"] > 0.1 and state["values"]["encoder_left_ticks"] > 0
    assert reply("/api/estop")["state"] == "estop"
    assert server.state()["state"] == "estop"
