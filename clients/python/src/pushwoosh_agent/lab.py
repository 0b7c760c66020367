"""A client of the lab, ``pushwoosh-emulator --lab DIR`` (docs/lab.md M): the emulator, the devices
and their clocks, moved together timer to timer (docs/device-clock.md J) by the lab itself.

>>> lab = LabClient("http://127.0.0.1:8080", token_file="DIR/token")
>>> lab.start(count=3, name="qa", config={"Agent": {"UserId": "user-{n}"}})
>>> lab.advance_clock(until="nextRefresh")          # each device's next periodic refresh
>>> lab.call("qa-0", "isEnabled", {"key": "new_checkout"})
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, TypedDict, Union

from .emulator import EmulatorClient
from . import results
from .errors import EmulatorError, ProtocolError, PushwooshError


class ClockAdvance(TypedDict):
    """:func:`advance_lab`'s answer: the lab's time at the end, the timers fired on each device (by
    HWID, in order), the requests sent meanwhile."""

    now: str
    fired: Dict[str, List[results.FiredTimer]]
    requests: int


class LabSkipped(TypedDict):
    """A device the lab could not move, and why (system clock, ahead of the lab, gone, ...)."""

    name: str
    reason: str


class LabAdvance(ClockAdvance):
    """``POST /lab/advance``'s answer: a :class:`ClockAdvance` by device name, with ``steps`` and ``skipped``."""

    steps: int
    skipped: List[LabSkipped]


class LabClockError(PushwooshError):
    """Some devices are not the lab's or cannot follow its clock (each named): nothing moved."""

    def __init__(self, message: str, result: Optional[ClockAdvance] = None) -> None:
        super().__init__(message)
        self.result = result


def parse_time(text: str) -> float:
    """Unix seconds of an ISO 8601 time as the lab writes it (else :class:`ProtocolError`)."""
    moment = results.parse_time(text, "a lab time")
    if moment is None:
        raise ProtocolError("a lab time: expected an ISO 8601 time, not None")
    return moment.timestamp()


def _step(seconds: object, until: Optional[str]) -> Dict[str, Any]:
    """``{"seconds": S}`` (a positive number) or ``{"until": U}``: exactly one of them given."""
    if (seconds is None) == (until is None):
        raise ValueError("advance_clock: give seconds or until, not both or neither")
    if seconds is None:
        return {"until": until}
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"advance_clock: seconds must be a positive number, not {seconds!r}")
    return {"seconds": float(seconds)}


class LabClient:
    """The lab at ``url`` (``http://HOST:PORT``), always locked: ``token``, or ``token_file`` (``DIR/token`` unless
    ``--admin-token``; the emulator prints ``lab token: FILE``). Errors are :class:`EmulatorError` (``.path``)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 300.0,
                 ca_file: Optional[str] = None, *, token_file: Optional[str] = None) -> None:
        if token is None and token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        self.emulator = EmulatorClient(url, timeout=timeout, ca_file=ca_file, admin_token=token)

    @classmethod
    def of(cls, emulator: EmulatorClient, timeout: Optional[float] = None) -> "LabClient":
        """The lab of the emulator ``emulator`` talks to, with its token and its trust."""
        lab = cls(emulator.base_url, token=emulator.admin_token,
                  timeout=emulator.timeout if timeout is None else timeout)
        lab.emulator.ssl_context = emulator.ssl_context
        return lab

    def __repr__(self) -> str:
        return f"LabClient({self.emulator.base_url!r})"

    def _call(self, method: str, path: str, body: Any = None, query: Optional[Mapping[str, str]] = None) -> Any:
        return self.emulator._request(method, "/lab" + path, body, query)

    def devices(self) -> List[Dict[str, Any]]:
        """Every device of the lab, with its times in its own time (docs/lab.md M.1)."""
        return list(self._call("GET", "/devices")["devices"])

    def device(self, name: str) -> Dict[str, Any]:
        return dict(self._call("GET", "/devices/" + name))

    def start(self, count: Optional[int] = None, name: str = "device", clock: str = "controlled",
              config: Optional[Mapping[str, Mapping[str, Any]]] = None, *, directory: Optional[str] = None,
              environment: Optional[Mapping[str, str]] = None, agentd: Optional[str] = None,
              extra_config: str = "") -> List[Dict[str, Any]]:
        """Starts ``count`` devices ``NAME-0``... (without ``count`` one, ``name``), ready on return;
        ``config``: sections of keys (``{n}`` the index). One device may have its ``directory``
        (its state kept), ``environment``, ``agentd`` and ``extra_config`` (appended lines)."""
        given = {"name": name, "clock": clock, "count": count, "extraConfig": extra_config or None,
                 "config": None if config is None else {section: dict(keys) for section, keys in config.items()},
                 "directory": None if directory is None else os.path.abspath(directory),
                 "environment": dict(environment) if environment else None,
                 "agentd": None if agentd is None else os.path.abspath(agentd)}
        body = {key: value for key, value in given.items() if value is not None}
        return list(self._call("POST", "/devices", body)["devices"])

    def signal(self, name: str, signal: str) -> Dict[str, Any]:
        """Sends an owned device ``signal`` (``"HUP"``, ``"TERM"``, ``"KILL"``, ``"INT"``, ``"USR1"``, ``"USR2"``)."""
        return dict(self._call("POST", f"/devices/{name}/signal", {"signal": signal}))

    def notifications(self, name: str, after: int = 0) -> Dict[str, Any]:
        """What an owned device told its ``NOTIFY_SOCKET`` from the ``after``-th on (``next``, ``dropped``)."""
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

    def call(self, name: str, method: str,
             params: Union[Mapping[str, Any], Sequence[Any], None] = None) -> Dict[str, Any]:
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

    def advance_clock(self, seconds: Optional[float] = None, *, until: Optional[str] = None,
                      devices: Optional[Sequence[str]] = None, strict: bool = False) -> LabAdvance:
        """Moves the lab ``seconds``, or ``until`` ``"nextRefresh"``, ``"nextTimer"`` or an ISO 8601
        time; ``devices``: names (default all). One that cannot move is in ``skipped``; with
        ``strict``, all or none (a 409 naming them in ``body["skipped"]``)."""
        given = {**_step(seconds, until), "devices": None if devices is None else list(devices),
                 "strict": True if strict else None}
        answer: LabAdvance = self._call("POST", "/advance", {k: v for k, v in given.items() if v is not None})
        return answer


class _OnSocket(Protocol):
    socket_path: str


def device_runs(device: Mapping[str, Any]) -> bool:
    """Whether a lab's DEVICE record is a process of the lab's that runs (owned, not exited)."""
    return device.get("state") != "exited" and device.get("pid") is not None


def advance_lab(lab: Union[LabClient, EmulatorClient], agents: Sequence[_OnSocket], seconds: Optional[float] = None,
                *, until: Optional[str] = None, timeout: float = 300.0, running: bool = False) -> ClockAdvance:
    """Moves ``lab`` (or the emulator serving it) and ``agents`` (its devices, found by socket)
    together, all or none, as :meth:`LabClient.advance_clock`; by HWID. :class:`LabClockError`
    names every agent not the lab's or unable to move; nothing has moved then. ``running``: an agent
    that does not run in the lab (stopped, let go, exited) is left out, not refused. Two requests."""
    step = _step(seconds, until)
    lab = lab if isinstance(lab, LabClient) else LabClient.of(lab, timeout=timeout)
    devices = {str(d["socket"]): d for d in lab.devices()}
    found = [(agent.socket_path, devices.get(os.path.abspath(agent.socket_path))) for agent in agents]
    if running:
        found = [(path, device) for path, device in found if device is not None and device_runs(device)]
    strangers = [path for path, device in found if device is None]
    if strangers:
        raise LabClockError(f"advance_clock: not devices of the lab at {lab.emulator.base_url}: {', '.join(strangers)} "
                            "(start them in it: AgentProcess(lab=...))")
    chosen = [device for _, device in found if device is not None]
    if not chosen:
        if until is not None:
            raise ValueError(f"advance_clock: until={until!r} needs devices to move")
        return {"now": str(lab.emulator.advance_clock(step["seconds"])["now"]), "fired": {}, "requests": 0}
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
