"""Ten devices on one emulator, device 7 offline for two hours of emulator time.

What a fleet test looks like: ``pushwoosh_fleet(10)`` starts ten real agents, each with
its own User ID (``fleet-user-0`` … ``fleet-user-9``), against the session's emulator
(reset before the test, so what it arms and advances is the test's own). A
fault scoped to device 7's HWID with ``for_seconds=7200`` takes that one device offline
while the others keep refreshing; the emulator's request log, filtered by HWID, says
who saw what; then the emulator's clock moves on two hours and device 7 recovers. No
sleeps: each refresh is answered when it completes, and the emulator is asked with
``count_requests`` and ``wait_for_requests``.
"""

from __future__ import annotations

from typing import Callable

import pytest

from pushwoosh_agent import Fleet, RefreshError, RunningEmulator

OFFLINE = 7
TWO_HOURS = 7200


def test_device_7_offline_for_two_hours(pushwoosh_emulator: RunningEmulator, pushwoosh_fleet: Callable[..., Fleet]) -> None:
    emulator = pushwoosh_emulator
    fleet = pushwoosh_fleet(10)
    hwids = fleet.hwids()
    offline = hwids[OFFLINE]
    since = emulator.clock()["now"]

    # Device 7's network goes away for two hours (emulator time): every call it makes is dropped.
    fault = emulator.add_fault("getFeatureFlags", hwid=offline, for_seconds=TWO_HOURS, drop=True)
    assert fault["remaining"] is None and fault["until"] is not None

    for i, agent in enumerate(fleet):
        if i == OFFLINE:
            with pytest.raises(RefreshError):
                agent.client.refresh()
        else:
            agent.client.refresh()  # answered once the refresh is done

    # The nine others' refreshes reached the emulator and were served.
    for i, hwid in enumerate(hwids):
        if i != OFFLINE:
            served = emulator.wait_for_requests("getFeatureFlags", hwid=hwid, since=since, count=1, timeout=10)
            assert [r["status"] for r in served] == [200]
    assert emulator.count_requests("getFeatureFlags", since=since) == 10
    # Device 7's calls all failed: dropped by the fault, none served.
    seven = emulator.requests("getFeatureFlags", since=since, hwid=offline)
    assert seven and all(r["fault"] == "drop" and r["status"] is None for r in seven)
    assert fleet[OFFLINE].client.status()["lastRefreshError"] is not None
    assert all(agent.client.status()["state"] == "ready" for i, agent in enumerate(fleet) if i != OFFLINE)

    # Two hours later (emulator time) device 7 is back.
    emulator.advance_clock(TWO_HOURS)
    assert emulator.faults() == []
    fleet[OFFLINE].client.refresh()
    back = emulator.requests("getFeatureFlags", since=since, hwid=offline)
    assert back[-1]["status"] == 200 and back[-1]["fault"] is None
    assert fleet[OFFLINE].client.status()["state"] == "ready"
    assert fleet[OFFLINE].client.status()["userId"] == f"fleet-user-{OFFLINE}"
