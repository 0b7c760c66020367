"""The lab clock: the emulator's clock and every device's clock moved together.

A lab has two kinds of clock: the emulator's (it stamps the request log and times fault
windows) and each device's (``Clock=controlled``: it times the device's timers). Moving one
and then the others is wrong: moved two hours at once, the emulator's two-hour fault window
has closed before any device's timer runs; moved in chunks, a device's retries pile up at one
emulator instant. :func:`advance_lab` moves them as one, timer to timer, the same algorithm
as the soak runner and ``pushwoosh-agentctl fleet advance-clock``:

1. ask every device for its clock once it has no request in flight (an answer may arm a
   timer: a retry), and take the earliest timer any device has armed (``nextTimerAt``);
2. the step ends a millisecond after that timer (an overdue one: a millisecond from now), or
   at the target if that comes first;
3. move the emulator there, then every device at once, each to the same time (a device that
   lagged catches up; one already ahead is left alone);
4. repeat until the lab has moved the whole span.

So a fault window that ends at time T covers exactly the requests the devices sent before T,
and the request log's times equal the devices' ``fired`` times.

:func:`plan_step` and :class:`LabClockDriver` are the algorithm, free of I/O (any
:class:`LabWorld` will do); :func:`advance_lab` runs it on a real emulator and agents.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, TypedDict

from .client import AgentClient
from .emulator import EmulatorClient
from . import results
from .errors import AgentNotRunning, AgentTimeout, ProtocolError, PushwooshError
from .results import FiredTimer

__all__ = [
    "FiredTimer",
    "ClockAdvance",
    "LabDeviceClock",
    "LabClockStep",
    "LabClockError",
    "LabWorld",
    "LabClockDriver",
    "LabAdvance",
    "plan_step",
    "advance_lab",
    "parse_time",
]

#: How far past a timer a step ends (the timer is then due on the device).
PAST_TIMER = 0.001
#: A device less than this behind the lab is not moved.
SLACK = 0.0005


class ClockAdvance(TypedDict):
    """What :meth:`Fleet.advance_clock` and ``pushwoosh_lab.advance_clock`` return: the lab's time
    at the end (ISO 8601), the timers that fired on each device (by HWID, in order), and how
    many requests the devices sent meanwhile."""

    now: str
    fired: Dict[str, List[FiredTimer]]
    requests: int


class LabClockError(PushwooshError):
    """A device could not follow the lab clock (it refused ``advanceClock``, or went away), or the
    emulator's clock could not be moved. ``result`` holds what was done (None when nothing was)."""

    def __init__(self, message: str, result: Optional[ClockAdvance] = None) -> None:
        super().__init__(message)
        self.result = result


def parse_time(text: str) -> float:
    """Unix seconds of an ISO 8601 UTC time as the agent and the emulator write it
    (:func:`pushwoosh_agent.results.parse_time`; :class:`ProtocolError` when it is not one)."""
    moment = results.parse_time(text, "a lab time")
    if moment is None:
        raise ProtocolError("a lab time: expected an ISO 8601 time, not None")
    return moment.timestamp()


def _iso(seconds: float) -> str:
    moment = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class LabDeviceClock:
    """A device's clock between two steps: device time = host time + ``offset_seconds``;
    ``next_timer_at``: Unix seconds (device time) of its earliest armed timer, or None."""

    offset_seconds: float
    next_timer_at: Optional[float]


@dataclass(frozen=True)
class LabClockStep:
    """One step: the lab time it ends at, how far the emulator moves (``seconds``), and how far
    each device moves (by index; devices already there are left out)."""

    target: float
    seconds: float
    device_seconds: Dict[int, float]


def plan_step(here: float, limit: float, lab_offset: float,
              devices: Mapping[int, LabDeviceClock]) -> Optional[LabClockStep]:
    """The next step from lab time ``here`` (host time + ``lab_offset``) towards ``limit``;
    None when ``limit`` is reached."""
    target = limit
    for clock in devices.values():
        if clock.next_timer_at is not None:
            target = min(target, max(here + PAST_TIMER, clock.next_timer_at + PAST_TIMER))
    seconds = target - here
    if seconds <= 0:
        return None
    moves: Dict[int, float] = {}
    for index, clock in devices.items():
        move = lab_offset + seconds - clock.offset_seconds
        if move > SLACK:
            moves[index] = move
    return LabClockStep(target, seconds, moves)


class LabWorld(Protocol):
    """What the lab clock moves (devices by index, 0 to ``device_count - 1``)."""

    @property
    def device_count(self) -> int: ...

    def host_now(self) -> float: ...

    def device_clock(self, device: int) -> Optional[Mapping[str, Any]]:
        """The device's ``clock`` answer (``offsetSeconds``, ``nextTimerAt``, ``requestsInFlight``);
        None when it is down."""

    def advance_emulator(self, seconds: float) -> None: ...

    def advance_device(self, device: int, seconds: float) -> Mapping[str, Any]:
        """``advanceClock`` on one device; called for all devices at once."""

    def pause(self, seconds: float) -> None: ...


@dataclass
class LabAdvance:
    """What :meth:`LabClockDriver.advance` did, by device index."""

    now: float
    fired: Dict[int, List[FiredTimer]]
    requests: int
    steps: int
    problems: Dict[int, str] = field(default_factory=dict)


class LabClockDriver:
    """The lab clock driven against a :class:`LabWorld`; ``lab_offset`` is the emulator's offset
    ahead of the host's clock (the lab's time), moved with every step."""

    def __init__(self, world: LabWorld, lab_offset: float, quiet_timeout: float = 30.0, stuck_steps: int = 5) -> None:
        self.world = world
        self.lab_offset = lab_offset
        self.quiet_timeout = quiet_timeout
        #: After this many steps in a row with the same timer of a device still due, the device is
        #: not running it: the lab stops instead of stepping a millisecond at a time for ever.
        self.stuck_steps = stuck_steps
        self._overdue: Dict[int, Tuple[float, int]] = {}

    def lab_now(self) -> float:
        return self.world.host_now() + self.lab_offset

    def quiet_clock(self, device: int) -> Optional[Mapping[str, Any]]:
        """The device's clock once no request is in flight (or after ``quiet_timeout``)."""
        give_up = self.world.host_now() + self.quiet_timeout
        while True:
            answer = self.world.device_clock(device)
            if answer is None:
                return None
            if int(answer.get("requestsInFlight") or 0) > 0 and self.world.host_now() < give_up:
                self.world.pause(0.002)
                continue
            return answer

    def step(self, limit: float, fired: Dict[int, List[FiredTimer]], problems: Dict[int, str]) -> Optional[int]:
        """One step towards ``limit`` (lab time); the requests it made, None when nothing was left."""
        clocks: Dict[int, LabDeviceClock] = {}
        for i in range(self.world.device_count):
            answer = self.quiet_clock(i)
            if answer is None:
                problems[i] = "down: it did not answer clock"
                continue
            next_at = answer.get("nextTimerAt")
            clocks[i] = LabDeviceClock(float(answer["offsetSeconds"]),
                                       parse_time(next_at) if isinstance(next_at, str) else None)
        here = self.lab_now()
        for i, clock in clocks.items():
            due = clock.next_timer_at
            if due is None or due > here:
                self._overdue.pop(i, None)
                continue
            seen = self._overdue.get(i)
            steps = seen[1] + 1 if seen is not None and seen[0] == due else 1
            self._overdue[i] = (due, steps)
            if steps > self.stuck_steps:
                raise LabClockError(f"device {i}: its timer due at {_iso(due)} is still due after {self.stuck_steps} "
                                    f"steps (the device does not run it)")
        step = plan_step(here, limit, self.lab_offset, clocks)
        if step is None:
            return None
        self.world.advance_emulator(step.seconds)
        self.lab_offset += step.seconds
        # Every device at once, right after the emulator (one after another would let one's
        # network time skew the next one's log).
        answers: Dict[int, Any] = {}

        def move(i: int, seconds: float) -> None:
            try:
                answers[i] = self.world.advance_device(i, seconds)
            except Exception as error:  # noqa: BLE001 - reported per device
                answers[i] = error

        threads = [threading.Thread(target=move, args=(i, s), daemon=True) for i, s in step.device_seconds.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        requests = 0
        for i in sorted(answers):
            answer = answers[i]
            if isinstance(answer, BaseException):
                problems[i] = str(answer)
                continue
            fired.setdefault(i, []).extend(answer.get("fired", []))
            requests += int(answer.get("requests", 0))
        return requests

    def advance(self, seconds: float) -> LabAdvance:
        """Moves the lab ``seconds`` forward (the emulator's offset and every device's grow by
        that much), timer to timer."""
        goal = self.lab_offset + seconds
        fired: Dict[int, List[FiredTimer]] = {i: [] for i in range(self.world.device_count)}
        problems: Dict[int, str] = {}
        requests = 0
        steps = 0
        while goal - self.lab_offset > SLACK:
            made = self.step(self.lab_now() + (goal - self.lab_offset), fired, problems)
            if made is None:
                break
            requests += made
            steps += 1
        return LabAdvance(self.lab_now(), fired, requests, steps, problems)


class _AgentsLab:
    """A real lab: an emulator and agents, through their clients."""

    def __init__(self, emulator: EmulatorClient, agents: Sequence[AgentClient], timeout: float) -> None:
        self.emulator = emulator
        self.agents = list(agents)
        self.timeout = timeout

    @property
    def device_count(self) -> int:
        return len(self.agents)

    def host_now(self) -> float:
        return time.time()

    def device_clock(self, device: int) -> Optional[Mapping[str, Any]]:
        try:
            return self.agents[device].clock()
        except (AgentNotRunning, AgentTimeout):
            return None

    def advance_emulator(self, seconds: float) -> None:
        self.emulator.advance_clock(seconds)

    def advance_device(self, device: int, seconds: float) -> Mapping[str, Any]:
        return self.agents[device].advance_clock(seconds, timeout=self.timeout)

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)


def advance_lab(emulator: EmulatorClient, agents: Sequence[AgentClient], seconds: float,
                timeout: float = 60.0) -> ClockAdvance:
    """Moves ``emulator``'s clock and every agent's (``Clock=controlled``) ``seconds`` forward
    together (see the module's documentation); returns ``{"now", "fired": {HWID: [...]},
    "requests"}``. Before anything moves, every agent must answer ``clock`` (an agent with
    ``Clock=system`` raises its :class:`AgentError` -32004). Raises :class:`LabClockError`
    when a device could not follow a step (the result so far in ``.result``). ``timeout``:
    seconds one device's step may take."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 \
            or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"advance_clock: seconds must be a positive number, not {seconds!r}")
    hwids = [str(agent.status()["hwid"]) for agent in agents]
    for agent in agents:
        agent.clock()  # raises for an agent whose clock is not controlled: nothing has moved yet
    driver = LabClockDriver(_AgentsLab(emulator, agents, timeout), float(emulator.clock()["offsetSeconds"]))
    done = driver.advance(float(seconds))
    result: ClockAdvance = {"now": _iso(done.now), "fired": {hwids[i]: done.fired.get(i, []) for i in range(len(hwids))},
                            "requests": done.requests}
    if done.problems:
        why = "; ".join(f"{hwids[i]}: {problem}" for i, problem in sorted(done.problems.items()))
        raise LabClockError(f"advance_clock: some devices did not follow the lab clock ({why})", result)
    return result
