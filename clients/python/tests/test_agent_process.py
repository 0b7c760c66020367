"""``AgentProcess`` is a lab device (docs/lab.md M.1): the package launches no agent itself, and a
Python process killed with SIGKILL leaves no lab and no agent behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Dict, List, Optional

import pytest

from conftest import process_alive

from pushwoosh_agent import EmulatorClient
from pushwoosh_agent.processes import AgentProcess, EmulatorProcess, find_binary, session_emulator

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def test_the_package_starts_no_agent_itself() -> None:
    """No module of the package spawns pushwoosh-agentd: the children it starts are an emulator
    (its lab starts the agents) and openssl (a test CA)."""
    allowed = {"emulator_process.py": "pushwoosh-emulator", "tls.py": "openssl"}
    package = os.path.join(SRC, "pushwoosh_agent")
    starters = []
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), encoding="utf-8") as f:
                text = f.read()
            if any(call in text for call in ("Popen(", "subprocess.run(", "os.exec", "os.spawn", "os.fork(")):
                starters.append(name)
    assert starters == sorted(allowed), starters


def test_an_agent_process_is_a_device_of_its_lab(pushwoosh_bin: Optional[str], pushwoosh_emulator: EmulatorClient,
                                                pushwoosh_tmp_dir: str) -> None:
    emulator = EmulatorProcess(os.path.join(pushwoosh_tmp_dir, "own"), binary=find_binary("pushwoosh-emulator", pushwoosh_bin))
    os.makedirs(emulator.directory)
    with emulator:
        with AgentProcess(os.path.join(pushwoosh_tmp_dir, "agent"), server_url=emulator.server_url, lab=emulator.lab,
                          settings={"user_id": "alice", "http_listen": "127.0.0.1:0"}) as agent:
            names = [d["name"] for d in emulator.lab.devices()]
            assert names == [agent.name]
            assert agent.client.status()["userId"] == "alice"
            assert agent.http_url is not None and agent.http_url.startswith("http://127.0.0.1:")
            assert any("READY=1" in n for n in agent.notifications)
            pid = agent.pid
            assert pid is not None and process_alive(pid)
        assert emulator.lab.devices() == []
        assert agent.exit_statuses == [0] and not process_alive(pid)
        with pytest.raises(ValueError, match="the lab places the socket"):
            AgentProcess(pushwoosh_tmp_dir, lab=emulator.lab, settings={"socket": "/tmp/x.sock"})
        with pytest.raises(ValueError, match="unknown agent setting 'user_idd'; did you mean 'user_id'"):
            AgentProcess(pushwoosh_tmp_dir, lab=emulator.lab, settings={"user_idd": "x"})


def test_a_python_process_killed_with_sigkill_leaves_no_lab_and_no_agent(pushwoosh_bin: Optional[str],
                                                                        pushwoosh_tmp_dir: str) -> None:
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {SRC!r})
        from pushwoosh_agent.processes import AgentProcess, launcher_lab
        agent = AgentProcess({os.path.join(pushwoosh_tmp_dir, "victim")!r},
                             binary=os.path.join({os.path.dirname(find_binary("pushwoosh-agentd", pushwoosh_bin))!r}, "pushwoosh-agentd"),
                             server_url="http://127.0.0.1:9/json/1.3/").start()
        lab = [p for p in os.listdir("/proc") if p.isdigit() and b"--lab" in open(f"/proc/{{p}}/cmdline", "rb").read()
               and int(open(f"/proc/{{p}}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid()]
        print(agent.pid, " ".join(lab), flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline().split()
    assert len(line) >= 2, line
    pids: List[int] = [int(p) for p in line]
    assert all(process_alive(p) for p in pids)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(5)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(process_alive(p) for p in pids):
        time.sleep(0.05)
    assert [p for p in pids if process_alive(p)] == [], "the lab or its agent outlived the Python process"


def _emulators_of(pid: int) -> List[int]:
    """The running pushwoosh-emulator processes that descend from ``pid`` (read from /proc)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                program = os.path.basename(f.read().split(b"\0")[0].decode())
        except (OSError, ValueError):
            continue
        if fields[0] != "Z":
            parents[int(entry)] = (int(fields[1]), program)

    def descends(p: int) -> bool:
        while p in parents and p > 1:
            p = parents[p][0]
            if p == pid:
                return True
        return False
    return sorted(p for p, (_, program) in parents.items() if program == "pushwoosh-emulator" and descends(p))


SESSION_TESTS = f"""
import os, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import pytest
from test_agent_process import _emulators_of
from pushwoosh_agent.processes import AgentProcess

def _one(emulator):
    assert _emulators_of(os.getpid()) == [emulator.process.process.pid]

@pytest.mark.pushwoosh_agent(clock="controlled")
def test_an_agent(pushwoosh_emulator, pushwoosh_agent, pushwoosh_agent_process, pushwoosh_lab):
    _one(pushwoosh_emulator)
    assert [d["name"] for d in pushwoosh_lab.devices()] == [pushwoosh_agent_process.name]
    assert pushwoosh_lab.advance_clock(3600)["fired"]
    _one(pushwoosh_emulator)

def test_a_fleet_and_an_agent_of_the_test(pushwoosh_emulator, pushwoosh_fleet, pushwoosh_lab, pushwoosh_tmp_dir):
    fleet = pushwoosh_fleet(2, clock="controlled")
    fleet.advance_clock(until="nextRefresh")
    with AgentProcess(os.path.join(pushwoosh_tmp_dir, "own"), server_url=pushwoosh_emulator.server_url) as agent:
        assert agent.lab.emulator.base_url == pushwoosh_emulator.base_url  # no lab given: the session's
        _one(pushwoosh_emulator)
"""


def test_a_session_with_the_agent_and_emulator_fixtures_runs_one_emulator(
        pytester: pytest.Pytester, pushwoosh_bin: Optional[str]) -> None:
    pytester.makepyfile(SESSION_TESTS)
    bin_args = ["--pushwoosh-bin", pushwoosh_bin] if pushwoosh_bin else []
    result = pytester.runpytest_subprocess(*bin_args, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_a_wrapper_anywhere_is_the_device_s_daemon(pushwoosh_bin: Optional[str], pushwoosh_tmp_dir: str) -> None:
    """AgentProcess(binary=WRAPPER): a script outside the bin directory that execs the real agentd
    (as one running it under libfaketime, valgrind or strace does) runs in the session's lab."""
    wrappers = os.path.join(pushwoosh_tmp_dir, "wrappers")
    os.makedirs(wrappers)
    wrapper = os.path.join(wrappers, "faketime-agentd")
    with open(wrapper, "w", encoding="utf-8") as f:
        f.write(f"#!/bin/sh\necho wrapped >> {wrappers}/ran\nexec {find_binary('pushwoosh-agentd', pushwoosh_bin)} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    with AgentProcess(os.path.join(pushwoosh_tmp_dir, "wrapped"), binary=wrapper,
                      server_url="http://127.0.0.1:9/json/1.3/", settings={"user_id": "wrapped"}) as agent:
        assert agent.client.status()["userId"] == "wrapped"
        assert agent.pid is not None and process_alive(agent.pid)
        with open(f"/proc/{agent.pid}/cmdline", "rb") as f:
            assert os.path.basename(f.read().split(b"\0")[0].decode()) == "pushwoosh-agentd"  # the wrapper exec'd it
        session = session_emulator()  # the lab it lives in: this session's, not one beside the wrapper
        assert agent.lab.emulator.base_url == session.base_url
        assert session.process is not None and _emulators_of(os.getpid()) == [session.process.pid]
    with open(os.path.join(wrappers, "ran"), encoding="utf-8") as f:
        assert "wrapped" in f.read()


def test_a_wrapper_outside_pytest_runs_in_a_lab_of_path_s_emulator(pushwoosh_bin: Optional[str],
                                                                  pushwoosh_tmp_dir: str) -> None:
    """Without pytest and without lab=, the process's one lab is started from PATH's emulator:
    never looked for beside the wrapper."""
    wrapper = os.path.join(pushwoosh_tmp_dir, "strace-agentd")
    with open(wrapper, "w", encoding="utf-8") as f:
        f.write(f"#!/bin/sh\nexec {find_binary('pushwoosh-agentd', pushwoosh_bin)} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from pushwoosh_agent.processes import AgentProcess
        with AgentProcess({os.path.join(pushwoosh_tmp_dir, "outside")!r}, binary={wrapper!r},
                          server_url="http://127.0.0.1:9/json/1.3/", settings={{"user_id": "outside"}}) as agent:
            print(agent.client.status()["userId"], agent.lab.emulator.base_url)
    """)
    bin_dir = os.path.dirname(find_binary("pushwoosh-emulator", pushwoosh_bin))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("outside http://127.0.0.1:"), done.stdout


def _module_lines() -> Dict[str, int]:
    package = os.path.join(SRC, "pushwoosh_agent")
    counts = {}
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name), encoding="utf-8") as f:
                counts[name] = sum(1 for _ in f)
    return counts


def test_no_module_of_the_package_is_over_400_lines() -> None:
    """As the Swift sources (SourceShapeTests): a module past 400 lines is split by what it does."""
    long = {name: count for name, count in _module_lines().items() if count > 400}
    assert long == {}, long


def test_the_package_is_at_most_3000_lines() -> None:
    """The package's budget: the lab starts the agents and moves their clocks, so what is left here is
    the client, the emulator's and the lab's clients, and the fixtures."""
    counts = _module_lines()
    assert sum(counts.values()) <= 3000, counts
