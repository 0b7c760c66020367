"""The real ``pushwoosh-emulator`` and ``pushwoosh-agentd`` for tests, with or without pytest.

:class:`EmulatorProcess` runs an emulator, which is also a lab (``--lab``, docs/lab.md M).
:class:`AgentProcess` is a device that a lab starts and owns: this package launches no agent of
its own. An agent given no ``lab=`` lives in this process's one lab (:func:`launcher_lab`; under
pytest, the session's emulator)::

    with EmulatorProcess(directory) as emulator, AgentProcess(directory, lab=emulator.lab) as agent:
        print(agent.client.is_enabled("new_checkout", False))
"""

from __future__ import annotations

import atexit
import difflib
import itertools
import json
import os
import re
import shutil
import signal as signals
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .client import AgentClient
from .emulator import EmulatorClient
from .errors import EmulatorError, PushwooshError
from .lab import LabClient


#: The application definition the emulator fixture loads unless told otherwise:
#: a copy of the agent's ``config/flags.example.json`` (application ``ABCDE-12345``).
EXAMPLE_APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example-app.json")
EXAMPLE_APP_CODE = "ABCDE-12345"

#: Settings of :func:`agent_config` and the ``pushwoosh_agent`` marker: pythonic name ->
#: (section, key) of the configuration file (docs/configuration.md C.1, F). The keys themselves
#: (``RefreshInterval=...``) are accepted too.
_NAMES = {
    "Agent": "application_code api_token server_url user_id socket socket_mode socket_group control_group max_connections "
             "request_read_timeout state_directory request_timeout ca_file proxy",
    "FeatureFlags": "stored_flags_lifetime session_timeout refresh_interval throttle_window disable_throttle",
    "Device": "initial_app_state notification_authorization permission_prompt_answer clock",
    "HTTP": "http_listen http_max_connections http_token_file",
}
#: Each key is its pythonic name in CamelCase (``server_url`` is ``ServerURL``, ``ca_file`` ``CAFile``),
#: without the ``http_`` of the ``[HTTP]`` section's.
AGENT_SETTINGS: Dict[str, Tuple[str, str]] = {
    name: (section, "".join({"url": "URL", "ca": "CA"}.get(part, part.capitalize())
                            for part in name[len("http_") if section == "HTTP" else 0:].split("_")))
    for section, names in _NAMES.items() for name in names.split()}
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


def config_sections(settings: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    """``settings`` (:data:`AGENT_SETTINGS` names or the file's keys) as sections of keys and
    values as the file has them: booleans ``yes``/``no``, numbers seconds (a fraction becomes
    milliseconds); ``None`` leaves the key out; an unknown name is a ValueError naming the nearest."""
    sections: Dict[str, Dict[str, str]] = {}
    for name, value in settings.items():
        where = AGENT_SETTINGS.get(name) or _BY_KEY.get(name)
        if where is None:
            raise ValueError(unknown_name("agent setting", name, list(AGENT_SETTINGS) + list(_BY_KEY)))
        if value is not None:
            sections.setdefault(where[0], {})[where[1]] = _value(value)
    return sections


def agent_config(settings: Mapping[str, Any], extra: str = "") -> str:
    """The text of an agent configuration file with ``settings`` (see :func:`config_sections`).
    ``extra`` is appended as is.
    """
    sections = config_sections(settings)
    lines: List[str] = ["# written by pushwoosh_agent.processes.agent_config"]
    for section in _SECTIONS:
        if sections.get(section):
            lines += ["", f"[{section}]"] + [f"{key}={value}" for key, value in sections[section].items()]
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


def _secret(path: str, text: str) -> str:
    """Writes ``text`` to a new 0600 file (a token is never put on a command line); its path."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return path


def _json_file(directory: str, name: str, value: Any) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)
    return path


class EmulatorProcess:
    """``pushwoosh-emulator`` on a free loopback port, logging to ``directory/emulator.log``, and
    the lab it serves (``--lab directory/emulator-lab``; :attr:`lab`).

    ``apps``: a path, an application definition, a list of them, or None for none; by default
    :data:`EXAMPLE_APP_PATH`. ``state``: a saved lab (``--state``: a path or a document from
    ``EmulatorClient.state()``). ``admin_token``: lock the admin API and the lab with this token
    (``--admin-token``, written to a 0600 file); without one, the lab's own (``DIR/token``, read
    from the file the emulator names). :attr:`client` sends it; :attr:`token_file` is where it is.
    ``agentd``: the daemon the lab starts (``--agentd``; else the one beside :attr:`binary`).
    ``die_with_parent``: run under a parent-death signal (``setpriv --pdeathsig TERM``), so the
    emulator and its devices end with the thread that started it, even after a SIGKILL.
    After :meth:`stop`, :meth:`start` starts it again on the same port (the network went away
    and came back), its state afresh from ``apps`` and ``state``.
    """

    def __init__(self, directory: str, apps: Union[str, Mapping[str, Any], List[Mapping[str, Any]], None] =
                 EXAMPLE_APP_PATH, binary: Optional[str] = None, require_token: Optional[str] = None,
                 verbose: bool = True, start_timeout: float = 15.0,
                 state: Union[str, Mapping[str, Any], None] = None,
                 tls: Optional[Tuple[str, str]] = None, ca_file: Optional[str] = None,
                 extra_args: Sequence[str] = (), admin_token: Optional[str] = None,
                 agentd: Optional[str] = None, die_with_parent: bool = False) -> None:
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
        self.agentd = agentd
        self.die_with_parent = die_with_parent
        self.apps = apps
        self.state = state
        self.require_token = require_token
        self.verbose = verbose
        self.start_timeout = start_timeout
        self.log_path = os.path.join(directory, "emulator.log")
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.port = 0
        #: The file of the admin and lab token, once started (``DIR/token`` or ``--admin-token``'s):
        #: what ``pushwoosh-agentctl fleet advance-clock --admin-token`` takes.
        self.token_file: Optional[str] = None
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
    def lab(self) -> LabClient:
        """A :class:`~pushwoosh_agent.lab.LabClient` of this emulator's lab: the devices it starts
        (:class:`AgentProcess` with ``lab=``) and its clock."""
        return LabClient.of(self.client)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "EmulatorProcess":
        """Starts the emulator (on the port it had, if it ran before) and waits until it listens."""
        if self.running:
            raise RuntimeError("the emulator is already running")
        args = [self.binary, "--listen", f"127.0.0.1:{self.port}", "--lab", os.path.join(self.directory, "emulator-lab")]
        if self.apps is not None:
            apps = self.apps if isinstance(self.apps, (str, list)) else dict(self.apps)
            args += ["--apps", apps if isinstance(apps, str) else _json_file(self.directory, "apps.json", apps)]
        if self.state is not None:
            state = self.state if isinstance(self.state, str) else _json_file(self.directory, "state.json", dict(self.state))
            args += ["--state", state]
        if self.require_token is not None:
            args += ["--require-token", _secret(os.path.join(self.directory, "require-token"), self.require_token)]
        if self.admin_token is not None:
            args += ["--admin-token", _secret(os.path.join(self.directory, "admin-token"), self.admin_token)]
        args += ["--verbose"] if self.verbose else []
        args += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]] if self.tls is not None else []
        args += ["--agentd", self.agentd] if self.agentd is not None else []
        args += self.extra_args
        setpriv = shutil.which("setpriv") if self.die_with_parent else None
        if setpriv is not None:
            args = [setpriv, "--pdeathsig", "TERM", "--"] + args
        mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(mark)
                for line in f:
                    if line.startswith(b"lab token: "):  # the lab is always locked (docs/lab.md)
                        self.token_file = line[len(b"lab token: "):].strip().decode()
                        if self.admin_token is None:  # kept: a restart passes it as --admin-token
                            with open(self.token_file, encoding="utf-8") as token:
                                self.admin_token = token.read().strip()
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
        """SIGTERM (SIGKILL after 5 s); the exit status. Its lab's devices end with it. The port is
        kept for :meth:`start`."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def __enter__(self) -> "EmulatorProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


#: Where this process's lab (:func:`session_emulator`) finds ``pushwoosh-emulator`` when it starts
#: it: the pytest plugin sets it to ``--pushwoosh-bin``; None: the directory asked for, else ``PATH``.
LAB_BIN_DIR: Optional[str] = None
_SESSION: List[EmulatorProcess] = []


def session_emulator(bin_dir: Optional[str] = None) -> EmulatorProcess:
    """This process's one lab: an emulator with the example application, run with ``--lab`` under
    a parent-death signal, started on first use (and again after a stop) from :data:`LAB_BIN_DIR`,
    else ``bin_dir``, else ``PATH``. Under pytest it is the session's ``pushwoosh_emulator``; the
    agents that name no lab live in it, and end with it (:func:`stop_launcher_labs`, the
    interpreter's exit, or the death of the thread that started it)."""
    if not _SESSION:
        directory = LAB_BIN_DIR if LAB_BIN_DIR is not None else bin_dir
        _SESSION.append(EmulatorProcess(short_temp_dir("pwe-"), binary=find_binary("pushwoosh-emulator", directory),
                                        die_with_parent=True))
    if not _SESSION[0].running:
        _SESSION[0].start()
    return _SESSION[0]


def launcher_lab(bin_dir: Optional[str] = None) -> LabClient:
    """The lab of :func:`session_emulator`: where an :class:`AgentProcess` without ``lab=`` lives."""
    return session_emulator(bin_dir).lab


def stop_launcher_labs() -> None:
    """Stops this process's lab (:func:`session_emulator`), and with it the agents it started."""
    while _SESSION:
        process = _SESSION.pop()
        process.stop()
        shutil.rmtree(process.directory, ignore_errors=True)


atexit.register(stop_launcher_labs)


class AgentProcess:
    """A ``pushwoosh-agentd`` device that ``lab`` starts and owns (docs/lab.md M.1), living in
    ``directory``: its configuration file (``agent.conf``), socket, state directory and log
    (``agent.log``). ``lab``: a :class:`~pushwoosh_agent.lab.LabClient` (``EmulatorProcess.lab``);
    by default this process's lab (:func:`launcher_lab`). The lab runs the agent under a
    parent-death signal, keeps what it tells its ``NOTIFY_SOCKET`` and stops it when the lab ends.

    ``settings`` as :func:`agent_config`; ``server_url`` (or the setting) points the agent at a
    server (else the lab's own emulator); ``Socket`` and ``StateDirectory`` are the lab's (in
    ``directory``). ``clock`` is ``system`` unless set. ``binary``: the program the lab runs as the
    daemon (the real ``pushwoosh-agentd``, or a wrapper that execs it under faketime, valgrind or
    strace; else the lab's). :meth:`start` returns once the agent sent ``READY=1``
    (``ready_timeout``: how long it waits for the lab's answer, beyond the lab's own 15 s).
    """

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
        #: The lab that starts it. A wrapper ``binary`` is only the device's daemon: the lab is
        #: this process's (its emulator from beside a ``binary`` that has one, else PATH's).
        self.lab = lab if lab is not None else launcher_lab(_build_dir(binary))
        #: The device's name in the lab.
        self.name = name or _device_name(self.directory, next(self._names))
        self._client: Optional[AgentClient] = None
        #: How each run ended, as subprocess gives it: the exit code, or minus the signal.
        self.exit_statuses: List[Optional[int]] = []
        self._device: Optional[Dict[str, Any]] = None
        self._in_lab = False
        self._last_notifications: List[str] = []

    @property
    def notifications(self) -> List[str]:
        """Every datagram the agent sent to its ``NOTIFY_SOCKET`` (READY=1, STATUS=…, STOPPING=1),
        oldest first, as the lab kept them (across restarts)."""
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
        """Writes the configuration file from :attr:`settings` (:func:`agent_config`), on the server
        and with the socket, state and clock the lab gave it (for a reload: then :meth:`signal` ``SIGHUP``)."""
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
                                     environment=self.environment, agentd=self.binary, extra_config=self.extra_config)[0]
        except EmulatorError as error:
            field = f" (field {error.path})" if error.path else ""
            raise StartError(f"pushwoosh-agentd did not start in the lab ({error.status}): {error.message}{field}:\n"
                             f"{tail(self.log_path)}") from None
        self._in_lab = True
        return self

    def _lab_call(self, call: Any, *args: Any) -> Optional[Dict[str, Any]]:
        """``call(self.name, *args)`` on the lab; None (and out of the lab) once the device or the
        lab is gone."""
        if not self._in_lab:
            return None
        try:
            return dict(call(self.name, *args))
        except EmulatorError as error:
            if error.status in (0, 404):  # gone from the lab, or the lab is gone and the device with it
                self._in_lab = False
                return None
            raise

    def _look(self) -> Optional[Dict[str, Any]]:
        self._device = self._lab_call(self.lab.device) or self._device
        return self._device if self._in_lab else None

    @property
    def running(self) -> bool:
        device = self._look()
        return device is not None and device.get("state") != "exited" and device.get("pid") is not None

    def http_address(self) -> Optional[str]:
        """The address the agent's HTTP interface (``[HTTP] Listen=``) is bound to, e.g.
        ``127.0.0.1:43117`` for ``Listen=127.0.0.1:0``, or a socket path; None when it has none
        (``status``'s ``httpAddress``, as the lab reads it: bound before ``READY=1``)."""
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
        """The :class:`AgentClient` of this agent (created on first use, reconnects after restarts)."""
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
        if self.running:
            self._lab_call(self.lab.signal, "KILL")
        return self.stop()  # the lab reaps it: killed by signal 9

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


def _build_dir(binary: Optional[str]) -> Optional[str]:
    """``binary``'s directory when it is a build's (a ``pushwoosh-emulator`` beside it), else None."""
    directory = os.path.dirname(os.path.abspath(binary)) if binary else None
    return directory if directory and os.access(os.path.join(directory, "pushwoosh-emulator"), os.X_OK) else None


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
