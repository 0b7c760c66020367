"""The lab clock's algorithm without processes: the planner, and the driver against a lab in
memory (the same cases as the Swift LabClockTests): a fault window that ends between two
devices' timers, retries inside a window, a request in flight across a step."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Set

import pytest

from pushwoosh_agent.lab import LabClockDriver, LabClockError, LabDeviceClock, plan_step

HOST = 1_000_000.0


def _iso(seconds: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def test_a_step_ends_just_after_the_earliest_timer() -> None:
    step = plan_step(1_000, 2_000, 0, {0: LabDeviceClock(0, 1_100), 1: LabDeviceClock(0, 1_050)})
    assert step is not None
    assert step.target == pytest.approx(1_050.001) and step.seconds == pytest.approx(50.001)
    assert sorted(step.device_seconds) == [0, 1]


def test_the_limit_wins_over_a_later_timer_and_nothing_is_left_at_the_limit() -> None:
    devices = {0: LabDeviceClock(0, 5_000)}
    step = plan_step(1_000, 1_600, 0, devices)
    assert step is not None and step.target == 1_600 and step.seconds == 600
    assert plan_step(1_600, 1_600, 0, devices) is None


def test_an_overdue_timer_moves_the_lab_one_millisecond() -> None:
    step = plan_step(1_000, 2_000, 0, {0: LabDeviceClock(0, 900)})
    assert step is not None and step.seconds == pytest.approx(0.001)


def test_a_lagging_device_catches_up_and_one_ahead_waits() -> None:
    step = plan_step(1_100, 1_160, 100, {0: LabDeviceClock(90, None), 1: LabDeviceClock(500, None)})
    assert step is not None and step.seconds == 60 and step.device_seconds == {0: 70}


@dataclass
class Device:
    timers: List[float]
    offset: float = 0.0
    period: float = 3_600.0
    retry_delays: List[float] = field(default_factory=lambda: [60.0, 120.0, 240.0, 480.0])
    failures: int = 0
    busy_polls: int = 0
    retry_at: Optional[float] = None
    stuck: bool = False  # a broken device: it never runs its timers


@dataclass
class Logged:
    device: int
    at: float
    dropped: bool


class SimulatedLab:
    """Devices whose timers send a request stamped by the emulator's clock; the host's clock
    stands still, so only the lab clock moves time."""

    def __init__(self, devices: List[Device], drop_until: float = 0.0, drop_devices: Optional[Set[int]] = None) -> None:
        self.devices = devices
        self.drop_until = drop_until
        self.drop_devices = drop_devices or set()
        self.emulator_offset = 0.0
        self.log: List[Logged] = []
        self.lock = threading.Lock()

    @property
    def device_count(self) -> int:
        return len(self.devices)

    def host_now(self) -> float:
        return HOST

    def pause(self, seconds: float) -> None:
        pass

    def device_clock(self, i: int) -> Optional[Mapping[str, Any]]:
        with self.lock:
            d = self.devices[i]
            if d.busy_polls > 0:
                d.busy_polls -= 1
                if d.busy_polls == 0 and d.retry_at is not None:
                    d.timers.append(d.retry_at)
            return {"offsetSeconds": d.offset, "nextTimerAt": _iso(min(d.timers)) if d.timers else None,
                    "requestsInFlight": 1 if d.busy_polls > 0 else 0}

    def advance_emulator(self, seconds: float) -> None:
        with self.lock:
            self.emulator_offset += seconds

    def advance_device(self, i: int, seconds: float) -> Mapping[str, Any]:
        with self.lock:
            d = self.devices[i]
            target = HOST + d.offset + seconds
            fired: List[Dict[str, Any]] = []
            while not d.stuck and d.timers and min(d.timers) <= target:
                t = min(d.timers)
                d.timers.remove(t)
                stamp = HOST + self.emulator_offset
                dropped = i in self.drop_devices and stamp < self.drop_until
                self.log.append(Logged(i, stamp, dropped))
                fired.append({"at": _iso(t), "event": "retry" if d.failures else "refresh"})
                if dropped:
                    d.timers.append(t + d.retry_delays[min(d.failures, len(d.retry_delays) - 1)])
                    d.failures += 1
                else:
                    d.failures = 0
                    d.timers.append(t + d.period)
            d.offset += seconds
            return {"now": _iso(target), "offsetSeconds": d.offset, "fired": fired, "requests": len(fired)}


def _stamps_equal_fired_times(lab: SimulatedLab, fired: Mapping[int, List[Any]]) -> None:
    from pushwoosh_agent.lab import parse_time
    for device in range(lab.device_count):
        stamps = [entry.at for entry in lab.log if entry.device == device]
        times = [parse_time(f["at"]) for f in fired.get(device, [])]
        assert len(stamps) == len(times)
        for stamp, at in zip(stamps, times):
            assert abs(stamp - at) < 0.002, (device, stamp, at)


def test_a_fault_window_that_ends_between_two_devices_timers_covers_only_the_first() -> None:
    lab = SimulatedLab([Device([HOST + 100]), Device([HOST + 200])], drop_until=HOST + 150, drop_devices={0, 1})
    result = LabClockDriver(lab, 0.0).advance(300)
    assert [(e.device, round(e.at - HOST), e.dropped) for e in lab.log] == [(0, 100, True), (0, 160, False),
                                                                          (1, 200, False)]
    assert lab.emulator_offset == pytest.approx(300, abs=0.001)
    assert result.now == pytest.approx(HOST + 300, abs=0.001)
    assert result.requests == 3 and result.problems == {}
    _stamps_equal_fired_times(lab, result.fired)


def test_retries_inside_a_window_are_each_logged_at_their_own_time() -> None:
    lab = SimulatedLab([Device([HOST + 100]), Device([HOST + 50])], drop_until=HOST + 400, drop_devices={0})
    result = LabClockDriver(lab, 0.0).advance(1_000)
    zero = [e for e in lab.log if e.device == 0]
    assert [round(e.at - HOST) for e in zero] == [100, 160, 280, 520]
    assert [e.dropped for e in zero] == [True, True, True, False]
    assert [e.dropped for e in lab.log if e.device == 1] == [False]
    assert [f["event"] for f in result.fired[0]] == ["refresh", "retry", "retry", "retry"]
    _stamps_equal_fired_times(lab, result.fired)


def test_a_request_still_in_flight_is_waited_for_before_the_step() -> None:
    busy = Device([], busy_polls=3, retry_at=HOST + 30, failures=1)
    lab = SimulatedLab([busy, Device([HOST + 100])])
    result = LabClockDriver(lab, 0.0).advance(200)
    assert [e.device for e in lab.log] == [0, 1]
    assert lab.log[0].at == pytest.approx(HOST + 30, abs=0.002)
    assert [f["event"] for f in result.fired[0]] == ["retry"]
    _stamps_equal_fired_times(lab, result.fired)


def test_a_device_that_does_not_run_its_due_timer_stops_the_lab() -> None:
    lab = SimulatedLab([Device([HOST + 100], stuck=True), Device([HOST + 50])])
    with pytest.raises(LabClockError, match=r"device 0: its timer due at 1970-01-12T13:48:20.000Z is still due after 5 steps"):
        LabClockDriver(lab, 0.0).advance(3_600)
    assert lab.emulator_offset < 101  # it stopped at the timer, not an hour of 1 ms steps later


def test_moving_everything_at_once_would_miss_the_window() -> None:
    lab = SimulatedLab([Device([HOST + 100])], drop_until=HOST + 150, drop_devices={0})
    lab.advance_emulator(300)
    lab.advance_device(0, 300)
    assert [e.dropped for e in lab.log] == [False]
