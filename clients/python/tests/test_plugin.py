"""The pytest plugin itself, socket resolution, and the package's data."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from typing import Callable, Optional

import pytest

from conftest import REPO
from pushwoosh_agent import AgentClient, AgentNotRunning, Fleet, default_socket_path, instance_socket_path
from pushwoosh_agent.fixtures import RunningEmulator
from pushwoosh_agent.plugin import _wait_for_first_refresh
from pushwoosh_agent.processes import EXAMPLE_APP_PATH, AgentProcess, agent_config


@pytest.mark.pushwoosh_agent(refresh_interval="20s", throttle_window=90, stored_flags_lifetime="2h",
                             InitialAppState="active", disable_throttle=False, extra_config="# the end")
def test_marker_settings_reach_the_config_file(pushwoosh_agent_process: AgentProcess) -> None:
    with open(pushwoosh_agent_process.config_path, encoding="utf-8") as f:
        text = f.read()
    for line in ["RefreshInterval=20s", "ThrottleWindow=90", "StoredFlagsLifetime=2h", "InitialAppState=active",
                 "DisableThrottle=no", "RequestTimeout=5s", "ApplicationCode=ABCDE-12345",
                 f"Socket={pushwoosh_agent_process.socket_path}", f"StateDirectory={pushwoosh_agent_process.state_dir}",
                 "# the end"]:
        assert line in text.splitlines(), line
    status = pushwoosh_agent_process.client.status()
    last = dt.datetime.fromisoformat(status["lastRefreshAt"].replace("Z", "+00:00"))
    following = dt.datetime.fromisoformat(status["nextRefreshAt"].replace("Z", "+00:00"))
    assert 15 <= (following - last).total_seconds() <= 25  # 20 s, offset by at most 10 % (RF-12)


def test_ready_status_and_stopping_arrive_on_notify_socket(pushwoosh_agent_process: AgentProcess) -> None:
    agent = pushwoosh_agent_process
    assert any("READY=1" in n for n in agent.notifications)
    assert agent.wait_for_notification("STATUS=") is not None
    count = len(agent.notifications)
    assert agent.stop() == 0
    assert agent.wait_for_notification("STOPPING=1", after=count, timeout=2) is not None


def test_the_default_socket_follows_agentctl(monkeypatch: pytest.MonkeyPatch,
                                             pushwoosh_agent_process: AgentProcess) -> None:
    assert default_socket_path({}) == "/run/pushwoosh-agent/agent.sock"
    assert default_socket_path({"RUNTIME_DIRECTORY": "/run/x:/run/y"}) == "/run/x/agent.sock"
    assert default_socket_path({"RUNTIME_DIRECTORY": "/run/x/"}) == "/run/x/agent.sock"
    assert default_socket_path({"PUSHWOOSH_AGENT_SOCKET": "/s", "RUNTIME_DIRECTORY": "/run/x"}) == "/s"
    assert default_socket_path({"PUSHWOOSH_AGENT_SOCKET": "", "RUNTIME_DIRECTORY": ""}) == \
        "/run/pushwoosh-agent/agent.sock"
    monkeypatch.setenv("PUSHWOOSH_AGENT_SOCKET", pushwoosh_agent_process.socket_path)
    with AgentClient() as client:
        assert client.socket_path == pushwoosh_agent_process.socket_path
        assert client.status()["state"] == "ready"


def test_instance_sockets() -> None:
    assert instance_socket_path("kiosk-7") == "/run/pushwoosh-agent/kiosk-7.sock"
    for bad in ["", "a/b", "..", ".", ".hidden", "a b", "x" * 65, "caf\u00e9"]:
        with pytest.raises(ValueError):
            instance_socket_path(bad)
    with pytest.raises(AgentNotRunning) as caught:
        AgentClient(instance="no-such-instance-here")
    assert caught.value.socket_path == "/run/pushwoosh-agent/no-such-instance-here.sock"


def test_agent_config_values() -> None:
    text = agent_config({"disable_throttle": True, "request_timeout": 1.5, "max_connections": 3,
                         "refresh_interval": 2.0, "user_id": None, "SessionTimeout": "1min"})
    assert text.splitlines()[1:] == ["", "[Agent]", "RequestTimeout=1500ms", "MaxConnections=3", "",
                                     "[FeatureFlags]", "DisableThrottle=yes", "RefreshInterval=2",
                                     "SessionTimeout=1min"]
    with pytest.raises(ValueError, match="refresh_intervall"):
        agent_config({"refresh_intervall": "5s"})
    with pytest.raises(ValueError):
        agent_config({"user_id": "a\n[Agent]"})


def test_the_packaged_example_app_is_the_repositorys() -> None:
    with open(EXAMPLE_APP_PATH, encoding="utf-8") as packaged, \
            open(os.path.join(REPO, "config", "flags.example.json"), encoding="utf-8") as original:
        assert json.load(packaged) == json.load(original)


# --- The plugin as a user runs it -----------------------------------------------------------


def _bin_args(config: pytest.Config) -> list:  # type: ignore[type-arg]
    value = config.getoption("--pushwoosh-bin")
    return ["--pushwoosh-bin", value] if value else []


INNER = '''
import pytest

@pytest.mark.pushwoosh_agent(user_id="zed")
def test_fails(pushwoosh_agent):
    assert pushwoosh_agent.status()["userId"] == "zed"
    assert pushwoosh_agent.is_enabled("new_checkout", False) == "deliberately wrong"

def test_passes(pushwoosh_agent, pushwoosh_emulator):
    assert pushwoosh_agent.status()["state"] == "ready"
'''


def test_a_failing_test_gets_both_logs_in_its_report(pytester: pytest.Pytester,
                                                     pytestconfig: pytest.Config) -> None:
    pytester.makepyfile(INNER)
    result = pytester.runpytest_subprocess(*_bin_args(pytestconfig), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "deliberately wrong" in output
    assert output.count("pushwoosh-agentd log (call)") == 1  # only the failing test's
    assert output.count("pushwoosh-emulator log (call)") == 1
    assert "pushwoosh-agentd[info]: ready socket=" in output
    assert "listening on 127.0.0.1:" in output


def test_a_missing_binary_and_a_bad_marker_are_reported(pytester: pytest.Pytester,
                                                        pytestconfig: pytest.Config, tmp_path: str) -> None:
    pytester.makepyfile('''
import pytest

def test_agent(pushwoosh_agent):
    pass

@pytest.mark.pushwoosh_agent(refresh_intervall="5s")
def test_typo(pushwoosh_agent):
    pass
''')
    empty = pytester.mkdir("empty-bin")
    result = pytester.runpytest_subprocess("--pushwoosh-bin", str(empty), "-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    assert "pushwoosh-emulator not found in" in result.stdout.str()
    if shutil.which("pushwoosh-agentd") is None:  # and with PATH (where it is not installed)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_agent")
        assert "not on PATH" in result.stdout.str()
    result = pytester.runpytest_subprocess(*_bin_args(pytestconfig), "-p", "no:cacheprovider", "-k", "typo")
    result.assert_outcomes(errors=1)
    assert "unknown option 'refresh_intervall'; did you mean 'refresh_interval'?" in result.stdout.str()


def test_marker_and_fixture_typos_fail_cleanly_naming_the_nearest(pytester: pytest.Pytester,
                                                                  pytestconfig: pytest.Config) -> None:
    pytester.makepyfile('''
import pytest

@pytest.mark.pushwoosh_agent(wait_for_flag=False)
def test_agent_option(pushwoosh_agent):
    pass

@pytest.mark.pushwoosh_agent(RefreshIntervall="5s")
def test_agent_key(pushwoosh_agent):
    pass

@pytest.mark.pushwoosh_emulator(require_tokn="t")
def test_emulator_option(pushwoosh_emulator):
    pass

def test_fleet_option(pushwoosh_fleet):
    pushwoosh_fleet(1, user_id_s="u{i}")

@pytest.mark.pushwoosh_agent("5s")
def test_positional(pushwoosh_agent):
    pass
''')
    result = pytester.runpytest_subprocess(*_bin_args(pytestconfig), "-p", "no:cacheprovider")
    result.assert_outcomes(errors=4, failed=1)
    output = result.stdout.str()
    assert "@pytest.mark.pushwoosh_agent: unknown option 'wait_for_flag'; did you mean 'wait_for_flags'?" in output
    assert "@pytest.mark.pushwoosh_agent: unknown option 'RefreshIntervall'; did you mean 'RefreshInterval'?" in output
    assert "@pytest.mark.pushwoosh_emulator: unknown option 'require_tokn'; did you mean 'require_token'?" in output
    assert "pushwoosh_fleet(...): unknown option 'user_id_s'; did you mean 'user_id'?" in output
    assert "@pytest.mark.pushwoosh_agent takes keyword arguments only" in output
    # A clean failure: no traceback through the plugin's code.
    assert "Traceback" not in output and "plugin.py:" not in output, output


def test_the_settings_map_is_the_agents_key_table(pushwoosh_bin: Optional[str]) -> None:
    """AGENT_SETTINGS names exactly the keys of ``pushwoosh-agentd --list-keys``, in their sections."""
    import subprocess

    from pushwoosh_agent.processes import AGENT_SETTINGS, find_binary

    listed = subprocess.run([find_binary("pushwoosh-agentd", pushwoosh_bin), "--list-keys"],
                            check=True, capture_output=True, text=True).stdout
    table = {(row.split("\t")[0], row.split("\t")[1]) for row in listed.splitlines()}
    assert len(table) >= 20
    mapped = set(AGENT_SETTINGS.values())
    assert table - mapped == set(), "keys of the agent the Python client cannot set"
    assert mapped - table == set(), "keys the Python client sets that the agent does not have"


def test_the_settings_map_names_every_key_of_the_example_configuration() -> None:
    """AGENT_SETTINGS and config/agent.conf (which the Swift tests hold to the agent's key table) agree."""
    import re

    from pushwoosh_agent.processes import AGENT_SETTINGS

    documented = set()
    section = ""
    with open(os.path.join(REPO, "config", "agent.conf"), encoding="utf-8") as f:
        for line in f:
            header = re.match(r"^\[(\w+)\]", line)
            if header:
                section = header.group(1)
            key = re.match(r"^#?([A-Z][A-Za-z]+)=", line)
            if key:
                documented.add((section, key.group(1)))
    mapped = set(AGENT_SETTINGS.values())
    assert documented - mapped == set(), "keys of config/agent.conf the Python client cannot set"
    assert mapped - documented == set(), "keys the Python client sets that config/agent.conf does not have"


def test_instance_names_are_the_agents_rule(pushwoosh_bin: Optional[str]) -> None:
    """The client accepts exactly the names pushwoosh-agentctl accepts (exit 2: a usage error)."""
    import subprocess

    from pushwoosh_agent.paths import is_instance_name
    from pushwoosh_agent.processes import find_binary

    agentctl = find_binary("pushwoosh-agentctl", pushwoosh_bin)
    for name in ["kiosk-7", "a.b_c", "x" * 64, "x" * 65, ".hidden", "a b", "a/b", "caf\u00e9", "-", "9"]:
        run = subprocess.run([agentctl, "--instance", name, "--timeout", "1", "status"], capture_output=True, text=True)
        assert (run.returncode != 2) == is_instance_name(name), (name, run.returncode, run.stderr)


@pytest.mark.pushwoosh_agent(wait_for_flags=False, refresh_interval="2h")
def test_a_fleet_takes_the_markers_wait_for_flags(pushwoosh_fleet: Callable[..., Fleet]) -> None:
    """The marker's ``wait_for_flags`` is the fleet's option, as its settings are the agents' (it was
    passed on to the agents as an unknown setting, failing the fixture)."""
    fleet = pushwoosh_fleet(1)
    with open(fleet[0].config_path, encoding="utf-8") as f:
        text = f.read()
    assert "RefreshInterval=2h" in text and "WaitForFlags" not in text


def test_the_fixtures_first_refresh_wait_ends_when_the_answer_comes(
        pushwoosh_emulator: RunningEmulator, pushwoosh_tmp_dir: str) -> None:
    """The fixture's wait for the first flags request (``wait_for_flags``): a failure naming the status while
    the answer is held back; the answer's ``refreshCompleted`` ends it."""
    pushwoosh_emulator.add_fault("getFeatureFlags", delay_ms=1500)
    with AgentProcess(pushwoosh_tmp_dir, settings={"request_timeout": "10s"}, lab=pushwoosh_emulator.lab) as agent:
        with pytest.raises(pytest.fail.Exception, match=r"no flags request within 0.2 s \(status .*'notReady'"):
            _wait_for_first_refresh(agent, timeout=0.2)
        _wait_for_first_refresh(agent, timeout=10)
        assert agent.client.status()["lastRefreshAt"] is not None
        assert pushwoosh_emulator.requests("getFeatureFlags")[0]["fault"]  # the delayed one was the first
