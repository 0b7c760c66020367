"""Reaching the server through a proxy: `https_proxy` from the environment (as libcurl reads
it), `[Agent] Proxy=` (which wins over the environment), and `no_proxy`. A loopback CONNECT
proxy written for the test tunnels to the emulator over HTTPS."""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional

from conftest import wait_until
from connect_proxy import ConnectProxy
from pushwoosh_agent.processes import AgentProcess, EmulatorProcess
from pushwoosh_agent.tls import TestCA


def _emulator(tmp: str, pushwoosh_bin: str) -> EmulatorProcess:
    ca = TestCA(tmp, "proxy-test-ca")
    return EmulatorProcess(tmp, binary=os.path.join(pushwoosh_bin, "pushwoosh-emulator"), tls=ca.issue("server"),
                           ca_file=ca.ca_file).start()


def _agent(tmp: str, pushwoosh_bin: str, emulator: EmulatorProcess, environment: Mapping[str, str],
           proxy: Optional[str] = None) -> AgentProcess:
    settings: Dict[str, Any] = {"ca_file": emulator.ca_file, "disable_throttle": True, "request_timeout": "5s",
                                "user_id": "alice", "proxy": proxy}
    return AgentProcess(tmp, server_url=emulator.server_url, binary=os.path.join(pushwoosh_bin, "pushwoosh-agentd"),
                        settings=settings, environment=environment)


def _settled(agent: AgentProcess, timeout: float = 10.0) -> Dict[str, Any]:
    """The agent's status once a refresh has ended, well or not."""
    def settled() -> Optional[Dict[str, Any]]:
        status = dict(agent.client.status())
        return status if status.get("lastRefreshAt") is not None or status.get("lastRefreshError") else None
    return dict(wait_until(settled, timeout, 0.02, what=lambda: f"no refresh: {agent.client.status()}"))


def test_https_proxy_from_the_environment(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    emulator = _emulator(pushwoosh_tmp_dir, pushwoosh_bin)
    with ConnectProxy() as proxy:
        agent = _agent(pushwoosh_tmp_dir, pushwoosh_bin, emulator, {"https_proxy": proxy.url})
        try:
            agent.start()
            status = _settled(agent)
            assert status["lastRefreshError"] is None and status["state"] == "ready", status
            assert agent.client.is_enabled("new_checkout") is True
            assert f"127.0.0.1:{emulator.port}" in proxy.tunnels()
        finally:
            agent.close()
            emulator.stop()


def test_proxy_key_wins_over_the_environment(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    emulator = _emulator(pushwoosh_tmp_dir, pushwoosh_bin)
    with ConnectProxy() as configured, ConnectProxy() as environment:
        agent = _agent(pushwoosh_tmp_dir, pushwoosh_bin, emulator, {"https_proxy": environment.url},
                       proxy=configured.url)
        try:
            agent.start()
            status = _settled(agent)
            assert status["lastRefreshError"] is None, status
            assert f"127.0.0.1:{emulator.port}" in configured.tunnels()
            assert environment.tunnels() == [], "the environment's proxy was used although Proxy= is set"
        finally:
            agent.close()
            emulator.stop()


def test_no_proxy_and_a_dead_proxy(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    """no_proxy=127.0.0.1 goes direct; a proxy that is not there fails with code 0 naming the proxy."""
    emulator = _emulator(pushwoosh_tmp_dir, pushwoosh_bin)
    with ConnectProxy() as proxy:
        direct = _agent(os.path.join(pushwoosh_tmp_dir), pushwoosh_bin, emulator,
                        {"https_proxy": proxy.url, "no_proxy": "127.0.0.1"})
        try:
            direct.start()
            assert _settled(direct)["lastRefreshError"] is None
            assert proxy.tunnels() == []
        finally:
            direct.close()
    dead = ConnectProxy()
    dead_url = dead.url
    dead.listener.close()  # nothing listens there any more
    broken_dir = os.path.join(pushwoosh_tmp_dir, "dead")
    os.makedirs(broken_dir)
    broken = _agent(broken_dir, pushwoosh_bin, emulator, {}, proxy=dead_url)
    try:
        broken.start()
        error = _settled(broken)["lastRefreshError"]
        assert error is not None and error["code"] == 0, error
        assert "proxy" in error["message"].lower(), error
    finally:
        broken.close()
        emulator.stop()


def test_doctor_goes_through_the_proxy(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    import subprocess
    from pushwoosh_agent.processes import agent_config
    emulator = _emulator(pushwoosh_tmp_dir, pushwoosh_bin)
    try:
        with ConnectProxy() as proxy:
            path = os.path.join(pushwoosh_tmp_dir, "doctor.conf")
            with open(path, "w", encoding="utf-8") as f:
                f.write(agent_config({"application_code": "ABCDE-12345", "server_url": emulator.server_url,
                                      "ca_file": emulator.ca_file, "proxy": proxy.url.replace("http://", "http://u:pw-S3CRET@"),
                                      "state_directory": os.path.join(pushwoosh_tmp_dir, "state")}))
            result = subprocess.run([os.path.join(pushwoosh_bin, "pushwoosh-agentd"), "--doctor", "--config", path],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            out = result.stdout.decode()
            assert result.returncode == 0, out
            assert f"proxy http://u:<redacted>@127.0.0.1:{proxy.port} (Proxy=)" in out, out
            assert "pw-S3CRET" not in out
            assert f"127.0.0.1:{emulator.port}" in proxy.tunnels()
    finally:
        emulator.stop()


def test_no_proxy_applies_to_the_proxy_key_too(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    """Proxy= pointing nowhere, no_proxy=127.0.0.1 in the environment: the server is reached directly."""
    import subprocess
    from pushwoosh_agent.processes import agent_config
    emulator = _emulator(pushwoosh_tmp_dir, pushwoosh_bin)
    dead = ConnectProxy()
    dead.listener.close()
    try:
        path = os.path.join(pushwoosh_tmp_dir, "doctor.conf")
        with open(path, "w", encoding="utf-8") as f:
            f.write(agent_config({"application_code": "ABCDE-12345", "server_url": emulator.server_url,
                                  "ca_file": emulator.ca_file, "proxy": dead.url,
                                  "state_directory": os.path.join(pushwoosh_tmp_dir, "state")}))
        binary = os.path.join(pushwoosh_bin, "pushwoosh-agentd")
        bypassed = subprocess.run([binary, "--doctor", "--config", path], stdout=subprocess.PIPE, timeout=30,
                                  env={"PATH": "/usr/bin:/bin", "no_proxy": "127.0.0.1"})
        assert bypassed.returncode == 0, bypassed.stdout.decode()
        assert "no_proxy=127.0.0.1 may bypass it" in bypassed.stdout.decode()
        through = subprocess.run([binary, "--doctor", "--config", path], stdout=subprocess.PIPE, timeout=30,
                                 env={"PATH": "/usr/bin:/bin"})
        assert through.returncode == 1 and "proxy: the proxy did not connect" in through.stdout.decode()
    finally:
        emulator.stop()
