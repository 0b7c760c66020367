"""The real ``pushwoosh-emulator`` and ``pushwoosh-agentd`` for tests.

:class:`EmulatorProcess` runs an emulator (and its lab). :class:`AgentProcess` is a device the
lab starts and owns (docs/lab.md M.1): this package launches no agent of its own. The pytest
plugin (:mod:`pushwoosh_agent.plugin`) is built on these two classes; they work without pytest
too::

    with EmulatorProcess(directory) as emulator, \\
         AgentProcess(directory, server_url=emulator.server_url) as agent:
        print(agent.client.is_enabled("new_checkout", False))
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal as signals
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .client import AgentClient
from .errors import EmulatorError
from .lab import LabClient

__all__ = [
    "EXAMPLE_APP_PATH",
    "EXAMPLE_APP_CODE",
    "AGENT_SETTINGS",
    "StartError",
    "find_binary",
    "agent_config",
    "short_temp_dir",
    "EmulatorProcess",
    "AgentProcess",
    "launcher_lab",
    "stop_launcher_labs",
]

from ._process_support import (  # the names of __all__, and what older imports from here still find
    _BY_KEY, _SECTIONS, AGENT_SETTINGS, EXAMPLE_APP_CODE, EXAMPLE_APP_PATH, StartError, _terminate, _value,
    agent_config, config_sections, find_binary, short_temp_dir, tail, unknown_name,
)
from .emulator_process import EmulatorProcess

#: The launcher labs of this process, by the directory of their binaries ("" for PATH).
_LAUNCHERS: Dict[str, EmulatorProcess] = {}


def launcher_lab(bin_dir: Optional[str] = None) -> LabClient:
    """The lab that starts agents for this Python process when no other is named: an emulator
    with no application (``pushwoosh-emulator --lab``, the binaries from ``bin_dir`` or
    ``PATH``), started on first use; its agents end with it (:func:`stop_launcher_labs`, the
    interpreter's exit, or, under a parent-death signal, the end of the thread that started it,
    SIGKILL included). It outlives the emulators a test starts and stops."""
    key = os.path.abspath(bin_dir) if bin_dir else ""
    process = _LAUNCHERS.get(key)
    if process is None:
        process = EmulatorProcess(short_temp_dir("pwl-"), apps=None, binary=find_binary("pushwoosh-emulator", bin_dir),
                                  agentd=find_binary("pushwoosh-agentd", bin_dir), die_with_parent=True)
        _LAUNCHERS[key] = process
    if not process.running:
        process.start()
    return process.lab


def stop_launcher_labs() -> None:
    """Stops every launcher lab of this process, and with them the agents they started."""
    while _LAUNCHERS:
        _, process = _LAUNCHERS.popitem()
        process.stop()
        shutil.rmtree(process.directory, ignore_errors=True)


atexit.register(stop_launcher_labs)

class AgentProcess:
    """A ``pushwoosh-agentd`` device that ``lab`` starts and owns (docs/lab.md M.1), living in
    ``directory``: its configuration file (``agent.conf``), socket, state directory and log
    (``agent.log``). ``lab``: a :class:`~pushwoosh_agent.lab.LabClient` (``EmulatorProcess.lab``);
    by default :func:`launcher_lab`, which outlives the emulators a test stops. The lab runs the
    agent under a parent-death signal, keeps what it tells its ``NOTIFY_SOCKET`` and stops it
    when the lab ends.

    ``settings`` as :func:`agent_config`; ``server_url`` (or the setting) points the agent at a
    server (else the lab's own emulator); ``Socket`` and ``StateDirectory`` are the lab's (in
    ``directory``). ``clock`` is ``system`` unless set. ``binary``: the daemon to run (else the
    lab's). :meth:`start` returns once the agent sent ``READY=1`` (``ready_timeout``: how long
    it waits for the lab's answer, beyond the lab's own 15 s for READY=1).
    """

    _names = itertools.count()

    def __init__(self, directory: str, server_url: Optional[str] = None,
                 settings: Optional[Mapping[str, Any]] = None, extra_config: str = "",
                 binary: Optional[str] = None, client_timeout: float = 10.0,
                 ready_timeout: float = 15.0, environment: Optional[Mapping[str, str]] = None,
                 strict: bool = False, *, lab: Optional[LabClient] = None, name: Optional[str] = None) -> None:
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False, not {strict!r}")
        #: The lab that starts it (by default this process's :func:`launcher_lab`, its binaries beside ``binary``).
        self.lab = lab if lab is not None else launcher_lab(os.path.dirname(binary) if binary else None)
        self.directory = os.path.abspath(directory)
        self.binary = binary
        self.socket_path = os.path.join(self.directory, "agent.sock")
        self.state_dir = os.path.join(self.directory, "state")
        self.config_path = os.path.join(self.directory, "agent.conf")
        self.log_path = os.path.join(self.directory, "agent.log")
        merged: Dict[str, Any] = {"application_code": EXAMPLE_APP_CODE}
        if server_url is not None:
            merged["server_url"] = server_url
        merged.update(settings or {})
        for own in ("socket", "Socket", "state_directory", "StateDirectory"):
            if merged.get(own) is not None:
                raise ValueError(f"agent setting {own!r}: the lab places the socket and the state in the device's "
                                 f"directory ({self.socket_path}, {self.state_dir})")
        _lab_config(merged)  # unknown names fail here, before the lab is asked
        self.settings = merged
        self.extra_config = extra_config
        self.client_timeout = client_timeout
        #: Whether :attr:`client` raises FallbackError on a read answered with the caller's default.
        self.strict = strict
        self.ready_timeout = ready_timeout
        self.environment = dict(environment or {})
        #: The device's name in the lab.
        self.name = name or _device_name(self.directory, next(self._names))
        self._client: Optional[AgentClient] = None
        #: How each run ended, as subprocess gives it: the exit code, or minus the signal.
        self.exit_statuses: List[Optional[int]] = []
        self._device: Optional[Dict[str, Any]] = None
        self._in_lab = False
        self._last_notifications: List[str] = []

    # -- NOTIFY_SOCKET (the lab keeps what the device told it) --

    @property
    def notifications(self) -> List[str]:
        """Every datagram the agent sent to its ``NOTIFY_SOCKET`` (READY=1, STATUS=…, STOPPING=1), oldest first."""
        return [str(n) for n in self._notified(0)["notifications"]]

    def _notified(self, after: int) -> Dict[str, Any]:
        if not self._in_lab:  # stopped: what the lab handed over when it let the device go
            return {"notifications": self._last_notifications[after:]}
        return self.lab.notifications(self.name, after)

    def wait_for_notification(self, needle: str, after: int = 0, timeout: float = 10.0) -> Optional[str]:
        """The first datagram at index ``after`` or later that contains ``needle``, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            for message in self._notified(after)["notifications"]:
                if needle in str(message):
                    return str(message)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    # -- lifecycle --

    def write_config(self) -> None:
        """Writes the configuration file from :attr:`settings`, as the lab wrote it at the start
        (for a reload: then :meth:`signal` ``SIGHUP``)."""
        config, clock = _lab_config(self.settings)
        if "ServerURL" not in config.get("Agent", {}):
            config.setdefault("Agent", {})["ServerURL"] = self._started_server()
        text = "".join(f"[{section}]\n" + "".join(f"{k}={v}\n" for k, v in sorted(keys.items()))
                       for section, keys in sorted(config.items()))
        if self.extra_config:
            text += self.extra_config.rstrip("\n") + "\n"
        text += f"[Agent]\nSocket={self.socket_path}\nStateDirectory={self.state_dir}\n[Device]\nClock={clock}\n"
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(text)

    def _started_server(self) -> str:
        with open(self.config_path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("ServerURL="):
                    return line[len("ServerURL="):].strip()
        raise StartError(f"{self.config_path} names no ServerURL= (start the agent first)")

    def start(self) -> "AgentProcess":
        """Asks the lab to start the agent in :attr:`directory` (on the state it has) and waits for ``READY=1``."""
        if self.running:
            raise RuntimeError("the agent is already running")
        config, clock = _lab_config(self.settings)
        lab = LabClient.of(self.lab.emulator, timeout=self.ready_timeout + 30)
        try:
            self._device = lab.start(name=self.name, clock=clock, config=config, directory=self.directory,
                                     environment=self.environment, agentd=self.binary, extra_config=self.extra_config)[0]
        except EmulatorError as error:
            raise StartError(f"pushwoosh-agentd did not start in the lab ({error.status}): {error.message}"
                             f"{_field(error)}:\n{tail(self.log_path)}") from None
        self._in_lab = True
        return self

    def _look(self) -> Optional[Dict[str, Any]]:
        if not self._in_lab:
            return None
        try:
            self._device = self.lab.device(self.name)
        except EmulatorError as error:
            if error.status in (0, 404):  # gone from the lab, or the lab is gone and the device with it
                self._in_lab = False
                return None
            raise
        return self._device

    @property
    def running(self) -> bool:
        device = self._look()
        return device is not None and device.get("state") != "exited" and device.get("pid") is not None

    def http_address(self, timeout: float = 5.0) -> Optional[str]:
        """The address the agent's HTTP interface (``[HTTP] Listen=``) is bound to, e.g.
        ``127.0.0.1:43117`` for ``Listen=127.0.0.1:0``, or a socket path; None when it has none
        (``status``'s ``httpAddress``, as the lab reads it)."""
        deadline = time.monotonic() + timeout
        while True:
            device = self._look()
            if device is not None and device.get("http") is not None:
                return str(device["http"])
            if device is None or device.get("state") in ("exited", "ready", "stale", "error", "fatal", "notReady") \
                    or time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    @property
    def http_url(self) -> Optional[str]:
        """``http://HOST:PORT`` of the agent's HTTP interface on a TCP port, else None."""
        address = self.http_address()
        if address is None or address.startswith("/"):
            return None
        return f"http://{address}"

    @property
    def pid(self) -> Optional[int]:
        pid = (self._device or {}).get("pid")
        return int(pid) if pid is not None else None

    @property
    def client(self) -> AgentClient:
        """The :class:`AgentClient` of this agent (created on first use, reconnects after restarts)."""
        if self._client is None:
            self._client = AgentClient(socket=self.socket_path, timeout=self.client_timeout, strict=self.strict)
        return self._client

    def signal(self, sig: int) -> None:
        """Sends ``sig`` to the agent through the lab (e.g. ``signal.SIGHUP`` to reload its configuration)."""
        if self.running:
            self.lab.signal(self.name, signals.Signals(sig).name[len("SIG"):])

    def stop(self, timeout: float = 5.0) -> Optional[int]:
        """The lab stops the agent (SIGTERM, then SIGKILL after 5 s) and lets it go; the exit status."""
        if not self._in_lab:
            return None
        self._in_lab = False
        try:
            ended = self.lab.stop(self.name)
        except EmulatorError as error:
            if error.status in (0, 404):  # gone from the lab, or the lab is gone and the device with it
                return None
            raise
        self._last_notifications = [str(n) for n in ended.get("notifications", [])]
        status = _exit_status(ended)
        self.exit_statuses.append(status)
        return status

    def kill(self) -> Optional[int]:
        """SIGKILL (a crash, as far as the agent can tell), through the lab; the exit status."""
        if self.running:
            self.lab.signal(self.name, "KILL")
            deadline = time.monotonic() + 5
            while self.running and time.monotonic() < deadline:
                time.sleep(0.01)
        return self.stop()

    def restart(self, kill: bool = True) -> AgentClient:
        """Kills the agent (``kill``: SIGKILL, else SIGTERM) and starts it again on the same
        state directory and socket; returns :attr:`client`, which reconnects on its next call."""
        if kill:
            self.kill()
        else:
            self.stop()
        self.start()
        return self.client

    def log(self) -> str:
        """The agent's log so far (its standard error)."""
        return tail(self.log_path, 1 << 30)

    def close(self) -> None:
        """Closes the client and stops the agent."""
        if self._client is not None:
            self._client.close()
        self.stop()

    def __enter__(self) -> "AgentProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _device_name(directory: str, index: int) -> str:
    """A name the lab accepts (1-40 of letters, digits, _ - .), unique in this process."""
    base = re.sub(r"[^A-Za-z0-9_-]", "-", os.path.basename(directory.rstrip("/")))[:16].strip("-") or "agent"
    return f"{base}-{os.getpid()}-{index}"


def _lab_config(settings: Mapping[str, Any]) -> Tuple[Dict[str, Dict[str, str]], str]:
    """``settings`` as the lab's ``config`` sections (:func:`config_sections`), and the clock
    (``[Device] Clock=`` is the lab's ``clock``, ``system`` unless set)."""
    config = config_sections(settings)
    clock = config.get("Device", {}).pop("Clock", "system")
    if "Device" in config and not config["Device"]:
        del config["Device"]
    return config, clock


def _exit_status(device: Mapping[str, Any]) -> Optional[int]:
    if device.get("exitCode") is not None:
        return int(device["exitCode"])
    if device.get("exitSignal") is not None:
        return -int(device["exitSignal"])
    return None


def _field(error: EmulatorError) -> str:
    return f" (field {error.path})" if error.path else ""
