"""Clients hold up too (docs/python-client.md G, docs/shared-host.md): a connect that meets a full
backlog is tried again until the timeout; nobody listening fails at once; pushwoosh-agentctl's
``watch --reconnect`` backs off against a socket that accepts and closes at once. And the
plugin says where it looked for the binaries, and why they are not there."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Iterator, List, Optional

import pytest

from conftest import FakeAgent, result_line
from pushwoosh_agent import AgentClient, AgentNotRunning
from pushwoosh_agent._connection import connect
from pushwoosh_agent.processes import StartError, find_binary


class _FullBacklog(FakeAgent):
    """A listener with a backlog of one that accepts nothing, filled up; ``accept(after=s)``
    starts answering (every request with a ``status`` result) ``s`` seconds later."""

    def __init__(self, path: str) -> None:
        super().__init__(path, lambda request, _: result_line(request, {"state": "ready"}), backlog=0, accepting=False)
        self.fillers: List[socket.socket] = []
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(path)
            except BlockingIOError:
                s.close()
                break
            self.fillers.append(s)
        assert self.fillers, "the backlog did not fill"

    def close(self) -> None:
        for s in self.fillers:
            s.close()
        super().close()


@pytest.fixture
def full_backlog(pushwoosh_tmp_dir: str) -> Iterator[_FullBacklog]:
    listener = _FullBacklog(os.path.join(pushwoosh_tmp_dir, "busy.sock"))
    yield listener
    listener.close()


def test_a_full_backlog_is_waited_out(full_backlog: _FullBacklog) -> None:
    full_backlog.accept(after=0.5)
    started = time.monotonic()
    with AgentClient(socket=full_backlog.path, timeout=5) as client:
        assert client.status()["state"] == "ready"
    assert 0.4 < time.monotonic() - started < 4


def test_a_backlog_full_until_the_timeout_is_not_running(full_backlog: _FullBacklog) -> None:
    started = time.monotonic()
    with pytest.raises(AgentNotRunning, match=r"its backlog of pending connections stayed full for 0.3 s \(\d+ attempts"):
        connect(full_backlog.path, 0.3)
    assert 0.25 < time.monotonic() - started < 2


def test_nobody_listening_fails_at_once(pushwoosh_tmp_dir: str) -> None:
    started = time.monotonic()
    with pytest.raises(AgentNotRunning, match="no socket there"):
        AgentClient(socket=os.path.join(pushwoosh_tmp_dir, "nobody.sock"), timeout=5)
    dead = os.path.join(pushwoosh_tmp_dir, "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(dead)
    s.close()  # a socket file nobody listens on
    with pytest.raises(AgentNotRunning, match="connection refused"):
        AgentClient(socket=dead, timeout=5)
    assert time.monotonic() - started < 1


def _agentctl(pushwoosh_bin: Optional[str]) -> str:
    return find_binary("pushwoosh-agentctl", pushwoosh_bin)


def test_watch_reconnect_backs_off(pushwoosh_tmp_dir: str, pushwoosh_bin: Optional[str]) -> None:
    """A socket that answers the subscription, then closes at once, every time: agentctl waits
    100 ms, 200 ms, ... up to 2 s between attempts (before: one attempt per answer, hundreds a
    second)."""
    flapping = FakeAgent(os.path.join(pushwoosh_tmp_dir, "flap.sock"), lambda request, _: result_line(request, {}),
                         close_after_answer=True)
    watch = subprocess.Popen([_agentctl(pushwoosh_bin), "--socket", flapping.path, "watch", "--reconnect"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(2.2)
    finally:
        watch.kill()
        _, err = watch.communicate()
        flapping.close()
    attempts = flapping.accepted
    assert 3 <= len(attempts) <= 8, attempts  # 0, 0.1, 0.3, 0.7, 1.5 s: 5 attempts
    gaps = [b - a for a, b in zip(attempts, attempts[1:])]
    assert all(later >= earlier * 1.5 for earlier, later in zip(gaps, gaps[1:])), gaps  # doubling
    assert b"reconnecting (--reconnect)" in err


# --- Where the plugin looked for the binaries --------------------------------------------------


def test_find_binary_says_where_it_looked_and_why(tmp_path: "os.PathLike[str]") -> None:
    base = str(tmp_path)
    missing = os.path.join(base, "no", "such", "dir")
    with pytest.raises(StartError) as caught:
        find_binary("pushwoosh-agentd", missing)
    assert str(caught.value).startswith(f"pushwoosh-agentd not found in {missing} (--pushwoosh-bin): "
                                        "that directory does not exist; give the absolute path")
    a_file = os.path.join(base, "file")
    open(a_file, "w").close()
    with pytest.raises(StartError, match="that is not a directory"):
        find_binary("pushwoosh-agentd", a_file)
    with pytest.raises(StartError) as caught:
        find_binary("pushwoosh-agentd", base)
    assert f"not found in {base} (--pushwoosh-bin): the directory exists but holds neither pushwoosh-agentd nor " \
           "pushwoosh-emulator (not a build's bin directory" in str(caught.value)
    # A build's directory without this one binary, or with it not executable.
    open(os.path.join(base, "pushwoosh-emulator"), "w").close()
    with pytest.raises(StartError, match="the directory holds pushwoosh-emulator but no pushwoosh-agentd"):
        find_binary("pushwoosh-agentd", base)
    open(os.path.join(base, "pushwoosh-agentd"), "w").close()
    with pytest.raises(StartError, match="pushwoosh-agentd is there but is not an executable file"):
        find_binary("pushwoosh-agentd", base)
    # A relative path says where it was read from.
    cwd = os.getcwd()
    try:
        os.chdir(base)
        with pytest.raises(StartError, match=f"'nope' is relative: read from {base}"):
            find_binary("pushwoosh-agentd", "nope")
    finally:
        os.chdir(cwd)


def test_the_plugin_names_the_directory_and_the_cause(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_agent(pushwoosh_agent):\n    pass\n")
    result = pytester.runpytest_subprocess("--pushwoosh-bin", "/no/such/build/debug", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert "pushwoosh-emulator not found in /no/such/build/debug (--pushwoosh-bin): that directory does not exist" \
        in result.stdout.str()
    result = pytester.runpytest_subprocess("--pushwoosh-bin", "relative/debug", "-p", "no:cacheprovider")
    assert f"--pushwoosh-bin 'relative/debug' is relative, read from the directory pytest started in ({pytester.path})" \
        in result.stdout.str()
    result = pytester.runpytest_subprocess("--pushwoosh-bin", "", "-p", "no:cacheprovider")
    assert "--pushwoosh-bin is empty" in result.stdout.str()
