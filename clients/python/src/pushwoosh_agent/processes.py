"""Running the real ``pushwoosh-emulator`` and ``pushwoosh-agentd`` for tests.

The pytest plugin (:mod:`pushwoosh_agent.plugin`) is built on these two
classes; they work without pytest too::

    with EmulatorProcess(directory) as emulator, \\
         AgentProcess(directory, server_url=emulator.server_url) as agent:
        print(agent.client.is_enabled("new_checkout", False))
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .client import AgentClient
from .emulator import EmulatorClient
from .errors import PushwooshError

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

#: The application definition the emulator fixture loads unless told otherwise:
#: a copy of the agent's ``config/flags.example.json`` (application ``ABCDE-12345``).
EXAMPLE_APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example-app.json")
EXAMPLE_APP_CODE = "ABCDE-12345"

#: Settings of :func:`agent_config` and the ``pushwoosh_agent`` marker: pythonic name ->
#: (section, key) of the configuration file (docs/configuration.md C.1, F). The keys themselves
#: (``RefreshInterval=...``) are accepted too.
AGENT_SETTINGS: Dict[str, Tuple[str, str]] = {
    "application_code": ("Agent", "ApplicationCode"),
    "api_token": ("Agent", "ApiToken"),
    "server_url": ("Agent", "ServerURL"),
    "user_id": ("Agent", "UserId"),
    "socket": ("Agent", "Socket"),
    "socket_mode": ("Agent", "SocketMode"),
    "socket_group": ("Agent", "SocketGroup"),
    "control_group": ("Agent", "ControlGroup"),
    "max_connections": ("Agent", "MaxConnections"),
    "request_read_timeout": ("Agent", "RequestReadTimeout"),
    "state_directory": ("Agent", "StateDirectory"),
    "request_timeout": ("Agent", "RequestTimeout"),
    "stored_flags_lifetime": ("FeatureFlags", "StoredFlagsLifetime"),
    "session_timeout": ("FeatureFlags", "SessionTimeout"),
    "refresh_interval": ("FeatureFlags", "RefreshInterval"),
    "throttle_window": ("FeatureFlags", "ThrottleWindow"),
    "disable_throttle": ("FeatureFlags", "DisableThrottle"),
    "initial_app_state": ("Device", "InitialAppState"),
    "notification_authorization": ("Device", "NotificationAuthorization"),
    "permission_prompt_answer": ("Device", "PermissionPromptAnswer"),
    "clock": ("Device", "Clock"),
    "ca_file": ("Agent", "CAFile"),
    "proxy": ("Agent", "Proxy"),
    "http_listen": ("HTTP", "Listen"),
    "http_max_connections": ("HTTP", "MaxConnections"),
    "http_token_file": ("HTTP", "TokenFile"),
}
#: By key alone (``MaxConnections=3``): a key in two sections is the first section's
#: (``[Agent]``); the other is set by its pythonic name (``http_max_connections``).
_BY_KEY: Dict[str, Tuple[str, str]] = {}
for _section, _key in AGENT_SETTINGS.values():
    _BY_KEY.setdefault(_key, (_section, _key))
_SECTIONS = ["Agent", "FeatureFlags", "Device", "HTTP"]


def unknown_name(what: str, name: object, known: List[str]) -> str:
    """``unknown WHAT 'x'; did you mean 'y'? (known: …)``: the nearest known names (difflib)."""
    text = f"unknown {what} {name!r}"
    nearest = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6) or \
        difflib.get_close_matches(str(name).lower(), [k.lower() for k in known], n=1, cutoff=0.6)
    if nearest:
        suggestion = next((k for k in known if k.lower() == nearest[0].lower()), nearest[0])
        text += f"; did you mean {suggestion!r}?"
    pythonic = sorted(k for k in known if not k[:1].isupper())
    return text + f" (known: {', '.join(pythonic or sorted(known))})"


class StartError(PushwooshError):
    """A binary is missing, or a process did not start (the message has its log's tail)."""


#: The binaries the fixtures run: a directory with neither is not a build's bin directory.
_BINARIES = ("pushwoosh-agentd", "pushwoosh-emulator")

_ABSOLUTE_HINT = ("give the absolute path of the directory that holds pushwoosh-agentd and pushwoosh-emulator: "
                  "the clone's .build/debug, or what `swift build --show-bin-path` prints when run inside the clone")


def find_binary(name: str, bin_dir: Optional[str] = None) -> str:
    """``bin_dir/name`` when ``bin_dir`` is given, else ``name`` from ``PATH``.

    When it is not there the :class:`StartError` says which directory was looked in (as given
    and as resolved) and why: it does not exist, it is not a directory, it holds neither
    binary (not a build's bin directory), or it lacks this one (or it is not executable).
    """
    if bin_dir:
        where = os.path.abspath(bin_dir)
        relative = "" if os.path.isabs(bin_dir) else f" ({bin_dir!r} is relative: read from {os.getcwd()})"
        path = os.path.join(where, name)
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path
        if not os.path.exists(where):
            why = f"that directory does not exist{relative}; {_ABSOLUTE_HINT}"
        elif not os.path.isdir(where):
            why = f"that is not a directory{relative}; {_ABSOLUTE_HINT}"
        elif not any(os.path.exists(os.path.join(where, b)) for b in _BINARIES):
            why = f"the directory exists but holds neither {' nor '.join(_BINARIES)} (not a build's bin directory; " \
                  f"build with `swift build` in the clone, or {_ABSOLUTE_HINT})"
        elif os.path.exists(path):
            why = f"{path} is there but is not an executable file"
        else:
            why = f"the directory holds {' and '.join(b for b in _BINARIES if os.path.exists(os.path.join(where, b)))} " \
                  f"but no {name} (an incomplete build? run `swift build` in the clone)"
        raise StartError(f"{name} not found in {where} (--pushwoosh-bin): {why}")
    found = shutil.which(name)
    if found is None:
        raise StartError(f"{name} is not on PATH: install it or pass --pushwoosh-bin DIR")
    return found


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and not value.is_integer():
        return f"{round(value * 1000)}ms"
    if isinstance(value, float):
        return str(int(value))
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"a configuration value cannot span lines: {text!r}")
    return text


def agent_config(settings: Mapping[str, Any], extra: str = "") -> str:
    """The text of an agent configuration file with ``settings`` (see :data:`AGENT_SETTINGS`).

    Booleans become ``yes``/``no``, numbers seconds (a fraction becomes
    milliseconds), ``None`` leaves the key out. ``extra`` is appended as is.
    """
    sections: Dict[str, List[str]] = {s: [] for s in _SECTIONS}
    for name, value in settings.items():
        where = AGENT_SETTINGS.get(name) or _BY_KEY.get(name)
        if where is None:
            raise ValueError(unknown_name("agent setting", name, list(AGENT_SETTINGS) + list(_BY_KEY)))
        if value is None:
            continue
        sections[where[0]].append(f"{where[1]}={_value(value)}")
    lines: List[str] = ["# written by pushwoosh_agent.processes.agent_config"]
    for section in _SECTIONS:
        if sections[section]:
            lines += ["", f"[{section}]"] + sections[section]
    text = "\n".join(lines) + "\n"
    if extra:
        text += "\n" + extra.rstrip("\n") + "\n"
    return text


def short_temp_dir(prefix: str = "pwa-") -> str:
    """A new directory whose path leaves room for socket names (sun_path is 108 bytes)."""
    base = tempfile.gettempdir()
    if len(base) > 60:
        base = "/tmp"
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def tail(path: str, max_bytes: int = 64 * 1024) -> str:
    """The end of a log file (at most ``max_bytes``), or a note that there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError as error:
        return f"({path}: {error.strerror})"
    text = data.decode("utf-8", "replace")
    if size > max_bytes:
        text = f"(… the first {size - max_bytes} bytes left out)\n" + text.split("\n", 1)[-1]
    return text or "(empty)"


def _terminate(process: "subprocess.Popen[bytes]", sig: int, timeout: float) -> Optional[int]:
    """Sends ``sig``; SIGKILL after ``timeout``. Returns the exit status."""
    if process.poll() is None:
        try:
            process.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class EmulatorProcess:
    """``pushwoosh-emulator`` on a free loopback port, logging to ``directory/emulator.log``.

    ``apps``: a path, an application definition, a list of them, or None for
    none; by default :data:`EXAMPLE_APP_PATH`. ``state``: a saved lab
    (``--state``: a path or a document from ``EmulatorClient.state()``).
    ``admin_token``: lock the admin API (``--admin-token``, the token written to a
    0600 file in ``directory``); :attr:`client` sends it.
    After :meth:`stop`, :meth:`start` starts it again on the same port (the network
    went away and came back); its state starts afresh from ``apps`` and ``state``.
    """

    def __init__(self, directory: str, apps: Union[str, Mapping[str, Any], List[Mapping[str, Any]], None] =
                 EXAMPLE_APP_PATH, binary: Optional[str] = None, require_token: Optional[str] = None,
                 verbose: bool = True, start_timeout: float = 15.0,
                 state: Union[str, Mapping[str, Any], None] = None,
                 tls: Optional[Tuple[str, str]] = None, ca_file: Optional[str] = None,
                 extra_args: Sequence[str] = (), admin_token: Optional[str] = None) -> None:
        if admin_token is not None and (not isinstance(admin_token, str) or not admin_token
                                        or any(c.isspace() for c in admin_token)):
            raise ValueError(f"admin_token: expected a non-empty string without spaces, not {admin_token!r}")
        self.directory = directory
        self.admin_token = admin_token
        #: ``(certificate, key)`` PEM paths: serve HTTPS (``--tls-cert``, ``--tls-key``).
        self.tls = tls
        #: The CA that signed ``tls``'s certificate, for this object's own admin client.
        self.ca_file = ca_file
        #: Further command-line arguments (``--upstream URL``, ``--record FILE``, ...).
        self.extra_args = list(extra_args)
        self.binary = binary or find_binary("pushwoosh-emulator")
        self.apps = apps
        self.state = state
        self.require_token = require_token
        self.verbose = verbose
        self.start_timeout = start_timeout
        self.log_path = os.path.join(directory, "emulator.log")
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.port = 0
        self._client: Optional[EmulatorClient] = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls``)."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def server_url(self) -> str:
        """The device API URL for the agent's ``ServerURL=``."""
        return self.base_url + "/json/1.3/"

    @property
    def client(self) -> EmulatorClient:
        """An :class:`EmulatorClient` of this emulator."""
        if self._client is None:
            self._client = EmulatorClient(self.base_url, ca_file=self.ca_file, admin_token=self.admin_token)
        return self._client

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "EmulatorProcess":
        """Starts the emulator (on the port it had, if it ran before) and waits until it listens."""
        if self.running:
            raise RuntimeError("the emulator is already running")
        args = [self.binary, "--listen", f"127.0.0.1:{self.port}"]
        if isinstance(self.apps, str):
            args += ["--apps", self.apps]
        elif self.apps is not None:
            path = os.path.join(self.directory, "apps.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.apps if isinstance(self.apps, list) else dict(self.apps), f)
            args += ["--apps", path]
        if isinstance(self.state, str):
            args += ["--state", self.state]
        elif self.state is not None:
            path = os.path.join(self.directory, "state.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(dict(self.state), f)
            args += ["--state", path]
        if self.require_token is not None:
            args += ["--require-token", self.require_token]
        if self.admin_token is not None:
            path = os.path.join(self.directory, "admin-token")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.admin_token + "\n")
            args += ["--admin-token", path]
        if self.verbose:
            args.append("--verbose")
        if self.tls is not None:
            args += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        args += self.extra_args
        mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(mark)
                for line in f:
                    if line.startswith(b"listening on "):
                        self.port = int(line.rsplit(b":", 1)[1])
                        return self
            if self.process.poll() is not None:
                raise StartError(f"pushwoosh-emulator exited with status {self.process.returncode} before "
                                 f"listening:\n{tail(self.log_path)}")
            time.sleep(0.01)
        self.stop()
        raise StartError(f"pushwoosh-emulator did not listen within {self.start_timeout:g} s:\n{tail(self.log_path)}")

    def stop(self) -> Optional[int]:
        """SIGTERM (SIGKILL after 5 s); the exit status. The port is kept for :meth:`start`."""
        return _terminate(self.process, signal.SIGTERM, 5) if self.process else None

    def __enter__(self) -> "EmulatorProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
