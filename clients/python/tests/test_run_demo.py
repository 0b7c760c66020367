"""``make run CLOCK=controlled AGENT_CONF=...`` (scripts/run-demo): the README's advance-clock
examples work on the demo as written."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from typing import Dict, List, Optional

from conftest import REPO

import pytest

from pushwoosh_agent import EmulatorClient
from pushwoosh_agent.processes import find_binary

DEMO = os.path.join(REPO, "scripts", "run-demo")


def _bin_dir(pushwoosh_bin: Optional[str]) -> str:
    return os.path.dirname(find_binary("pushwoosh-agentd", pushwoosh_bin))


def _start(pushwoosh_bin: Optional[str], **env: str) -> "subprocess.Popen[str]":
    return subprocess.Popen([DEMO, _bin_dir(pushwoosh_bin)], env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _banner(demo: "subprocess.Popen[str]") -> List[str]:
    assert demo.stdout is not None
    lines: List[str] = []
    for line in demo.stdout:
        lines.append(line.rstrip("\n"))
        if "Stop with Ctrl-C" in line:
            return lines
    raise AssertionError("run-demo printed no banner:\n" + "\n".join(lines))


def _run(command: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60)


def test_make_run_with_a_controlled_clock_and_extra_configuration(pushwoosh_bin: Optional[str]) -> None:
    demo = _start(pushwoosh_bin, CLOCK="controlled", AGENT_CONF="[Agent]\\nUserId=alice")
    try:
        banner = _banner(demo)
        socket = next(line.split(":", 1)[1].strip() for line in banner if "Agent socket:" in line)
        ctl = f"{_bin_dir(pushwoosh_bin)}/pushwoosh-agentctl --socket {socket}"
        deadline = time.monotonic() + 15
        status: Dict[str, object] = {}
        while time.monotonic() < deadline:
            done = _run(f"{ctl} --json status")
            if done.returncode == 0:
                status = json.loads(done.stdout)
                if status.get("lastRefreshAt"):
                    break
            time.sleep(0.05)
        assert status.get("userId") == "alice"  # the AGENT_CONF line
        # The README's example, as written (with the demo's socket).
        moved = _run(f"{ctl} advance-clock 1h")
        assert moved.returncode == 0, moved.stderr
        assert json.loads(_run(f"{ctl} --json clock").stdout)["offsetSeconds"] >= 3600
        # The lab's example the banner prints: the emulator's clock and the device's together.
        fleet = next(line.strip() for line in banner if "fleet --socket-dir" in line)
        lab = _run(fleet)
        assert lab.returncode == 0, lab.stderr
        assert lab.stdout.startswith("now: ") and "agent" in lab.stdout
        # The device, already an hour ahead, waited for the emulator: both are 2 h ahead now.
        url = fleet.split("--emulator", 1)[1].split()[0]
        assert EmulatorClient(url).clock()["offsetSeconds"] == pytest.approx(7200, abs=0.01)
        assert json.loads(_run(f"{ctl} --json clock").stdout)["offsetSeconds"] == pytest.approx(7200, abs=0.01)
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=20)


def test_make_run_refuses_an_unknown_clock(pushwoosh_bin: Optional[str]) -> None:
    demo = _start(pushwoosh_bin, CLOCK="sometimes")
    out, _ = demo.communicate(timeout=20)
    assert demo.returncode == 2
    assert 'CLOCK must be system or controlled, not "sometimes"' in out
