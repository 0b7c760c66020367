"""pushwoosh-agentctl says what happened (docs/fleet.md E.1, docs/socket-api.md B.1), against the
real binaries: a missing property and one of another type are told apart in its warning; an
unknown command suggests the nearest; one name per method (the older one an alias); ``fleet
status`` ages in device time; ``fleet advance-clock`` names every device it cannot move (exit
3); ``fleet call --strict`` exits 5 on a fallback or a refresh not sent."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Callable, List, Optional

import pytest

from pushwoosh_agent import AgentClient, Fleet, RunningEmulator
from pushwoosh_agent.processes import AgentProcess, find_binary


def _agentctl(pushwoosh_bin: Optional[str], *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([find_binary("pushwoosh-agentctl", pushwoosh_bin), *args], capture_output=True,
                          text=True, timeout=120)


def _socket_dir(agents: List[AgentProcess], directory: str) -> str:
    path = os.path.join(directory, "fleet-sockets")
    os.makedirs(path, exist_ok=True)
    for i, agent in enumerate(agents):
        os.symlink(agent.socket_path, os.path.join(path, f"device-{i}.sock"))
    return path


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_the_property_warning_tells_missing_from_another_type(pushwoosh_agent_process: AgentProcess,
                                                              pushwoosh_bin: Optional[str]) -> None:
    sock = ["--socket", pushwoosh_agent_process.socket_path]
    missing = _agentctl(pushwoosh_bin, *sock, "property", "new_checkout", "max_itemz", "--type", "number", "--default", "7")
    other = _agentctl(pushwoosh_bin, *sock, "property", "new_checkout", "button_color", "--type", "number", "--default", "7")
    assert (missing.returncode, missing.stdout, other.stdout) == (0, "7\n", "7\n")
    assert missing.stderr == 'warning: TYPE_MISMATCH: flag "new_checkout" has no property "max_itemz"; printed the default\n'
    assert other.stderr == 'warning: TYPE_MISMATCH: property "button_color" of flag "new_checkout" is a string, ' \
                           'not a number; printed the default\n'
    strict = _agentctl(pushwoosh_bin, *sock, "property", "new_checkout", "max_itemz", "--type", "number", "--strict")
    assert strict.returncode == 5


def test_an_unknown_command_suggests_the_nearest_and_old_names_still_answer(
        pushwoosh_agent_process: AgentProcess, pushwoosh_bin: Optional[str]) -> None:
    sock = ["--socket", pushwoosh_agent_process.socket_path]
    typo = _agentctl(pushwoosh_bin, *sock, "stauts")
    assert typo.returncode == 2
    assert typo.stderr.startswith("pushwoosh-agentctl: unknown command 'stauts'; did you mean 'status'?\n"), typo.stderr
    method = _agentctl(pushwoosh_bin, *sock, "registerForPushNotifications")
    assert "did you mean 'register-for-push'?" in method.stderr
    # One name per method: the Python client's (register_for_push); the older one still works.
    for name in ["register-for-push", "register-push"]:
        done = _agentctl(pushwoosh_bin, *sock, name)
        assert done.returncode == 0 and done.stdout.startswith("push registration: "), (name, done.stderr)
    for name in ["set-user-id", "set-user"]:
        assert _agentctl(pushwoosh_bin, *sock, name, "bob").returncode == 0
    assert pushwoosh_agent_process.client.status()["userId"] == "bob"
    usage = _agentctl(pushwoosh_bin, "--help").stdout
    assert re.search(r"^  register-push +the same as register-for-push$", usage, re.M), usage


def test_fleet_status_ages_are_in_device_time(pushwoosh_fleet: Callable[..., Fleet], pushwoosh_tmp_dir: str,
                                              pushwoosh_bin: Optional[str]) -> None:
    """A controlled clock 3 h ahead of the host, its last refresh 3 h ago in device time (the
    host's clock would say it happened 'in the future', shown before as '0 s ago')."""
    fleet = pushwoosh_fleet(2, clock="controlled")
    fleet[0].client.advance_clock(3 * 3600 + 600)  # the hourly refreshes run on the way (RF-12: each within 6 min of its hour)
    fleet[1].client.set_app_state("background")
    fleet[1].client.advance_clock(3 * 3600)          # in the background: no refresh; 3 h since the last
    sockets = _socket_dir(list(fleet), pushwoosh_tmp_dir)
    done = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", sockets, "status")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:-1]}
    status = fleet[1].client.status()
    assert status["flagsAgeSeconds"] is not None and status["flagsAgeSeconds"] >= 3 * 3600
    assert "3 h ago" in rows["device-1"], done.stdout
    assert re.search(r"\b3 h\b", rows["device-1"]), done.stdout  # the flags' age, device time too
    assert "0 s ago" not in rows["device-1"]
    assert " ago" in rows["device-0"] and " h ago" not in rows["device-0"], done.stdout  # refreshed within the hour


def test_fleet_advance_clock_names_every_device_it_cannot_move(
        pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Callable[..., Fleet], pushwoosh_tmp_dir: str,
        pushwoosh_bin: Optional[str]) -> None:
    controlled = pushwoosh_fleet(1, clock="controlled")
    system = pushwoosh_fleet(1)              # Clock=system: -32004
    stopped = pushwoosh_fleet(1, clock="controlled")
    agents = list(controlled) + list(system) + list(stopped)
    sockets = _socket_dir(agents, pushwoosh_tmp_dir)
    stopped[0].stop()
    token = ["--admin-token", str(pushwoosh_emulator.token_file)]
    done = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", sockets, "--timeout", "2", "advance-clock", "1h",
                     "--emulator", pushwoosh_emulator.base_url, *token)
    assert done.returncode == 3, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    # Stopped: the lab cannot reach it (its socket gone, or nobody behind it).
    assert any(line.startswith("pushwoosh-agentctl: fleet advance-clock: cannot move device-2: ") for line in lines), lines
    assert lines[-1] == "pushwoosh-agentctl: fleet advance-clock: 1 of 3 instances cannot be moved; nothing was moved"
    # Every one reachable: the lab's all-or-none names the system clock, and moves nothing.
    reachable = _socket_dir(list(controlled) + list(system), os.path.join(pushwoosh_tmp_dir, "reachable"))
    done = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", reachable, "advance-clock", "1h",
                     "--emulator", pushwoosh_emulator.base_url, *token)
    assert done.returncode == 3, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert any(line.startswith("pushwoosh-agentctl: fleet advance-clock: cannot move device-1: its clock is the system's")
               for line in lines), lines
    assert lines[-1] == "pushwoosh-agentctl: fleet advance-clock: 1 of 2 instances cannot be moved; nothing was moved"
    assert "device-0" not in done.stderr
    assert float(controlled[0].client.clock()["offsetSeconds"]) == 0  # nothing moved
    assert float(pushwoosh_emulator.clock()["offsetSeconds"]) == 0


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_fleet_call_strict_exits_5_on_a_fallback_or_a_refresh_not_sent(
        pushwoosh_fleet: Callable[..., Fleet], pushwoosh_tmp_dir: str, pushwoosh_bin: Optional[str]) -> None:
    fleet = pushwoosh_fleet(2, disable_throttle=False)  # the throttle: a second refresh is not sent
    sockets = _socket_dir(list(fleet), pushwoosh_tmp_dir)
    base = ["fleet", "--socket-dir", sockets]
    found = _agentctl(pushwoosh_bin, *base, "call", "isEnabled", '{"key":"new_checkout","default":false}', "--strict")
    assert found.returncode == 0 and found.stderr == "", found.stderr
    missing = _agentctl(pushwoosh_bin, *base, "call", "isEnabled", '{"key":"new_chekout","default":false}')
    assert missing.returncode == 0  # without --strict: said, not failed
    assert missing.stderr == "warning: 2 of 2 instances answered with the caller's default: device-0 (FLAG_NOT_FOUND: " \
                             'no flag "new_chekout" in the served flags); device-1 (FLAG_NOT_FOUND: no flag "new_chekout" ' \
                             "in the served flags)\n", missing.stderr
    strict = _agentctl(pushwoosh_bin, *base, "call", "isEnabled", '{"key":"new_chekout","default":false}', "--strict")
    assert strict.returncode == 5
    prop = _agentctl(pushwoosh_bin, *base, "--strict", "call", "property",
                     '{"key":"new_checkout","property":"max_itemz","type":"number","default":1}')
    assert prop.returncode == 5 and 'has no property \\"max_itemz\\"' not in prop.stderr
    assert 'flag "new_checkout" has no property "max_itemz"' in prop.stderr
    # refresh: the fixture's first refresh opened the throttle window, so this one is not sent.
    refresh = _agentctl(pushwoosh_bin, *base, "call", "refresh", "--strict")
    assert refresh.returncode == 5, (refresh.stdout, refresh.stderr)
    assert "not sent" in refresh.stdout and "did not send the refresh: device-0 (throttle window until " in refresh.stderr
    assert _agentctl(pushwoosh_bin, *base, "call", "refresh").returncode == 0
    bad = _agentctl(pushwoosh_bin, *base, "status", "--strict")
    assert bad.returncode == 2 and "--strict is for 'fleet call'" in bad.stderr


def test_the_client_and_agentctl_agree_on_the_words(pushwoosh_agent: AgentClient) -> None:
    """The Python client reads the agent's errorMessage: the same words as agentctl's warning."""
    details = pushwoosh_agent.property_details("new_checkout", "max_itemz", "number", 7)
    assert details.error_message == 'flag "new_checkout" has no property "max_itemz"'


