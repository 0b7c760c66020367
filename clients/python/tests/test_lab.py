"""EmulatorClient's lab calls (docs/emulator.md D.3), the fleet fixture, the restartable emulator,
the agent's HTTP URL and AgentClient.details(), against the real binaries."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

import pytest

from conftest import APP
from pushwoosh_agent import AgentClient, EmulatorError, FlagDetails, RefreshError, RequestsTimeout
from pushwoosh_agent.plugin import Fleet, RunningEmulator
from pushwoosh_agent.processes import AgentProcess


def call(emulator: RunningEmulator, hwid: str, user: Optional[str] = None, method: str = "getFeatureFlags") -> int:
    """One device API call as the agent would send it; the HTTP status (0: dropped)."""
    body = json.dumps({"request": {"application": APP, "hwid": hwid, "userId": user or hwid, "v": "7.2.10",
                                   "device_type": 1}}).encode()
    request = urllib.request.Request(emulator.server_url + method, data=body, method="POST",
                                     headers={"Content-Type": "application/json; charset=utf-8"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, ConnectionError):
        return 0


def test_a_fault_scoped_to_one_device_and_counting_by_hwid(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    armed = emu.add_fault("getFeatureFlags", 2, hwid="h7", http=503)
    assert armed["hwid"] == "h7" and armed["remaining"] == 2 and armed["until"] is None
    assert [call(emu, "h1"), call(emu, "h7"), call(emu, "h7"), call(emu, "h7")] == [200, 503, 503, 200]
    assert emu.count_requests("getFeatureFlags", hwid="h7") == 3
    assert emu.count_requests(hwid="h1") == 1
    assert [r["status"] for r in emu.requests(hwid="h7")] == [503, 503, 200]
    assert all(r["hwid"] == "h7" for r in emu.requests("getFeatureFlags", hwid="h7"))
    emu.add_fault("getFeatureFlags", user_id="bob", status_code=500)
    call(emu, "h2", "alice")
    call(emu, "h3", "bob")
    assert [r["userId"] for r in emu.requests(user_id="bob")] == ["bob"]
    assert emu.requests(user_id="bob")[0]["fault"] == "statusCode"


def test_for_seconds_lists_until_and_ends_when_the_clock_advances(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    armed = emu.add_fault("getFeatureFlags", hwid="h7", for_seconds=7200, drop=True)
    assert armed["remaining"] is None and armed["until"] is not None and armed["forSeconds"] == 7200
    assert [call(emu, "h7") for _ in range(3)] == [0, 0, 0]
    listed = emu.faults()
    assert len(listed) == 1 and listed[0]["until"] == armed["until"]
    clock = emu.advance_clock(7200)
    assert clock["offsetSeconds"] == 7200
    assert call(emu, "h7") == 200
    assert emu.faults() == []


def test_seeded_probability_gives_the_same_pattern_twice(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator

    def pattern(seed: int) -> List[int]:
        emu.reset()
        emu.add_fault("getFeatureFlags", hwid="h7", for_seconds=600, probability=0.5, seed=seed, http=503)
        return [call(emu, "h7") for _ in range(24)]

    first = pattern(7)
    assert pattern(7) == first
    assert 503 in first and 200 in first
    assert pattern(8) != first


def test_wait_for_requests_returns_as_soon_as_they_arrive(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    call(emu, "h1")
    got: Dict[str, Any] = {}

    def wait() -> None:
        got["requests"] = emu.wait_for_requests("getFeatureFlags", hwid="h1", count=2, timeout=20)

    waiter = threading.Thread(target=wait)
    waiter.start()
    call(emu, "h2")  # another device: not counted
    call(emu, "h1")
    waiter.join(30)
    assert [r["hwid"] for r in got["requests"]] == ["h1", "h1"]


def test_wait_for_requests_times_out_with_what_arrived(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    call(emu, "h1")
    with pytest.raises(RequestsTimeout) as caught:
        emu.wait_for_requests(hwid="h1", count=3, timeout=0.2)
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.status == 408 and caught.value.expected == 3
    assert [r["hwid"] for r in caught.value.requests] == ["h1"]
    with pytest.raises(EmulatorError) as bad:
        emu.wait_for_requests(count=100_001)
    assert bad.value.status == 400 and bad.value.path == "count"
    with pytest.raises(EmulatorError) as bad:
        emu.wait_for_requests(timeout=301)
    assert bad.value.path == "timeout"


def test_clock_set_and_not_backwards(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    before = emu.clock()
    assert before["offsetSeconds"] == 0 and before["now"].endswith("Z")
    later = emu.set_clock("2034-01-01T00:00:00Z")
    assert later["now"].startswith("2034-01-01T00:00:00")
    call(emu, "h1")
    assert emu.requests()[0]["time"].startswith("2034-01-01")
    with pytest.raises(EmulatorError) as caught:
        emu.set_clock("2030-01-01T00:00:00Z")
    assert caught.value.status == 400 and caught.value.path == "set"
    with pytest.raises(EmulatorError) as caught:
        emu.advance_clock(-1)
    assert caught.value.path == "advanceSeconds"


def test_reset_state_and_load_state(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    call(emu, "h1", "alice", "registerUser")
    emu.advance_clock(60)
    emu.kill(APP, "new_checkout")
    saved = emu.state()
    assert saved["version"] == 1 and saved["clockOffsetSeconds"] == 60
    assert [d["hwid"] for d in saved["devices"]] == ["h1"]
    emu.add_fault("getFeatureFlags", drop=True)
    emu.reset()
    assert emu.devices() == [] and emu.faults() == [] and emu.requests() == []
    assert emu.clock()["offsetSeconds"] == 0
    assert not any(f["killed"] for f in emu.get_app(APP)["flags"] if f["key"] == "new_checkout")
    assert emu.load_state(saved) == saved
    assert emu.state() == saved
    with pytest.raises(EmulatorError) as caught:
        emu.load_state({"version": 1, "clockOffsetSeconds": 0, "apps": [], "devices": [{"hwid": "h1", "colour": "red"}]})
    assert caught.value.status == 400 and caught.value.path == "devices[0].colour"
    for missing in ("clockOffsetSeconds", "apps", "devices"):
        partial = {k: v for k, v in saved.items() if k != missing}
        with pytest.raises(EmulatorError) as caught:
            emu.load_state(partial)
        assert caught.value.status == 400 and caught.value.path == missing, caught.value
        assert "missing" in caught.value.message
    assert emu.state() == saved  # nothing changed


def test_bad_fault_fields_are_named(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    for fields, where in [({"probability": 1.5, "http": 503}, "probability"),
                          ({"drop": True, "truncate_after_bytes": 10}, "truncateAfterBytes"),
                          ({"for_seconds": -5, "http": 503}, "forSeconds"),
                          ({"seed": 3, "http": 503}, "seed")]:
        with pytest.raises(EmulatorError) as caught:
            emu.add_fault("getFeatureFlags", **fields)
        assert caught.value.status == 400 and caught.value.path == where, fields
    with pytest.raises(TypeError):
        emu.add_fault("getFeatureFlags", hwids=["h1"], http=503)
    with pytest.raises(EmulatorError) as caught:
        emu._request("GET", "/admin/requests", query={"metod": "getFeatureFlags"})
    assert caught.value.path == "metod"
    assert emu.faults() == []


def test_the_emulator_refuses_what_it_cannot_honour(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    with pytest.raises(EmulatorError) as caught:
        emu.add_fault("getFeatureFlag", http=503)  # a typo: it would never fire
    assert caught.value.status == 400 and caught.value.path == "method"
    assert "did you mean getFeatureFlags?" in caught.value.message
    assert "known: applicationOpen, getFeatureFlags, postEvent, registerDevice, registerUser, unregisterDevice" \
        in caught.value.message
    with pytest.raises(EmulatorError) as caught:
        emu.add_fault("getFeatureFlags")  # no kind: every kind is listed
    assert caught.value.status == 400 and caught.value.path == ""
    assert "truncateAfterBytes, stallAfterHeaders, reset" in caught.value.message
    assert emu.faults() == []
    assert call(emu, "h1", method="getFeatureFlag") == 404
    assert [r["status"] for r in emu.requests("getFeatureFlag")] == [404]


def test_the_fleet_fixture_starts_n_agents_each_with_its_user(
        pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Any) -> None:
    fleet: Fleet = pushwoosh_fleet(3)
    assert fleet.user_ids == ["fleet-user-0", "fleet-user-1", "fleet-user-2"]
    assert [agent.client.status()["userId"] for agent in fleet] == fleet.user_ids
    hwids = fleet.hwids()
    assert len(set(hwids)) == 3
    for hwid, user in zip(hwids, fleet.user_ids):
        assert pushwoosh_emulator.count_requests("getFeatureFlags", hwid=hwid, user_id=user) >= 1
    more: Fleet = pushwoosh_fleet(1, user_ids="extra-{i}")
    assert more.user_ids == ["extra-3"]


@pytest.mark.pushwoosh_emulator(stoppable=True)
@pytest.mark.pushwoosh_agent(user_id="alice")
def test_the_emulator_stops_and_starts_again_on_the_same_port(
        pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    emu = pushwoosh_emulator
    url = emu.base_url
    emu.stop()
    assert not emu.running
    with pytest.raises(RefreshError):
        pushwoosh_agent.refresh()
    assert pushwoosh_agent.status()["state"] == "stale"
    emu.start()
    assert emu.running and emu.base_url == url
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.status()["state"] == "ready"
    assert emu.count_requests("getFeatureFlags") == 1  # the restarted emulator's state is fresh


def test_http_url_of_an_agent_on_a_free_port(pushwoosh_agent_process: AgentProcess, pushwoosh_http_url: str) -> None:
    assert pushwoosh_http_url.startswith("http://127.0.0.1:") and not pushwoosh_http_url.endswith(":0")
    with urllib.request.urlopen(pushwoosh_http_url + "/healthz", timeout=5) as response:
        assert response.status == 200
    assert pushwoosh_agent_process.http_url == pushwoosh_http_url


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_details_tell_flag_not_found_from_a_match(pushwoosh_agent: AgentClient) -> None:
    match = pushwoosh_agent.details("new_checkout", False)
    assert isinstance(match, FlagDetails)
    assert match.value is True and match.reason == "TARGETING_MATCH" and match.error_code is None
    assert match.source == "network" and match.age_seconds is not None
    missing = pushwoosh_agent.details("no_such_flag", True)
    assert missing.value is True and missing.reason == "ERROR" and missing.error_code == "FLAG_NOT_FOUND"


@pytest.mark.pushwoosh_agent(server_url="http://127.0.0.1:9/json/1.3/", wait_for_flags=False)
def test_details_tell_provider_not_ready(pushwoosh_agent: AgentClient) -> None:
    unready = pushwoosh_agent.details("new_checkout", False)
    assert unready.value is False and unready.reason == "ERROR" and unready.error_code == "PROVIDER_NOT_READY"
    assert unready.source == "none" and unready.age_seconds is None


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_an_emulator_whose_lab_holds_the_agents_refuses_to_stop(
        pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(RuntimeError, match=r"would end the agents in its lab .*stoppable=True"):
        pushwoosh_emulator.stop()
    assert pushwoosh_emulator.running and pushwoosh_agent.status()["userId"] == "alice"


@pytest.mark.pushwoosh_emulator(stoppable=True)
def test_a_stoppable_emulator_is_the_agents_server_not_their_lab(
        pushwoosh_emulator: RunningEmulator, pushwoosh_agent_process: AgentProcess) -> None:
    assert pushwoosh_emulator.lab.emulator.base_url != pushwoosh_emulator.base_url
    assert [d["name"] for d in pushwoosh_emulator.lab.devices()] == [pushwoosh_agent_process.name]
    assert pushwoosh_emulator.count_requests("getFeatureFlags") >= 1  # its server is the test's emulator
