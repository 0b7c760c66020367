"""Waits say what they saw (docs/python-client.md G): wait_for_state, wait_for_refresh, an event
stream's next() and the emulator's wait_for_requests time out naming the state, the last refresh
(device time, trigger, outcome), the notifications or the requests that came instead."""

from __future__ import annotations

import time

import pytest

from pushwoosh_agent import AgentClient, AgentTimeout, RequestsTimeout, WaitTimeout
from pushwoosh_agent.plugin import RunningEmulator


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_wait_for_state_names_the_state_it_is_in(pushwoosh_agent: AgentClient) -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as caught:
        pushwoosh_agent.wait_for_state("stale", timeout=0.3)
    assert time.monotonic() - started < 5
    text = str(caught.value)
    assert "did not reach state 'stale' within 0.3 s: it is 'ready' (no state change seen)" in text, text
    assert "the last refresh: at 20" in text and "(device time), trigger sessionStart, succeeded" in text, text
    assert "0.299" not in text
    # Still an AgentTimeout and a TimeoutError, with the status it read.
    assert isinstance(caught.value, AgentTimeout) and isinstance(caught.value, TimeoutError)
    assert caught.value.last_status is not None and caught.value.last_status["state"] == "ready"
    assert caught.value.timeout == 0.3
    # Reached at once: returns the status.
    assert pushwoosh_agent.wait_for_state("ready", timeout=0.3)["state"] == "ready"


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_wait_for_state_names_the_changes_it_saw(pushwoosh_agent: AgentClient,
                                                 pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_emulator.add_fault("getFeatureFlags", times=5, http=503)
    with pytest.raises(WaitTimeout) as caught:
        with pushwoosh_agent.events("state") as stream:
            pushwoosh_agent.call("refresh")  # answered with its error: the state becomes stale
            stream.next("stateChanged", timeout=5)
            pushwoosh_agent.wait_for_state("error", timeout=0.3)
    text = str(caught.value)
    assert "did not reach state 'error' within 0.3 s: it is 'stale'" in text, text
    assert "trigger manual, failed: 503" in text, text


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_wait_for_state_of_a_state_the_agent_never_reports(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(WaitTimeout, match=r"'stalled' is none of the states it reports: notReady, ready, stale"):
        pushwoosh_agent.wait_for_state("stalled", timeout=0.2)
    with pytest.raises(TypeError, match="state must be a state's name"):
        pushwoosh_agent.wait_for_state(None, timeout=0.2)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, "1", True])
@pytest.mark.pushwoosh_agent(user_id="alice")
def test_a_wait_takes_a_positive_timeout(pushwoosh_agent: AgentClient, bad: object) -> None:
    with pytest.raises(ValueError, match=f"timeout must be a positive number of seconds, not {bad!r}"):
        pushwoosh_agent.wait_for_state("ready", timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        pushwoosh_agent.wait_for_refresh(timeout=bad)  # type: ignore[arg-type]


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_wait_for_refresh_names_the_last_refresh(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(WaitTimeout) as caught:
        pushwoosh_agent.wait_for_refresh(timeout=0.3)
    text = str(caught.value)
    status = pushwoosh_agent.status()
    assert text.startswith(f"no refresh completed on pushwoosh-agentd on {pushwoosh_agent.socket_path} within 0.3 s; ")
    assert f"the last refresh: at {status['lastRefreshAt']} (device time), trigger sessionStart, succeeded" in text, text
    assert "state 'ready'" in text and f"the next refresh is due at {status['nextRefreshAt']}" in text, text
    assert "controlled" not in text  # Clock=system


@pytest.mark.pushwoosh_agent(clock="controlled", user_id="alice")
def test_wait_for_refresh_on_a_controlled_clock_says_what_moves_it(pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.advance_clock(600)
    with pytest.raises(WaitTimeout) as caught:
        pushwoosh_agent.wait_for_refresh(timeout=0.3)
    text = str(caught.value)
    assert "the device clock is controlled: advance_clock moves it" in text, text
    # Device time: the status' now is the controlled clock's, ten minutes ahead of the host.
    now = caught.value.last_status["now"] if caught.value.last_status else ""
    assert f"device time {now}" in text


@pytest.mark.pushwoosh_agent(initial_app_state="background", wait_for_flags=False)
def test_wait_for_refresh_before_any_refresh(pushwoosh_agent: AgentClient) -> None:
    assert pushwoosh_agent.status()["lastRefreshAt"] is None
    with pytest.raises(WaitTimeout) as caught:
        pushwoosh_agent.wait_for_refresh(timeout=0.2)
    assert "no refresh has completed yet; state 'notReady'" in str(caught.value)
    assert "no refresh is due (the app is in the background)" in str(caught.value)


@pytest.mark.pushwoosh_agent(server_url="http://127.0.0.1:9/json/1.3/", wait_for_flags=False)
def test_wait_for_refresh_after_a_failed_one(pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.wait_for_state("error", timeout=10)
    with pytest.raises(WaitTimeout) as caught:
        pushwoosh_agent.wait_for_refresh(timeout=0.2)
    assert "trigger sessionStart, failed: 0 no response" in str(caught.value), str(caught.value)


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_an_event_stream_names_the_notifications_that_came_instead(pushwoosh_agent: AgentClient) -> None:
    with pushwoosh_agent.events("refresh", "state") as stream:
        pushwoosh_agent.refresh()
        with pytest.raises(WaitTimeout) as caught:
            stream.next("stateChanged", timeout=0.5)
    text = str(caught.value)
    assert text == f"no 'stateChanged' from pushwoosh-agentd on {pushwoosh_agent.socket_path} within 0.5 s " \
                   "(other notifications came: refreshCompleted)", text
    assert caught.value.seen and caught.value.seen[0]["trigger"] == "manual"
    with pushwoosh_agent.events("flags") as stream, pytest.raises(WaitTimeout, match=r"\(no notification came\)"):
        stream.next(timeout=0.1)


@pytest.mark.pushwoosh_agent(user_id="alice")
def test_wait_for_requests_names_the_requests_seen(pushwoosh_agent: AgentClient,
                                                   pushwoosh_emulator: RunningEmulator) -> None:
    hwid = pushwoosh_agent.status()["hwid"]
    with pytest.raises(RequestsTimeout) as caught:
        pushwoosh_emulator.wait_for_requests("registerDevice", hwid=hwid, timeout=0.3)
    text = str(caught.value)
    assert text.startswith(f"wait_for_requests(method=registerDevice, hwid={hwid}): 0 of 1 matching request arrived "
                           "within 0.3 s; the emulator recorded "), text
    assert f"getFeatureFlags hwid={hwid} user=alice -> 200 at 20" in text, text
    assert caught.value.requests == [] and any(r["method"] == "getFeatureFlags" for r in caught.value.seen)
    assert isinstance(caught.value, TimeoutError) and caught.value.expected == 1
    pushwoosh_emulator.clear_requests()
    with pytest.raises(RequestsTimeout, match="the emulator recorded no request"):
        pushwoosh_emulator.wait_for_requests("getFeatureFlags", timeout=0.2)
    for bad_count in [0, -2]:
        with pytest.raises(ValueError, match="count must be 1 or more"):
            pushwoosh_emulator.wait_for_requests(count=bad_count)
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        pushwoosh_emulator.wait_for_requests(timeout=0)
