"""``AgentProcess`` is a lab device (docs/lab.md M.1): the package launches no agent itself, and a
Python process killed with SIGKILL leaves no lab and no agent behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import List, Optional

import pytest

from conftest import process_alive

from pushwoosh_agent import EmulatorClient
from pushwoosh_agent.processes import AgentProcess, EmulatorProcess, find_binary

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
