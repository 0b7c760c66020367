"""The device clock (docs/device-clock.md H) through the client and the plugin: real timings, in seconds."""

from __future__ import annotations

import threading
from datetime import datetime

import pytest

from conftest import APP
from pushwoosh_agent import AgentClient, AgentError, AgentTimeout, RefreshResult
from pushwoosh_agent.plugin import RunningEmulator


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_flags_expire_after_24_hours(pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.set_app_state("background")          # no hourly refresh in the background
    age = pushwoosh_agent.status()["flagsAgeSeconds"]
    pushwoosh_agent.advance_clock(23 * 3600 + 59 * 60 - age)
    assert pushwoosh_agent.details("new_checkout", False).error_code is None
    pushwoosh_agent.advance_clock(120)
    assert pushwoosh_agent.details("new_checkout", False).error_code == "PROVIDER_NOT_READY"
    assert pushwoosh_agent.wait_for_state("notReady", timeout=1)["flagsCount"] == 0


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_the_real_throttle_and_the_hourly_refresh(pushwoosh_agent: AgentClient) -> None:
    # The fixture keeps the real 5-min throttle: a refresh right after the first is not sent.
    assert pushwoosh_agent.call("refresh")["sent"] is False
    with pushwoosh_agent.events("refresh") as events:
        # RF-2, RF-12: three hours (and the 10 % a slot may lie past its hour): exactly three.
        result = pushwoosh_agent.advance_clock(3 * 3600 + 360)
        fired = [f for f in result["fired"] if f["event"] == "refresh"]
        assert len(fired) == 3 and result["requests"] == len(fired)
        completed = [events.next("refreshCompleted", timeout=5) for _ in fired]
    assert all(c["trigger"] == "periodic" and c["error"] is None and c["sent"] for c in completed)
    clock = pushwoosh_agent.clock()
    assert clock["controlled"] is True and clock["offsetSeconds"] >= 3 * 3600 - 5  # device time flowed meanwhile too


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_refresh_says_whether_it_was_sent_and_until_when_it_is_throttled(pushwoosh_agent: AgentClient,
                                                                         pushwoosh_emulator: RunningEmulator) -> None:
    opened = datetime.fromisoformat(pushwoosh_agent.status()["lastRefreshAt"].replace("Z", "+00:00"))
    throttled = pushwoosh_agent.refresh()
    assert throttled.sent is False and throttled.changed == []
    assert throttled.throttled_until is not None and throttled.throttled_until.tzinfo is not None
    assert 300 <= (throttled.throttled_until - opened).total_seconds() <= 302  # the window's end, device time
    pushwoosh_emulator.put_flag(APP, {"key": "brand_new", "rules": [{"id": "r_all", "enabled": True}]})
    assert pushwoosh_agent.refresh() == throttled  # still inside: nothing fetched, nothing changed
    assert pushwoosh_agent.get("brand_new") is None
    pushwoosh_agent.advance_clock(6 * 60)
    assert pushwoosh_agent.refresh() == RefreshResult(sent=True, throttled_until=None, changed=["brand_new"])


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_wait_for_refresh_wakes_on_a_refresh_from_another_thread(pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.advance_clock(6 * 60)                 # past the throttle window
    worker = threading.Timer(0.2, pushwoosh_agent.refresh)
    worker.start()
    done = pushwoosh_agent.wait_for_refresh(timeout=5)
    worker.join()
    assert done["trigger"] == "manual" and done["sent"] is True
    with pytest.raises(AgentTimeout):
        pushwoosh_agent.wait_for_refresh(timeout=0.2)


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_bad_advances_name_the_field(pushwoosh_agent: AgentClient) -> None:
    before = pushwoosh_agent.clock()["offsetSeconds"]
    for params, field in [({"seconds": -1}, "seconds"), ({"to": "2001-01-01T00:00:00Z"}, "to"),
                          ({"seconds": 1, "to": "2030-01-01T00:00:00Z"}, "to"), ({"by": 1}, "by")]:
        with pytest.raises(AgentError) as caught:
            pushwoosh_agent.call("advanceClock", params)
        assert caught.value.code == -32602 and caught.value.data["parameter"] == field
    with pytest.raises(ValueError):
        pushwoosh_agent.advance_clock()
    assert pushwoosh_agent.clock()["offsetSeconds"] == before


def test_a_system_clock_is_not_controlled(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.clock()
    assert caught.value.code == -32004
