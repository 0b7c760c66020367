"""The 24-hour cache with its real timing, in about a second (docs/device-clock.md H).

The agent runs with ``[Device] Clock=controlled``: the test moves the device's clock, and every
timer that falls due meanwhile runs at its own device time. Nothing is shortened: this is the
SDK's 24-hour lifetime (ST-3), and the hourly refresh would run too if the app were active.
"""

from __future__ import annotations

import pytest

from pushwoosh_agent import AgentClient
from pushwoosh_agent.plugin import RunningEmulator


@pytest.mark.pushwoosh_agent(clock="controlled")     # the real 24 h, 1 h, 30 min, 5 min
def test_flags_expire_after_24_hours(pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.set_app_state("background")          # no hourly refresh in the background
    age = pushwoosh_agent.status()["flagsAgeSeconds"]
    pushwoosh_agent.advance_clock(23 * 3600 + 59 * 60 - age)
    assert pushwoosh_agent.details("new_checkout", False).error_code is None
    pushwoosh_agent.advance_clock(120)                  # 24 h 01 min: gone
    assert pushwoosh_agent.details("new_checkout", False).error_code == "PROVIDER_NOT_READY"
    assert pushwoosh_agent.wait_for_state("notReady", timeout=1)["flagsCount"] == 0


@pytest.mark.pushwoosh_agent(clock="controlled")
def test_a_console_change_reaches_an_idle_device_at_its_hourly_refresh(pushwoosh_agent: AgentClient,
                                                                       pushwoosh_emulator: RunningEmulator) -> None:
    assert pushwoosh_agent.details("new_checkout", False).reason != "DISABLED"
    pushwoosh_emulator.kill("ABCDE-12345", "new_checkout")     # the console's kill switch
    assert pushwoosh_agent.details("new_checkout", False).reason != "DISABLED"  # not before the refresh
    result = pushwoosh_agent.advance_clock(3600 * 1.1)  # an hour plus this device's offset and jitter
    assert [f["trigger"] for f in result["fired"] if f["event"] == "refresh"] == ["periodic"]
    assert pushwoosh_agent.details("new_checkout", True).reason == "DISABLED"
