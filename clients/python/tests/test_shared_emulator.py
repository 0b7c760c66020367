"""One emulator serves the session and is reset before each test: what a test armed, killed
or advanced is gone in the next (these tests run in this order)."""

from __future__ import annotations

from typing import Dict, Optional

import pytest

from pushwoosh_agent import RunningEmulator

APP = "ABCDE-12345"
_seen: Dict[str, Optional[int]] = {}


def _pid(emulator: RunningEmulator) -> Optional[int]:
    process = emulator.process.process
    return process.pid if process is not None else None


def test_one_test_arms_a_fault_kills_a_flag_and_moves_the_clock(pushwoosh_emulator: RunningEmulator) -> None:
    _seen["pid"] = _pid(pushwoosh_emulator)
    pushwoosh_emulator.add_fault("getFeatureFlags", for_seconds=7 * 86_400, http=503)
    pushwoosh_emulator.kill(APP, "new_checkout")
    pushwoosh_emulator.advance_clock(86_400)
    pushwoosh_emulator.put_flag(APP, {"key": "left_behind", "rules": [{"id": "r", "enabled": True}]})
    assert pushwoosh_emulator.faults() and pushwoosh_emulator.clock()["offsetSeconds"] >= 86_400


def test_the_next_test_finds_none_of_it(pushwoosh_emulator: RunningEmulator) -> None:
    assert _pid(pushwoosh_emulator) == _seen["pid"]  # the same process: shared, not restarted
    assert pushwoosh_emulator.faults() == []
    assert pushwoosh_emulator.clock()["offsetSeconds"] == 0
    flags = {f["key"]: f for f in pushwoosh_emulator.get_app(APP)["flags"]}
    assert "left_behind" not in flags
    assert not flags["new_checkout"].get("killed")
    assert pushwoosh_emulator.requests() == []


@pytest.mark.pushwoosh_emulator(shared=False)
def test_a_test_may_ask_for_an_emulator_of_its_own(pushwoosh_emulator: RunningEmulator) -> None:
    assert _pid(pushwoosh_emulator) != _seen["pid"]


def test_a_stopped_shared_emulator_is_started_again_for_the_next_test(pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_emulator.stop()
    assert not pushwoosh_emulator.running


def test_after_a_stop(pushwoosh_emulator: RunningEmulator) -> None:
    assert pushwoosh_emulator.running
    assert pushwoosh_emulator.faults() == []
