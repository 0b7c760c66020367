"""TLS towards the server: always verified, `[Agent] CAFile=` adds a CA, and every
certificate problem fails the refresh with code 0 and names itself (status, log, /metrics).
The emulator serves HTTPS with certificates from CAs made in the test."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import urllib.request
from typing import Any, Dict, Iterator, Optional, Tuple

import pytest

from conftest import wait_until
from pushwoosh_agent.emulator import EmulatorClient
from pushwoosh_agent.processes import AgentProcess, EmulatorProcess
from pushwoosh_agent.tls import Issued, TestCA


def _failed_status(agent: AgentProcess, timeout: float = 10.0) -> Dict[str, Any]:
    """The agent's status once a refresh has failed."""
    def failed() -> Optional[Dict[str, Any]]:
        status = dict(agent.client.status())
        return status if status.get("lastRefreshError") else None
    return dict(wait_until(failed, timeout, 0.02, what=lambda: f"no refresh failure: {agent.client.status()}"))


def _metrics(agent: AgentProcess) -> str:
    url = agent.http_url
    assert url is not None
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return str(r.read().decode())


@pytest.mark.pushwoosh_emulator(tls=True)
@pytest.mark.pushwoosh_agent(user_id="alice")
def test_trusted_with_ca_file_serves_flags(pushwoosh_agent: Any, pushwoosh_emulator: Any) -> None:
    assert pushwoosh_emulator.base_url.startswith("https://")
    status = pushwoosh_agent.status()
    assert status["state"] == "ready", status
    assert status["lastRefreshError"] is None
    assert pushwoosh_agent.is_enabled("new_checkout") is True
    # The emulator saw the call over TLS (its admin API answers over HTTPS too).
    assert pushwoosh_emulator.requests(method="getFeatureFlags")


@contextlib.contextmanager
def _tls_pair(tmp: str, pushwoosh_bin: str, cert: Issued, ca_file: str, agent_ca_file: Optional[str],
              environment: Optional[Dict[str, str]] = None) -> Iterator[Tuple[EmulatorProcess, AgentProcess]]:
    """An emulator serving HTTPS with `cert` (its admin API trusting `ca_file`) and an agent
    pointed at it with `CAFile=agent_ca_file` (None: no CAFile=), started; both stopped after."""
    emulator = EmulatorProcess(tmp, binary=os.path.join(pushwoosh_bin, "pushwoosh-emulator"), tls=cert,
                               ca_file=ca_file).start()
    settings: Dict[str, Any] = {"disable_throttle": True, "request_timeout": "5s", "http_listen": "127.0.0.1:0"}
    if agent_ca_file is not None:
        settings["ca_file"] = agent_ca_file
    agent = AgentProcess(tmp, server_url=emulator.server_url, binary=os.path.join(pushwoosh_bin, "pushwoosh-agentd"),
                         settings=settings, environment=environment)
    try:
        agent.start()
        yield emulator, agent
    finally:
        agent.close()
        emulator.stop()


def _reload(agent: AgentProcess, answer: str, timeout: float = 10.0) -> str:
    """Rewrite the agent's configuration, SIGHUP it and wait for `answer` in its log; the log since."""
    agent.write_config()
    mark = len(agent.log())
    agent.signal(signal.SIGHUP)
    wait_until(lambda: answer in agent.log()[mark:], timeout, 0.02, what=lambda: f"no {answer!r}: {agent.log()[mark:]}")
    return agent.log()[mark:]


@pytest.mark.parametrize("issue,trust,problem,words", [
    ({}, "other", "tls_untrusted", "certificate is not trusted"),
    ({"expired": True}, "server", "tls_expired", "certificate has expired"),
    ({"hosts": ["pushwoosh.invalid"]}, "server", "tls_wrong_host", "certificate is for another host"),
])
def test_certificate_problems_fail_with_code_0_and_name_themselves(
        pushwoosh_bin: str, pushwoosh_tmp_dir: str, issue: Dict[str, Any], trust: str, problem: str,
        words: str) -> None:
    ca, other = TestCA(pushwoosh_tmp_dir, "server-ca"), TestCA(pushwoosh_tmp_dir, "other-ca")
    trusted = ca.ca_file if trust == "server" else other.ca_file
    with _tls_pair(pushwoosh_tmp_dir, pushwoosh_bin, ca.issue("server", **issue), ca.ca_file, trusted) as (emulator, agent):
        status = _failed_status(agent)
        error = status["lastRefreshError"]
        assert error["code"] == 0, error
        assert words in error["message"], error
        assert status["state"] == "error", status
        admin = EmulatorClient(emulator.base_url, admin_token=emulator.admin_token)
        admin.ssl_context = ssl._create_unverified_context()  # the test's own look at a certificate it broke
        assert not admin.requests(method="getFeatureFlags"), "no request may reach a server not trusted"
        log = agent.log()
        assert "refresh failed" in log and words in log, log
        metrics = _metrics(agent)
        assert f'pushwoosh_agent_refresh_network_failures_total{{problem="{problem}"}} 1' in metrics \
            or f'pushwoosh_agent_refresh_network_failures_total{{problem="{problem}"}} 2' in metrics, metrics


def test_without_ca_file_a_private_ca_is_not_trusted(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    """No CAFile=: the system store only, and SSL_CERT_FILE from the environment changes nothing."""
    ca = TestCA(pushwoosh_tmp_dir, "private")
    with _tls_pair(pushwoosh_tmp_dir, pushwoosh_bin, ca.issue("server"), ca.ca_file, None,
                   environment={"SSL_CERT_FILE": ca.ca_file, "CURL_CA_BUNDLE": ca.ca_file}) as (_, agent):
        error = _failed_status(agent)["lastRefreshError"]
        assert error["code"] == 0 and "not trusted" in error["message"] and "CAFile=" in error["message"], error


def test_ca_file_applies_on_reload(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    """SIGHUP re-reads CAFile=: the next request trusts the CA; a bad CAFile= on reload keeps the running one."""
    ca = TestCA(pushwoosh_tmp_dir, "reload-ca")
    with _tls_pair(pushwoosh_tmp_dir, pushwoosh_bin, ca.issue("server"), ca.ca_file, None) as (_, agent):
        assert "not trusted" in _failed_status(agent)["lastRefreshError"]["message"]
        agent.settings["ca_file"] = ca.ca_file
        _reload(agent, "configuration reloaded")
        agent.client.refresh()
        assert agent.client.status()["state"] == "ready"
        agent.settings["ca_file"] = os.path.join(pushwoosh_tmp_dir, "gone.pem")
        since = _reload(agent, "configuration not reloaded")
        assert "CAFile: cannot read" in since, since
        agent.client.refresh()  # still trusted: the running configuration was kept
