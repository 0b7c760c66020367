"""The device clock (docs/device-clock.md H) through the client and the plugin: real timings, in seconds."""

from __future__ import annotations

import threading

import pytest

from pushwoosh_agent import AgentClient, AgentError, AgentTimeout


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
        result = pushwoosh_agent.advance_clock(3 * 3600)
        fired = [f for f in result["fired"] if f["event"] == "refresh"]
        assert len(fired) in (2, 3) and result["requests"] == len(fired)
        completed = [events.next("refreshCompleted", timeout=5) for _ in fired]
    assert all(c["trigger"] == "periodic" and c["error"] is None and c["sent"] for c in completed)
    clock = pushwoosh_agent.clock()
    assert clock["controlled"] is True and clock["offsetSeconds"] >= 3 * 3600 - 5  # device time flowed meanwhile too


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
