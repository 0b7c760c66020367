"""EmulatorClient: every admin call of docs/emulator.md D.2 against the real emulator."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.error
import urllib.request
from typing import Any, Dict

import pytest

from conftest import APP
from pushwoosh_agent import AgentClient, EmulatorClient, EmulatorError, RefreshError
from pushwoosh_agent.plugin import RunningEmulator

APP2 = "QWERT-67890"


def device_call(emulator: EmulatorClient, method: str, hwid: str = "hw-1", user: str = "u-1") -> Dict[str, Any]:
    """One device API call, as the agent would send it."""
    body = json.dumps({"request": {"application": APP, "hwid": hwid, "userId": user, "v": "7.2.10",
                                   "device_type": 1}}).encode()
    request = urllib.request.Request(emulator.server_url + method, data=body, method="POST",
                                     headers={"Content-Type": "application/json; charset=utf-8"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            answer: Dict[str, Any] = json.loads(response.read())
            answer["http"] = response.status
            return answer
    except urllib.error.HTTPError as error:
        return {"http": error.code}


def test_apps_put_get_delete(pushwoosh_emulator: RunningEmulator) -> None:
    definition = {"code": APP2, "flags": [{"key": "k", "rules": [{"id": "r", "enabled": True}]}]}
    stored = pushwoosh_emulator.put_app(definition)
    assert stored["code"] == APP2 and stored["flags"][0]["key"] == "k"
    assert pushwoosh_emulator.get_app(APP2)["flags"][0]["rules"][0]["id"] == "r"
    pushwoosh_emulator.delete_app(APP2)
    with pytest.raises(EmulatorError) as caught:
        pushwoosh_emulator.get_app(APP2)
    assert caught.value.status == 404 and APP2 in caught.value.message
    with pytest.raises(EmulatorError):
        pushwoosh_emulator.delete_app(APP2)


def test_a_bad_definition_raises_with_the_emulators_400_message(pushwoosh_emulator: RunningEmulator) -> None:
    with pytest.raises(EmulatorError) as caught:
        pushwoosh_emulator.put_flag(APP, {"key": "k", "colour": "red"})
    error = caught.value
    assert error.status == 400
    assert "colour" in error.message or "colour" in (error.path or "")
    assert error.message in str(error)
    with pytest.raises(EmulatorError) as caught:
        pushwoosh_emulator.put_app({"code": APP2, "flags": [{"key": "k", "rules": [{"id": 1}]}]})
    assert caught.value.status == 400 and caught.value.path
    with pytest.raises(EmulatorError) as caught:
        pushwoosh_emulator.add_fault("getFeatureFlags", http=200)
    assert caught.value.status == 400 and "http" in str(caught.value)
    with pytest.raises(TypeError):
        pushwoosh_emulator.add_fault("getFeatureFlags", teapot=True)


def test_flags_put_delete_and_switches(pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    def flag(key: str) -> Dict[str, Any]:
        return next(f for f in pushwoosh_emulator.get_app(APP)["flags"] if f["key"] == key)

    pushwoosh_emulator.put_flag(APP, {"key": "extra", "rules": [{"id": "r_all", "enabled": True}]})
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.is_enabled("extra") is True

    assert pushwoosh_emulator.kill(APP, "extra")["killed"] is True
    assert flag("extra")["killed"] is True
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.get("extra").rule_id == ""  # type: ignore[union-attr]

    assert pushwoosh_emulator.unkill(APP, "extra")["killed"] is False
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.is_enabled("extra") is True

    assert pushwoosh_emulator.archive(APP, "extra")["archived"] is True
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.get("extra") is None

    assert pushwoosh_emulator.unarchive(APP, "extra")["archived"] is False
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.get("extra") is not None

    pushwoosh_emulator.delete_flag(APP, "extra")
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.get("extra") is None
    with pytest.raises(EmulatorError) as caught:
        pushwoosh_emulator.kill(APP, "extra")
    assert caught.value.status == 404


def test_every_fault_kind(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    armed = emu.add_fault("getFeatureFlags", times=2, http=503, retry_after=7)
    assert armed["times"] == 2 and armed["http"] == 503 and armed["retryAfter"] == 7
    assert len(emu.faults()) == 1
    assert device_call(emu, "getFeatureFlags")["http"] == 503
    assert device_call(emu, "getFeatureFlags")["http"] == 503
    assert device_call(emu, "getFeatureFlags")["http"] == 200  # used up
    emu.add_fault("getFeatureFlags", status_code=210)
    assert device_call(emu, "getFeatureFlags")["status_code"] == 210
    emu.add_fault("getFeatureFlags", body="garbage")
    with pytest.raises(ValueError):
        device_call(emu, "getFeatureFlags")  # not JSON
    emu.add_fault("getFeatureFlags", drop=True)
    with pytest.raises((OSError, ValueError)):
        device_call(emu, "getFeatureFlags")  # closed without an answer
    emu.add_fault("getFeatureFlags", delay_ms=300)
    start = time.monotonic()
    assert device_call(emu, "getFeatureFlags")["http"] == 200
    assert time.monotonic() - start >= 0.3
    emu.add_fault("getFeatureFlags", partial=True)
    assert device_call(emu, "getFeatureFlags")["response"]["partial"] is True
    emu.add_fault("getFeatureFlags", times=5, statusCode=210)  # the D.2 spelling works too
    emu.add_fault("registerDevice", http=500)
    assert len(emu.faults()) == 2
    emu.clear_faults()
    assert emu.faults() == []
    assert device_call(emu, "getFeatureFlags")["http"] == 200
    faults = [r["fault"] for r in emu.requests(method="getFeatureFlags")]
    assert faults[:2] == ["http", "http"] and "partial" in faults and "drop" in faults


def test_requests_filters_and_clear(pushwoosh_emulator: RunningEmulator) -> None:
    emu = pushwoosh_emulator
    device_call(emu, "applicationOpen")
    time.sleep(0.05)
    middle = time.time()
    device_call(emu, "getFeatureFlags")
    everything = emu.requests()
    assert [r["method"] for r in everything] == ["applicationOpen", "getFeatureFlags"]
    assert everything[0]["body"]["request"]["hwid"] == "hw-1"
    assert "headers" in everything[0] and everything[0]["status"] == 200
    assert [r["method"] for r in emu.requests(method="getFeatureFlags")] == ["getFeatureFlags"]
    assert [r["method"] for r in emu.requests(since=middle)] == ["getFeatureFlags"]
    aware = dt.datetime.fromtimestamp(middle, dt.timezone.utc)
    assert [r["method"] for r in emu.requests(since=aware)] == ["getFeatureFlags"]
    assert len(emu.requests(since=everything[0]["time"])) == 2  # ISO 8601 as the emulator writes it
    with pytest.raises(EmulatorError) as caught:
        emu.requests(since="yesterday")
    assert caught.value.status == 400 and "since" in caught.value.message
    with pytest.raises(ValueError):
        emu.requests(since=dt.datetime.now())  # naive: ambiguous
    emu.clear_requests()
    assert emu.requests() == []


def test_devices(pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.set_user_id("carol")
    hwid = pushwoosh_agent.status()["hwid"]

    def carol() -> Any:
        return [d for d in pushwoosh_emulator.devices() if d["hwid"] == hwid and d["userId"] == "carol"]

    from conftest import wait_until
    wait_until(carol)


@pytest.mark.pushwoosh_emulator(apps=None)
@pytest.mark.pushwoosh_agent(wait_for_flags=False)
def test_an_emulator_without_apps(pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(EmulatorError):
        pushwoosh_emulator.get_app(APP)
    with pytest.raises(RefreshError):
        pushwoosh_agent.refresh()  # "Application not found"
    pushwoosh_emulator.put_app({"code": APP, "flags": [{"key": "only"}]})
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.get("only") is not None and pushwoosh_agent.get("new_checkout") is None


@pytest.mark.pushwoosh_emulator(require_token="s3cret")
@pytest.mark.pushwoosh_agent(api_token="s3cret")
def test_a_token_is_required_and_sent(pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.refresh()
    assert device_call(pushwoosh_emulator, "getFeatureFlags")["http"] == 401
    calls = pushwoosh_emulator.requests(method="getFeatureFlags")
    # The log shows that a token was sent (its scheme), never the token itself.
    headers = {k.lower(): v for k, v in calls[0]["headers"].items()}
    assert headers["authorization"] == "Token [redacted]"
    assert "s3cret" not in json.dumps(calls)
    assert [c["status"] for c in calls][-1] == 401 and 200 in [c["status"] for c in calls]  # the agent's, ours


@pytest.mark.pushwoosh_emulator(require_token="s3cret", admin_token="adm1n-t0ken")
@pytest.mark.pushwoosh_agent(api_token="s3cret")
def test_an_admin_token_locks_the_admin_api(pushwoosh_emulator: RunningEmulator, pushwoosh_agent: AgentClient) -> None:
    # The fixture's client carries the token: the admin API works for the test.
    assert pushwoosh_emulator.admin_token == "adm1n-t0ken"
    assert pushwoosh_emulator.get_app(APP)["code"] == APP
    assert pushwoosh_agent.get("new_checkout") is not None
    # Anyone else gets 401, whatever they try, and changes nothing.
    for token in (None, "wrong", "adm1n-t0ke", "adm1n-t0kenx"):
        other = EmulatorClient(pushwoosh_emulator.base_url, admin_token=token)
        with pytest.raises(EmulatorError) as caught:
            other.reset()
        assert caught.value.status == 401
        assert "Authorization: Bearer" in str(caught.value)
    request = urllib.request.Request(pushwoosh_emulator.base_url + "/admin/requests",
                                     headers={"Authorization": "Token adm1n-t0ken"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401
    assert pushwoosh_emulator.count_requests("getFeatureFlags") >= 1  # not reset
    # Neither token shows in the request log.
    log = json.dumps(pushwoosh_emulator.requests())
    assert "s3cret" not in log and "adm1n-t0ken" not in log


def test_an_admin_token_must_be_a_word() -> None:
    for bad in ("", "two words", "tab\there"):
        with pytest.raises(ValueError):
            EmulatorClient("http://127.0.0.1:8080", admin_token=bad)


def test_an_unreachable_emulator_is_an_emulator_error() -> None:
    client = EmulatorClient("http://127.0.0.1:9/json/1.3/", timeout=2)
    assert client.base_url == "http://127.0.0.1:9"
    with pytest.raises(EmulatorError) as caught:
        client.devices()
    assert caught.value.status == 0
    with pytest.raises(ValueError):
        EmulatorClient("127.0.0.1:8080")
