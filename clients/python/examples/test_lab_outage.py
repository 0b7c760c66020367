"""A fleet with an outage, on the SDK's real timings: three devices, device 1 offline for two
and a half hours of emulator time.

``pushwoosh_lab.advance_clock`` moves the emulator's clock and every device's clock together,
timer to timer, so the fault window closes when the devices' clocks say so: the requests that
device 1's hourly refresh and its retries send inside the window are dropped, the others'
are served, and each is logged at the device time its timer fired.
"""

from __future__ import annotations

from typing import Callable

from pushwoosh_agent import Fleet, Lab

OFFLINE = 1


def test_device_1_offline_for_two_and_a_half_hours(pushwoosh_lab: Lab, pushwoosh_fleet: Callable[..., Fleet]) -> None:
    fleet = pushwoosh_fleet(3, clock="controlled")          # the real 1 h refresh, backoff, 24 h lifetime
    emulator = pushwoosh_lab.emulator
    hwids = fleet.hwids()
    since = emulator.clock()["unixTime"]
    emulator.add_fault("getFeatureFlags", hwid=hwids[OFFLINE], for_seconds=2.5 * 3600, drop=True)

    moved = pushwoosh_lab.advance_clock(2 * 3600)           # {"now", "fired": {HWID: [...]}, "requests"}
    for i, hwid in enumerate(hwids):
        calls = emulator.requests("getFeatureFlags", since=since, hwid=hwid)
        assert len(calls) == len([f for f in moved["fired"][hwid] if f.get("trigger")])
        if i == OFFLINE:   # the hourly refresh, then retries backing off: all dropped
            assert len(calls) >= 3 and all(c["fault"] == "drop" for c in calls)
            waits = [b["unixTime"] - a["unixTime"] for a, b in zip(calls, calls[1:])]
            assert waits[0] >= 59 and all(b >= a - 1 for a, b in zip(waits, waits[1:]))  # backing off
        else:
            assert calls and all(c["status"] == 200 for c in calls)
    assert fleet[OFFLINE].client.status()["state"] == "stale"  # its stored flags still serve

    pushwoosh_lab.advance_clock(2 * 3600)                    # the window closed half an hour in
    assert emulator.requests("getFeatureFlags", hwid=hwids[OFFLINE])[-1]["status"] == 200
    assert fleet[OFFLINE].client.status()["state"] == "ready"
