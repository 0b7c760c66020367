"""The lab clock against the real binaries: three devices with the SDK's real timings, one of
them offline for two and a half hours of emulator time, moved with ``pushwoosh_lab``,
``Fleet.advance_clock`` and ``pushwoosh-agentctl fleet advance-clock``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence

import pytest

from pushwoosh_agent import ClockAdvance, EmulatorClient, Fleet, Lab, LabClockError, RunningEmulator
from pushwoosh_agent.lab import parse_time
from pushwoosh_agent.processes import find_binary

OFFLINE = 1
WINDOW = 2 * 3600 + 30 * 60
TWO_HOURS = 7200


def _flag_requests(emulator: RunningEmulator, hwid: str, since: float) -> List[Dict[str, Any]]:
    return emulator.requests("getFeatureFlags", since=since, hwid=hwid)


def _refreshes(fired: Sequence[Mapping[str, Any]]) -> List[float]:
    """The times of the fired timers that started a refresh (a request)."""
    return [parse_time(str(f["at"])) for f in fired if f.get("trigger")]


def _check_outage(emulator: RunningEmulator, hwids: List[str], since: float, window_end: float,
                  advance: Callable[[float], Mapping[str, Any]]) -> None:
    first = advance(TWO_HOURS)
    assert set(first["fired"]) == set(hwids)
    total = 0
    for i, hwid in enumerate(hwids):
        logged = _flag_requests(emulator, hwid, since)
        total += len(logged)
        # The request log's times are the devices' fired times: each step ends a millisecond past
        # the timer (its `at`, to the millisecond), and the request takes real time to arrive.
        fired = _refreshes(first["fired"][hwid])
        assert len(fired) == len(logged), (hwid, first["fired"][hwid], logged)
        for at, request in zip(fired, logged):
            assert 0 <= float(request["unixTime"]) - at <= 1.0, (first["fired"][hwid], request["time"])
        if i == OFFLINE:
            assert len(logged) >= 3
            assert all(r["fault"] == "drop" and r["status"] is None for r in logged), logged
            assert all(float(r["unixTime"]) < window_end for r in logged)
            # Backing off, not a storm (RF-10): the j-th wait is at least half of 60 s doubled j
            # times (the jitter's lower half), never under a minute; a second for the network.
            times = [float(r["unixTime"]) for r in logged]
            waits = [b - a for a, b in zip(times, times[1:])]
            assert all(wait >= max(60, 30 * 2 ** j) - 1 for j, wait in enumerate(waits)), [r["time"] for r in logged]
        else:
            assert len(logged) >= 1  # the hourly refresh (its slot is within the hour plus 10 %)
            assert all(r["status"] == 200 and r["fault"] is None for r in logged), logged
    assert first["requests"] >= total
    # Two hours later the window has closed and the offline device has its flags again.
    second = advance(TWO_HOURS)
    assert _refreshes(second["fired"][hwids[OFFLINE]])
    last = _flag_requests(emulator, hwids[OFFLINE], since)[-1]
    assert last["status"] == 200 and last["fault"] is None and float(last["unixTime"]) >= window_end


def _start_outage(emulator: RunningEmulator, fleet: Fleet) -> tuple[List[str], float, float]:
    hwids = fleet.hwids()
    since = float(emulator.clock()["unixTime"])
    fault = emulator.add_fault("getFeatureFlags", hwid=hwids[OFFLINE], for_seconds=WINDOW, drop=True)
    return hwids, since, parse_time(fault["until"])


def test_an_outage_for_one_device_of_three_through_pushwoosh_lab(
        pushwoosh_lab: Lab, pushwoosh_fleet: Callable[..., Fleet]) -> None:
    fleet = pushwoosh_fleet(3, clock="controlled")
    assert [a.socket_path for a in pushwoosh_lab.agents] == [a.socket_path for a in fleet]
    hwids, since, window_end = _start_outage(pushwoosh_lab.emulator, fleet)
    _check_outage(pushwoosh_lab.emulator, hwids, since, window_end, pushwoosh_lab.advance_clock)
    assert fleet[OFFLINE].client.status()["state"] == "ready"


def test_fleet_advance_clock_keeps_the_log_on_the_devices_time_for_three_hours(
        pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Callable[..., Fleet]) -> None:
    fleet = pushwoosh_fleet(3, clock="controlled")
    since = float(pushwoosh_emulator.clock()["unixTime"])
    before = float(pushwoosh_emulator.clock()["offsetSeconds"])
    result: ClockAdvance = fleet.advance_clock(3 * 3600)
    assert float(pushwoosh_emulator.clock()["offsetSeconds"]) == pytest.approx(before + 3 * 3600, abs=0.01)
    assert parse_time(result["now"]) == pytest.approx(float(pushwoosh_emulator.clock()["unixTime"]), abs=2)
    for agent, hwid in zip(fleet, fleet.hwids()):
        assert float(agent.client.clock()["offsetSeconds"]) == pytest.approx(3 * 3600, abs=0.01)
        logged = _flag_requests(pushwoosh_emulator, hwid, since)
        fired = _refreshes(result["fired"][hwid])
        assert len(fired) == len(logged) >= 2  # hourly, each slot moved by up to 10 %
        for at, request in zip(fired, logged):
            assert 0 <= float(request["unixTime"]) - at <= 1.0, (result["fired"][hwid], request["time"])
    assert result["requests"] >= 6


def test_advance_clock_refuses_an_agent_whose_clock_is_not_controlled(
        pushwoosh_lab: Lab, pushwoosh_agent: Any) -> None:
    offset = float(pushwoosh_lab.emulator.clock()["offsetSeconds"])
    with pytest.raises(LabClockError, match="nothing moved: .*the system's") as caught:
        pushwoosh_lab.advance_clock(60)  # the lab's all or none (strict): a 409 naming the device
    assert caught.value.result is None
    assert float(pushwoosh_lab.emulator.clock()["offsetSeconds"]) == offset  # nothing moved
    for bad in (0, -5, float("nan"), "60", True):
        with pytest.raises(ValueError, match="seconds must be a positive number"):
            pushwoosh_lab.advance_clock(bad)  # type: ignore[arg-type]


def _agentctl(pushwoosh_bin: Any, *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([find_binary("pushwoosh-agentctl", pushwoosh_bin), *args], capture_output=True,
                          text=True, timeout=300)


def _socket_dir(fleet: Fleet, directory: str) -> str:
    """A directory with one NAME.sock per device (links to the agents' sockets), as a fleet has."""
    path = os.path.join(directory, "fleet-sockets")
    os.makedirs(path, exist_ok=True)
    for i, agent in enumerate(fleet):
        os.symlink(agent.socket_path, os.path.join(path, f"device-{i}.sock"))
    return path


def test_an_outage_for_one_device_of_three_through_agentctl(
        pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Callable[..., Fleet], pushwoosh_bin: Any,
        pushwoosh_tmp_dir: str) -> None:
    fleet = pushwoosh_fleet(3, clock="controlled")
    sockets = _socket_dir(fleet, pushwoosh_tmp_dir)
    hwids, since, window_end = _start_outage(pushwoosh_emulator, fleet)
    names = {f"device-{i}": hwid for i, hwid in enumerate(hwids)}

    def advance(seconds: float) -> Mapping[str, Any]:
        done = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", sockets, "--json", "advance-clock",
                         f"{int(seconds)}s", "--emulator", pushwoosh_emulator.base_url,
                         "--admin-token", str(pushwoosh_emulator.token_file))
        assert done.returncode == 0, done.stderr
        answer: Dict[str, Any] = json.loads(done.stdout)
        answer["fired"] = {names[name]: fired for name, fired in answer["fired"].items()}
        return answer

    _check_outage(pushwoosh_emulator, hwids, since, window_end, advance)
    # The text form: the time reached, each device's fired timers, the count of requests.
    text = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", sockets, "advance-clock", "1h",
                     "--emulator", pushwoosh_emulator.base_url, "--admin-token", str(pushwoosh_emulator.token_file))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("now: ")
    assert {line.split()[0] for line in lines[1:-1]} == set(names)
    assert "request" in lines[-1] and "fired" in lines[-1]


def test_agentctl_advance_clock_refuses_bad_input_and_moves_nothing(
        pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Callable[..., Fleet], pushwoosh_bin: Any,
        pushwoosh_tmp_dir: str) -> None:
    fleet = pushwoosh_fleet(1, clock="controlled")
    sockets = _socket_dir(fleet, pushwoosh_tmp_dir)
    url = pushwoosh_emulator.base_url
    for args, code, message in [
        (["advance-clock", "soon", "--emulator", url], 2, '"soon" is not a positive time span'),
        (["advance-clock", "1h", "--emulator", "ftp://x"], 2, "--emulator"),
        (["advance-clock", "1h"], 2, "needs --emulator URL"),
        (["advance-clock", "1h", "--emulator", "http://127.0.0.1:1"], 3, "does not answer"),
        (["advance-clock", "1h", "--emulator", url], 4, "is locked: give its token with --admin-token FILE"),
    ]:
        done = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", sockets, *args)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert message in done.stderr, (args, done.stderr)
    empty = os.path.join(pushwoosh_tmp_dir, "empty")
    os.makedirs(empty)
    done = _agentctl(pushwoosh_bin, "fleet", "--socket-dir", empty, "advance-clock", "1h", "--emulator", url)
    assert done.returncode == 3 and "no instances" in done.stderr
    assert float(pushwoosh_emulator.clock()["offsetSeconds"]) == 0
    assert float(fleet[0].client.clock()["offsetSeconds"]) == 0


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_pushwoosh_lab_moves_the_agent_and_the_fleet_the_test_started(
        pushwoosh_lab: Lab, pushwoosh_agent: Any, pushwoosh_fleet: Callable[..., Fleet]) -> None:
    fleet = pushwoosh_fleet(2, clock="controlled")
    assert len(pushwoosh_lab.agents) == 3
    hwids = [str(pushwoosh_agent.status()["hwid"])] + fleet.hwids()
    result = pushwoosh_lab.advance_clock(1800)
    assert sorted(result["fired"]) == sorted(hwids)
    for client in [pushwoosh_agent] + fleet.clients:
        assert float(client.clock()["offsetSeconds"]) == pytest.approx(1800, abs=0.01)
    assert float(pushwoosh_lab.emulator.clock()["offsetSeconds"]) == pytest.approx(1800, abs=0.01)
    # A killed agent is left out; the others still move.
    fleet[0].kill()
    moved = pushwoosh_lab.advance_clock(600)
    assert hwids[1] not in moved["fired"] and len(moved["fired"]) == 2


@pytest.mark.pushwoosh_emulator(admin_token="lab-secret")
def test_agentctl_advance_clock_with_a_locked_emulator(
        pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Callable[..., Fleet], pushwoosh_bin: Any,
        pushwoosh_tmp_dir: str) -> None:
    fleet = pushwoosh_fleet(1, clock="controlled")
    sockets = _socket_dir(fleet, pushwoosh_tmp_dir)
    args = ["fleet", "--socket-dir", sockets, "advance-clock", "1h", "--emulator", pushwoosh_emulator.base_url]
    refused = _agentctl(pushwoosh_bin, *args)
    assert refused.returncode == 4 and "is locked: give its token with --admin-token FILE" in refused.stderr, refused.stderr
    assert float(fleet[0].client.clock()["offsetSeconds"]) == 0  # nothing moved
    token = os.path.join(pushwoosh_tmp_dir, "admin.token")
    with open(token, "w", encoding="utf-8") as f:
        f.write("lab-secret\n")
    done = _agentctl(pushwoosh_bin, *args, "--admin-token", token)
    assert done.returncode == 0, done.stderr
    assert float(pushwoosh_emulator.clock()["offsetSeconds"]) == pytest.approx(3600, abs=0.01)
    assert float(fleet[0].client.clock()["offsetSeconds"]) == pytest.approx(3600, abs=0.01)


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_pushwoosh_lab_moves_its_agents_in_two_requests_and_leaves_out_one_that_exited(
        pushwoosh_lab: Lab, pushwoosh_agent: Any, pushwoosh_fleet: Callable[..., Fleet],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = pushwoosh_fleet(2, clock="controlled")
    hwids = [str(pushwoosh_agent.status()["hwid"])] + fleet.hwids()
    sent: List[str] = []
    real = EmulatorClient._request

    def counted(self: EmulatorClient, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(f"{method} {path}")
        return real(self, method, path, *args, **kwargs)

    monkeypatch.setattr(EmulatorClient, "_request", counted)
    assert sorted(pushwoosh_lab.advance_clock(600)["fired"]) == sorted(hwids)
    assert sent == ["GET /lab/devices", "POST /lab/advance"]  # not one more per agent, however many
    # A device whose process ended on its own (not stopped through its AgentProcess) is left out too.
    lab = pushwoosh_lab.emulator.lab
    lab.signal(fleet[0].name, "KILL")
    deadline = time.monotonic() + 10
    while lab.device(fleet[0].name)["state"] != "exited" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not fleet[0].running
    moved = pushwoosh_lab.advance_clock(600)
    assert sorted(moved["fired"]) == sorted([hwids[0], hwids[2]])
