"""The real ``pushwoosh-emulator`` (:class:`EmulatorProcess`, also a lab) and ``pushwoosh-agentd``
(:class:`AgentProcess`, a device a lab starts and owns: by default this process's one lab)::

    with EmulatorProcess(directory) as emulator, AgentProcess(directory, lab=emulator.lab) as agent:
        print(agent.client.is_enabled("new_checkout", False))
"""

from __future__ import annotations

import itertools
import os
import re
import signal as signals
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .client import AgentClient
from .errors import EmulatorError
from .lab import LabClient, device_runs
from ._process_support import (AGENT_SETTINGS, EXAMPLE_APP_CODE, EXAMPLE_APP_PATH, StartError, agent_config,
                               config_sections, find_binary, short_temp_dir, tail)
from .emulator_process import EmulatorProcess, launcher_lab, session_emulator, stop_launcher_labs

__all__ = ["AGENT_SETTINGS", "EXAMPLE_APP_CODE", "EXAMPLE_APP_PATH", "AgentProcess", "EmulatorProcess", "StartError",
           "agent_config", "config_sections", "find_binary", "launcher_lab", "session_emulator", "short_temp_dir",
           "stop_launcher_labs", "tail"]


class AgentProcess:
    """A ``pushwoosh-agentd`` device that ``lab`` (a :class:`~pushwoosh_agent.lab.LabClient`, by default
    :func:`launcher_lab`) starts and owns (docs/lab.md M.1) in ``directory``: ``agent.conf``, ``agent.sock``, ``state/``
    and ``agent.log``. ``settings`` as :func:`agent_config` (the socket and state are the lab's; ``clock`` ``system``
    unless set); ``server_url`` else the lab's emulator. ``binary``: the daemon the lab runs (a wrapper that execs it
    under faketime, valgrind or strace too). :meth:`start` returns after ``READY=1`` (``ready_timeout``: beyond the
    lab's own 15 s)."""

    _names = itertools.count()

    def __init__(self, directory: str, server_url: Optional[str] = None,
                 settings: Optional[Mapping[str, Any]] = None, extra_config: str = "",
                 binary: Optional[str] = None, client_timeout: float = 10.0,
                 ready_timeout: float = 15.0, environment: Optional[Mapping[str, str]] = None,
                 strict: bool = False, *, lab: Optional[LabClient] = None, name: Optional[str] = None) -> None:
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False, not {strict!r}")
        self.directory = os.path.abspath(directory)
        self.binary = binary
        self.socket_path, self.state_dir, self.config_path, self.log_path = (
            os.path.join(self.directory, leaf) for leaf in ("agent.sock", "state", "agent.conf", "agent.log"))
        self.settings: Dict[str, Any] = {"application_code": EXAMPLE_APP_CODE}
        if server_url is not None:
            self.settings["server_url"] = server_url
        self.settings.update(settings or {})
        for own in ("socket", "Socket", "state_directory", "StateDirectory"):
            if self.settings.get(own) is not None:
                raise ValueError(f"agent setting {own!r}: the lab places the socket and the state in the device's "
                                 f"directory ({self.socket_path}, {self.state_dir})")
        _lab_config(self.settings)  # unknown names fail here, before the lab is asked
        self.extra_config = extra_config
        self.client_timeout = client_timeout
        self.strict = strict
        self.ready_timeout = ready_timeout
        self.environment = dict(environment or {})
        # A wrapper ``binary`` is only the daemon: the lab's emulator is from beside a build's binary, else PATH.
        self.lab = lab if lab is not None else launcher_lab(_build_dir(binary))
        self.name = name or _device_name(self.directory, next(self._names))
        self._client: Optional[AgentClient] = None
        #: How each run ended, as subprocess gives it: the exit code, or minus the signal.
        self.exit_statuses: List[Optional[int]] = []
        self._device: Optional[Dict[str, Any]] = None
        self._in_lab = False
        self._last_notifications: List[str] = []

    @property
    def notifications(self) -> List[str]:
        """Every datagram the agent sent to its ``NOTIFY_SOCKET``, oldest first, across restarts."""
        if not self._in_lab:  # stopped: what the lab handed over when it let the device go
            return list(self._last_notifications)
        return [str(n) for n in self.lab.notifications(self.name)["notifications"]]

    def wait_for_notification(self, needle: str, after: int = 0, timeout: float = 10.0) -> Optional[str]:
        """The first datagram at index ``after`` or later that contains ``needle``, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((n for n in self.notifications[after:] if needle in n), None)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def write_config(self) -> None:
        """Writes ``agent.conf`` from :attr:`settings` on the lab's server, socket, state and clock
        (for a reload: then :meth:`signal` ``SIGHUP``)."""
        config, clock = _lab_config(self.settings)
        with open(self.config_path, encoding="utf-8") as f:  # the lab's own emulator, as it wrote it
            started = [line[len("ServerURL="):].strip() for line in f if line.startswith("ServerURL=")]
        placed = {"socket": self.socket_path, "state_directory": self.state_dir, "clock": clock}
        text = agent_config({"server_url": started[-1], **self.settings, **placed}, self.extra_config)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(text)

    def start(self) -> "AgentProcess":
        """Asks the lab to start the agent in :attr:`directory` (on the state it has) and waits for ``READY=1``."""
        if self.running:
            raise RuntimeError("the agent is already running")
        config, clock = _lab_config(self.settings)
        lab = LabClient.of(self.lab.emulator, timeout=self.ready_timeout + 30)
        try:
            self._device = lab.start(name=self.name, clock=clock, config=config, directory=self.directory,
                                     environment=self.environment, agentd=self.binary,
                                     extra_config=self.extra_config)[0]
        except EmulatorError as error:
            field = f" (field {error.path})" if error.path else ""
            raise StartError(f"pushwoosh-agentd did not start in the lab ({error.status}): {error.message}{field}:\n"
                             f"{tail(self.log_path)}") from None
        self._in_lab = True
        return self

    def _lab_call(self, call: Any, *args: Any) -> Optional[Dict[str, Any]]:
        """``call(self.name, *args)`` on the lab; None once the device or the lab is gone."""
        try:
            return dict(call(self.name, *args)) if self._in_lab else None
        except EmulatorError as error:
            if error.status not in (0, 404):
                raise
            self._in_lab = False  # gone from the lab, or the lab is gone and the device with it
            return None

    def _look(self) -> Optional[Dict[str, Any]]:
        self._device = self._lab_call(self.lab.device) or self._device
        return self._device if self._in_lab else None

    @property
    def running(self) -> bool:
        device = self._look()
        return device is not None and device_runs(device)

    def http_address(self) -> Optional[str]:
        """The address the HTTP interface is bound to (``127.0.0.1:43117`` for ``Listen=127.0.0.1:0``,
        or a socket path), as the lab read it; None without one."""
        device = self._look()
        return None if device is None or device.get("http") is None else str(device["http"])

    @property
    def http_url(self) -> Optional[str]:
        """``http://HOST:PORT`` of the agent's HTTP interface on a TCP port, else None."""
        address = self.http_address()
        return None if address is None or address.startswith("/") else f"http://{address}"

    @property
    def pid(self) -> Optional[int]:
        pid = (self._device or {}).get("pid")
        return int(pid) if pid is not None else None

    @property
    def client(self) -> AgentClient:
        """This agent's :class:`AgentClient` (reconnects after restarts)."""
        if self._client is None:
            self._client = AgentClient(socket=self.socket_path, timeout=self.client_timeout, strict=self.strict)
        return self._client

    def signal(self, sig: int) -> None:
        """Sends ``sig`` to the agent through the lab (e.g. ``signal.SIGHUP`` to reload its configuration)."""
        if self.running:
            self._lab_call(self.lab.signal, signals.Signals(sig).name[len("SIG"):])

    def stop(self, timeout: float = 5.0) -> Optional[int]:
        """The lab stops the agent (SIGTERM, then SIGKILL after 5 s) and lets it go; the exit status."""
        ended = self._lab_call(self.lab.stop)
        self._in_lab = False
        if ended is None:
            return None
        self._last_notifications = [str(n) for n in ended.get("notifications", [])]
        code, sig = ended.get("exitCode"), ended.get("exitSignal")
        status = int(code) if code is not None else -int(sig) if sig is not None else None
        self.exit_statuses.append(status)
        return status

    def kill(self) -> Optional[int]:
        """SIGKILL (a crash, as far as the agent can tell), through the lab; the exit status."""
        self.signal(signals.SIGKILL)
        return self.stop()  # the lab reaps it: killed by signal 9

    def restart(self, kill: bool = True) -> AgentClient:
        """Kills the agent (``kill``: SIGKILL, else SIGTERM) and starts it again on its state; :attr:`client`."""
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start().client

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


def _build_dir(binary: Optional[str]) -> Optional[str]:
    """``binary``'s directory when it is a build's (a ``pushwoosh-emulator`` beside it), else None."""
    directory = os.path.dirname(os.path.abspath(binary)) if binary else None
    return directory if directory and os.access(os.path.join(directory, "pushwoosh-emulator"), os.X_OK) else None


def _device_name(directory: str, index: int) -> str:
    """A name the lab accepts (1-40 of letters, digits, _ - .), unique in this process."""
    base = re.sub(r"[^A-Za-z0-9_-]", "-", os.path.basename(directory.rstrip("/")))[:16].strip("-") or "agent"
    return f"{base}-{os.getpid()}-{index}"


def _lab_config(settings: Mapping[str, Any]) -> Tuple[Dict[str, Dict[str, str]], str]:
    """``settings`` as the lab's ``config`` sections, and the lab's ``clock`` (``system`` unless set)."""
    config = config_sections(settings)
    clock = config.get("Device", {}).pop("Clock", "system")
    return {section: keys for section, keys in config.items() if keys}, clock  # no [Device] left empty
