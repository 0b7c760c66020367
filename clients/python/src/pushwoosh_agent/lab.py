"""The lab: ``pushwoosh-emulator --lab DIR`` as one HTTP API (docs/lab.md M).

The lab is the emulator, the devices and their clocks. It starts devices, attaches running
ones, relays their calls, and moves every clock together, timer to timer (the lab clock,
docs/device-clock.md J): one implementation, in the lab; this module is a thin client of it.

>>> lab = LabClient("http://127.0.0.1:8080")
>>> lab.start(count=3, name="qa", config={"Agent": {"UserId": "user-{n}"}})
>>> lab.advance_clock(until="nextRefresh")          # each device's next periodic refresh
>>> lab.call("qa-0", "isEnabled", {"key": "new_checkout"})

:func:`advance_lab` moves a lab and some of its devices (the agents a test started in it).
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, TypedDict, Union

from .emulator import EmulatorClient
from . import results
from .errors import EmulatorError, ProtocolError, PushwooshError
from .results import FiredTimer



class ClockAdvance(TypedDict):
    """What :meth:`Fleet.advance_clock` and ``pushwoosh_lab.advance_clock`` return: the lab's time
    at the end (ISO 8601), the timers that fired on each device (by HWID, in order), and how
    many requests the devices sent meanwhile."""

    now: str
    fired: Dict[str, List[FiredTimer]]
    requests: int


class LabSkipped(TypedDict):
    """A device the lab could not move, and why (system clock, ahead of the lab, gone, ...)."""

    name: str
    reason: str


class LabAdvance(TypedDict):
    """``POST /lab/advance``'s answer: the lab's time, the steps taken, the timers that fired on
    each device (by name), the requests sent, and every device that could not be moved."""

    now: str
    steps: int
    fired: Dict[str, List[FiredTimer]]
    requests: int
    skipped: List[LabSkipped]


class LabClockError(PushwooshError):
    """Some devices could not follow the lab clock, or are not the lab's (each named, with the
    reason): nothing moved, since the lab moves all or none. ``result`` is what was done (None)."""

    def __init__(self, message: str, result: Optional[ClockAdvance] = None) -> None:
        super().__init__(message)
        self.result = result


def parse_time(text: str) -> float:
    """Unix seconds of an ISO 8601 UTC time as the agent and the lab write it
    (:func:`pushwoosh_agent.results.parse_time`; :class:`ProtocolError` when it is not one)."""
    moment = results.parse_time(text, "a lab time")
    if moment is None:
        raise ProtocolError("a lab time: expected an ISO 8601 time, not None")
    return moment.timestamp()


def _positive_seconds(seconds: object) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"advance_clock: seconds must be a positive number, not {seconds!r}")
    return float(seconds)


class LabClient:
    """The lab's API at ``url`` (``http://HOST:PORT`` of ``pushwoosh-emulator --lab DIR``).
    The lab is always locked: ``token`` is its token (``--admin-token``'s), or ``token_file`` the
    file it is in (``DIR/token``, which ``--lab DIR`` writes when no ``--admin-token`` is given;
    the emulator prints ``lab token: FILE``). Errors are :class:`EmulatorError` with the
    lab's status, message and the field at fault (``.path``)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 300.0,
                 ca_file: Optional[str] = None, *, token_file: Optional[str] = None) -> None:
        if token is None and token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        #: The emulator behind the lab (its admin API: flags, faults, requests).
        self.emulator = EmulatorClient(url, timeout=timeout, ca_file=ca_file, admin_token=token)

    @classmethod
    def of(cls, emulator: EmulatorClient, timeout: Optional[float] = None) -> "LabClient":
        """The lab of the emulator ``emulator`` talks to, with its token and its trust."""
        lab = cls(emulator.base_url, token=emulator.admin_token, timeout=emulator.timeout if timeout is None else timeout)
        lab.emulator.ssl_context = emulator.ssl_context
        return lab

    def __repr__(self) -> str:
        return f"LabClient({self.emulator.base_url!r})"

    def _call(self, method: str, path: str, body: Any = None, query: Optional[Mapping[str, str]] = None) -> Any:
        return self.emulator._request(method, "/lab" + path, body, query)

    # -- devices --

    def devices(self) -> List[Dict[str, Any]]:
        """Every device of the lab, each with its times in its own time (docs/lab.md M.1)."""
        return list(self._call("GET", "/devices")["devices"])

    def device(self, name: str) -> Dict[str, Any]:
        return dict(self._call("GET", "/devices/" + name))

    def start(self, count: Optional[int] = None, name: str = "device", clock: str = "controlled",
              config: Optional[Mapping[str, Mapping[str, Any]]] = None, *, directory: Optional[str] = None,
              environment: Optional[Mapping[str, str]] = None, agentd: Optional[str] = None,
              extra_config: str = "") -> List[Dict[str, Any]]:
        """Starts ``count`` devices named ``NAME-0``... (one named ``name`` without ``count``),
        ready when this returns; ``config``: sections and keys, ``{n}`` the device's index.
        For one device: ``directory`` (the test's own, kept as found: a second start there
        continues on its state), ``environment`` (variables added), ``agentd`` (the daemon to run),
        ``extra_config`` (text appended to its configuration file)."""
        given = {"name": name, "clock": clock, "count": count, "extraConfig": extra_config or None,
                 "config": None if config is None else {section: dict(keys) for section, keys in config.items()},
                 "directory": None if directory is None else os.path.abspath(directory),
                 "environment": dict(environment) if environment else None,
                 "agentd": None if agentd is None else os.path.abspath(agentd)}
        body = {key: value for key, value in given.items() if value is not None}
        return list(self._call("POST", "/devices", body)["devices"])

    def signal(self, name: str, signal: str) -> Dict[str, Any]:
        """Sends ``signal`` (``"HUP"``, ``"TERM"``, ``"KILL"``, ``"INT"``, ``"USR1"``, ``"USR2"``) to an owned device."""
        return dict(self._call("POST", f"/devices/{name}/signal", {"signal": signal}))

    def notifications(self, name: str, after: int = 0) -> Dict[str, Any]:
        """What an owned device told its ``NOTIFY_SOCKET`` from the ``after``-th on:
        ``{"notifications": [...], "next": N, "dropped": n}``."""
        return dict(self._call("GET", f"/devices/{name}/notifications", query={"after": str(after)}))

    def attach(self, socket: str, name: str) -> Dict[str, Any]:
        """A running device (a systemd instance, an agent a test started) joins the lab, not owned."""
        return dict(self._call("POST", "/devices", {"attach": socket, "name": name})["devices"][0])

    def stop(self, name: str) -> Dict[str, Any]:
        """Stops an owned device, or lets an attached one go."""
        return dict(self._call("DELETE", "/devices/" + name))

    def restart(self, name: str, signal: str = "TERM") -> Dict[str, Any]:
        """Restarts an owned device on its state (``"KILL"`` for a crash)."""
        return dict(self._call("POST", f"/devices/{name}/restart", {"signal": signal}))

    def call(self, name: str, method: str, params: Union[Mapping[str, Any], Sequence[Any], None] = None) -> Dict[str, Any]:
        """One socket call relayed to the device; its JSON-RPC answer as it came."""
        body: Dict[str, Any] = {"method": method}
        if params is not None:
            body["params"] = params if isinstance(params, Mapping) else list(params)
        return dict(self._call("POST", f"/devices/{name}/call", body))

    def log(self, name: str, tail: int = 100) -> List[str]:
        """The last ``tail`` lines of an owned device's log."""
        return [str(line) for line in self._call("GET", f"/devices/{name}/log", query={"tail": str(tail)})["lines"]]

    def reset(self) -> Dict[str, Any]:
        """Stops the owned devices, lets the attached ones go, resets the emulator."""
        return dict(self._call("POST", "/reset"))

    # -- the clock --

    def advance_clock(self, seconds: Optional[float] = None, *, until: Optional[str] = None,
                      devices: Optional[Sequence[str]] = None, strict: bool = False) -> LabAdvance:
        """Moves the lab: ``seconds`` forward, or ``until`` ``"nextRefresh"`` (every device's next
        periodic refresh), ``"nextTimer"`` or an ISO 8601 lab time; ``devices``: names (default
        all). A device that could not be moved is in ``skipped``, with the reason; with ``strict``
        the lab moves all or none (a 409 naming them in ``body["skipped"]``, nothing moved)."""
        if (seconds is None) == (until is None):
            raise ValueError("advance_clock: give seconds or until, not both or neither")
        body: Dict[str, Any] = {"seconds": _positive_seconds(seconds)} if seconds is not None else {"until": until}
        if devices is not None:
            body["devices"] = list(devices)
        if strict:
            body["strict"] = True
        answer: LabAdvance = self._call("POST", "/advance", body)
        return answer


class _OnSocket(Protocol):
    socket_path: str


def advance_lab(lab: Union[LabClient, EmulatorClient], agents: Sequence[_OnSocket], seconds: Optional[float] = None,
                *, until: Optional[str] = None, timeout: float = 300.0) -> ClockAdvance:
    """Moves ``lab`` (a :class:`LabClient`, or the emulator serving it) and ``agents`` (its devices:
    :class:`~pushwoosh_agent.processes.AgentProcess` or :class:`~pushwoosh_agent.AgentClient`,
    found by socket) together, all or none (``POST /lab/advance`` with ``strict``): ``seconds``
    forward, or ``until`` ``"nextRefresh"`` (every agent's next periodic refresh), ``"nextTimer"``
    or an ISO 8601 lab time. Returns ``{"now", "fired": {HWID: [...]}, "requests"}``. Raises
    :class:`LabClockError` naming every agent that is not the lab's or cannot move (a system
    clock, not answering, ...); nothing has moved then."""
    if (seconds is None) == (until is None):
        raise ValueError("advance_clock: give seconds or until, not both or neither")
    lab = lab if isinstance(lab, LabClient) else LabClient.of(lab, timeout=timeout)
    devices = {str(d["socket"]): d for d in lab.devices()}
    strangers = [agent.socket_path for agent in agents if os.path.abspath(agent.socket_path) not in devices]
    if strangers:
        raise LabClockError(f"advance_clock: not devices of the lab at {lab.emulator.base_url}: {', '.join(strangers)} "
                            "(start them in it: AgentProcess(lab=...))")
    chosen = [devices[os.path.abspath(agent.socket_path)] for agent in agents]
    if not chosen:
        if until is not None:
            raise ValueError(f"advance_clock: until={until!r} needs devices to move")
        moved = lab.emulator.advance_clock(_positive_seconds(seconds))
        return {"now": str(moved["now"]), "fired": {}, "requests": 0}
    try:
        done = lab.advance_clock(seconds, until=until, devices=[str(d["name"]) for d in chosen], strict=True)
    except EmulatorError as error:
        skipped = error.body.get("skipped") if error.status == 409 and isinstance(error.body, dict) else None
        if not skipped:
            raise
        why = "; ".join(f"{s['name']}: {s['reason']}" for s in skipped)
        raise LabClockError(f"advance_clock: nothing moved: some devices cannot follow the lab clock ({why})") from None
    return {"now": done["now"], "fired": {str(d["hwid"]): done["fired"].get(str(d["name"]), []) for d in chosen},
            "requests": done["requests"]}
