"""Running the real ``pushwoosh-emulator`` and ``pushwoosh-agentd`` for tests.

The pytest plugin (:mod:`pushwoosh_agent.plugin`) is built on these two
classes; they work without pytest too::

    with EmulatorProcess(directory) as emulator, \\
         AgentProcess(directory, server_url=emulator.server_url) as agent:
        print(agent.client.is_enabled("new_checkout", False))
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Dict, List, Mapping, Optional

from .client import AgentClient

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
]

from ._process_support import (  # the names of __all__, and what older imports from here still find
    _BY_KEY, _SECTIONS, AGENT_SETTINGS, EXAMPLE_APP_CODE, EXAMPLE_APP_PATH, StartError, _terminate, _value,
    agent_config, find_binary, short_temp_dir, tail, unknown_name,
)
from .emulator_process import EmulatorProcess

class AgentProcess:
    """``pushwoosh-agentd`` in ``directory``: its own configuration file, socket, state
    directory, log (``agent.log``) and ``NOTIFY_SOCKET`` receiver.

    ``settings`` as :func:`agent_config`; ``Socket``, ``StateDirectory`` and
    (from ``server_url``) ``ServerURL`` are set here unless given.
    :meth:`start` returns once the agent sent ``READY=1``.
    """

    def __init__(self, directory: str, server_url: Optional[str] = None,
                 settings: Optional[Mapping[str, Any]] = None, extra_config: str = "",
                 binary: Optional[str] = None, client_timeout: float = 10.0,
                 ready_timeout: float = 15.0, environment: Optional[Mapping[str, str]] = None,
                 strict: bool = False) -> None:
        self.directory = directory
        self.binary = binary or find_binary("pushwoosh-agentd")
        self.socket_path = os.path.join(directory, "agent.sock")
        self.state_dir = os.path.join(directory, "state")
        self.config_path = os.path.join(directory, "agent.conf")
        self.log_path = os.path.join(directory, "agent.log")
        self.notify_path = os.path.join(directory, "notify.sock")
        merged: Dict[str, Any] = {"application_code": EXAMPLE_APP_CODE}
        if server_url is not None:
            merged["server_url"] = server_url
        merged.update(settings or {})
        merged.setdefault("socket", self.socket_path)
        merged.setdefault("state_directory", self.state_dir)
        self.socket_path = str(merged.get("socket") or merged.get("Socket") or self.socket_path)
        self.settings = merged
        self.extra_config = extra_config
        self.client_timeout = client_timeout
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False, not {strict!r}")
        #: Whether :attr:`client` raises FallbackError on a read answered with the caller's default.
        self.strict = strict
        self.ready_timeout = ready_timeout
        self.environment = dict(environment or {})
        self.process: Optional[subprocess.Popen[bytes]] = None
        #: Every datagram received on NOTIFY_SOCKET (READY=1, STATUS=…, STOPPING=1), oldest first.
        self.notifications: List[str] = []
        self._notify_cond = threading.Condition()
        self._notify_sock: Optional[socket.socket] = None
        self._notify_thread: Optional[threading.Thread] = None
        self._notify_stop = threading.Event()
        self._client: Optional[AgentClient] = None
        self.exit_statuses: List[Optional[int]] = []
        self._log_mark = 0
        self._http_address: Optional[str] = None

    # -- NOTIFY_SOCKET --

    def _open_notify(self) -> None:
        if self._notify_sock is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(self.notify_path)
        sock.settimeout(0.2)
        self._notify_sock = sock
        self._notify_thread = threading.Thread(target=self._notify_loop, name="pushwoosh-agent notify",
                                               daemon=True)
        self._notify_thread.start()

    def _notify_loop(self) -> None:
        sock = self._notify_sock
        assert sock is not None
        while not self._notify_stop.is_set():
            try:
                data = sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            with self._notify_cond:
                self.notifications.append(data.decode("utf-8", "replace"))
                self._notify_cond.notify_all()

    def wait_for_notification(self, needle: str, after: int = 0, timeout: float = 10.0) -> Optional[str]:
        """The first datagram at index ``after`` or later that contains ``needle``, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._notify_cond:
            while True:
                for message in self.notifications[after:]:
                    if needle in message:
                        return message
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._notify_cond.wait(min(left, 0.05))
                if self.process is not None and self.process.poll() is not None and needle == "READY=1":
                    # It died; a datagram sent just before may still be in the list.
                    for message in self.notifications[after:]:
                        if needle in message:
                            return message
                    return None

    # -- lifecycle --

    def write_config(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(agent_config(self.settings, self.extra_config))

    def start(self) -> "AgentProcess":
        """Writes the configuration, starts the agent and waits for ``READY=1``."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the agent is already running")
        self.write_config()
        self._open_notify()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
               "NOTIFY_SOCKET": self.notify_path}
        env.update(self.environment)
        with self._notify_cond:
            mark = len(self.notifications)
        self._log_mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        self._http_address = None
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([self.binary, "--config", self.config_path], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log, env=env, start_new_session=True)
        if self.wait_for_notification("READY=1", after=mark, timeout=self.ready_timeout) is None:
            status = self.process.poll()
            if status is None:
                self.kill()
                what = f"did not send READY=1 within {self.ready_timeout:g} s"
            else:
                what = f"exited with status {status} before READY=1"
            raise StartError(f"pushwoosh-agentd {what}:\n{tail(self.log_path)}")
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def http_address(self, timeout: float = 5.0) -> Optional[str]:
        """The address the agent's HTTP interface (``[HTTP] Listen=``) is bound to, e.g.
        ``127.0.0.1:43117`` for ``Listen=127.0.0.1:0``, or a socket path; None when it has none.

        Read from the ``http=`` field of the agent's ``ready`` log line of its latest start
        (``status`` does not carry it). ``READY=1`` is sent just before that line is
        written, so this waits up to ``timeout`` seconds for it.
        """
        if self._http_address is not None:
            return self._http_address
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_mark)
                for raw in f:
                    line = raw.decode("utf-8", "replace")
                    if "]: ready " not in line:
                        continue
                    for word in line.split():
                        if word.startswith("http="):
                            self._http_address = word[len("http="):].strip('"')
                            return self._http_address
                    return None  # ready, without an HTTP interface
            if time.monotonic() >= deadline or not self.running:
                return None
            time.sleep(0.01)

    @property
    def http_url(self) -> Optional[str]:
        """``http://HOST:PORT`` of the agent's HTTP interface on a TCP port, else None."""
        address = self.http_address()
        if address is None or address.startswith("/"):
            return None
        return f"http://{address}"

    @property
    def pid(self) -> Optional[int]:
        return self.process.pid if self.process else None

    @property
    def client(self) -> AgentClient:
        """The :class:`AgentClient` of this agent (created on first use, reconnects after restarts)."""
        if self._client is None:
            self._client = AgentClient(socket=self.socket_path, timeout=self.client_timeout, strict=self.strict)
        return self._client

    def signal(self, sig: int) -> None:
        """Sends ``sig`` to the agent (e.g. ``signal.SIGHUP`` to reload its configuration)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self, timeout: float = 5.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after ``timeout``; the exit status."""
        if self.process is None:
            return None
        status = _terminate(self.process, signal.SIGTERM, timeout)
        self.exit_statuses.append(status)
        return status

    def kill(self) -> Optional[int]:
        """SIGKILL (a crash, as far as the agent can tell); the exit status."""
        if self.process is None:
            return None
        status = _terminate(self.process, signal.SIGKILL, 5)
        self.exit_statuses.append(status)
        return status

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
        """Closes the client, stops the agent, closes the notify socket."""
        if self._client is not None:
            self._client.close()
        self.stop()
        if self._notify_sock is not None:
            self._notify_stop.set()
            try:  # wakes the receiver at once
                with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as waker:
                    waker.sendto(b"", self.notify_path)
            except OSError:
                pass
            if self._notify_thread is not None:
                self._notify_thread.join(2)
            self._notify_sock.close()
            self._notify_sock = None

    def __enter__(self) -> "AgentProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
