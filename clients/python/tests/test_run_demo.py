"""``make run CLOCK=controlled AGENT_CONF=...`` (scripts/run-demo): the README's advance-clock
examples work on the demo as written."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import urllib.request
from typing import Dict, List, Optional

from conftest import REPO, process_alive

import pytest

from pushwoosh_agent import EmulatorClient, EmulatorError
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
        # The lab is locked: its token is in the file the banner names.
        token_file = next(line.split(":", 1)[1].split()[0] for line in banner if "Lab token:" in line)
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        with pytest.raises(EmulatorError) as refused:
            EmulatorClient(url).clock()
        assert refused.value.status == 401
        assert EmulatorClient(url, admin_token=token).clock()["offsetSeconds"] == pytest.approx(7200, abs=0.01)
        assert json.loads(_run(f"{ctl} --json clock").stdout)["offsetSeconds"] == pytest.approx(7200, abs=0.01)
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=20)


def test_make_run_refuses_an_unknown_clock(pushwoosh_bin: Optional[str]) -> None:
    demo = _start(pushwoosh_bin, CLOCK="sometimes")
    out, _ = demo.communicate(timeout=20)
    assert demo.returncode == 2
    assert 'CLOCK must be system or controlled, not "sometimes"' in out


def _processes_of(directory: str) -> List[int]:
    """The processes whose command line names ``directory`` (the demo's emulator and agent)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if directory.encode() in f.read() and process_alive(int(entry)):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_make_run_killed_by_its_pid_leaves_nothing_behind(pushwoosh_bin: Optional[str]) -> None:
    """`make run` starts run-demo under a parent-death signal, as the Makefile does here: the
    parent (make) killed with SIGKILL, the demo stops its agent and emulator and removes its
    directory."""
    parent = subprocess.Popen(["bash", "-c", f"setpriv --pdeathsig TERM -- {shlex.quote(DEMO)} "
                               f"{shlex.quote(_bin_dir(pushwoosh_bin))} & wait"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        banner = _banner(parent)
        config = next(line.split(":", 1)[1].strip() for line in banner if "Agent config:" in line)
        directory = os.path.dirname(config)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(_processes_of(directory)) < 2:
            time.sleep(0.05)
        assert len(_processes_of(directory)) >= 1, "the demo's processes were not found"
        parent.kill()
        parent.wait(5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (_processes_of(directory) or os.path.exists(directory)):
            time.sleep(0.05)
        assert _processes_of(directory) == [], "processes outlived make run"
        assert not os.path.exists(directory), "the demo directory was left behind"
        emulator = next(line.split(": ", 1)[1].split()[0] for line in banner if "Pushwoosh emulator:" in line)
        with pytest.raises(OSError):
            urllib.request.urlopen(emulator.rstrip("/") + "/admin/clock", timeout=2)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
