"""The real ``pushwoosh-emulator`` for tests, and the lab it serves (``--lab``, docs/lab.md)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from .emulator import EmulatorClient, checked_token
from .lab import LabClient
from ._process_support import EXAMPLE_APP_PATH, StartError, _json_file, _secret, find_binary, short_temp_dir, tail


class EmulatorProcess:
    """``pushwoosh-emulator`` on a free loopback port, logging to ``directory/emulator.log``, and its lab
    (``--lab directory/emulator-lab``; :attr:`lab`). ``apps``: a path, a definition, a list, or None; ``state``: a saved
    lab (a path or ``EmulatorClient.state()``); ``admin_token``: the token (else the lab's own, read from ``DIR/token``;
    :attr:`token_file`); ``agentd``: the daemon the lab starts; ``die_with_parent``: ends with the thread that started
    it (``setpriv --pdeathsig``). After :meth:`stop`, :meth:`start` uses the same port again."""

    def __init__(self, directory: str, apps: Union[str, Mapping[str, Any], List[Mapping[str, Any]], None] =
                 EXAMPLE_APP_PATH, binary: Optional[str] = None, require_token: Optional[str] = None,
                 verbose: bool = True, start_timeout: float = 15.0,
                 state: Union[str, Mapping[str, Any], None] = None,
                 tls: Optional[Tuple[str, str]] = None, ca_file: Optional[str] = None,
                 extra_args: Sequence[str] = (), admin_token: Optional[str] = None,
                 agentd: Optional[str] = None, die_with_parent: bool = False) -> None:
        self.directory = directory
        self.admin_token = checked_token(admin_token)
        self.tls = tls  #: ``(certificate, key)`` PEM paths: serve HTTPS
        self.ca_file = ca_file  #: the CA that signed ``tls``'s certificate
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
        #: The token's file once started (``agentctl fleet advance-clock --admin-token`` takes it).
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
        """A :class:`~pushwoosh_agent.lab.LabClient` of this emulator's lab."""
        return LabClient.of(self.client)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "EmulatorProcess":
        """Starts the emulator (on the port it had, if it ran before) and waits until it listens."""
        if self.running:
            raise RuntimeError("the emulator is already running")
        lab_dir = os.path.join(self.directory, "emulator-lab")
        args = [self.binary, "--listen", f"127.0.0.1:{self.port}", "--lab", lab_dir]
        for flag, value in (("--apps", self.apps), ("--state", self.state)):  # a path, else JSON in a file
            if value is not None:
                args += [flag, value if isinstance(value, str) else _json_file(self.directory, flag[2:], value)]
        for flag, secret in (("--require-token", self.require_token), ("--admin-token", self.admin_token)):
            if secret is not None:  # in a file: a token never goes on a command line
                args += [flag, _secret(os.path.join(self.directory, flag[2:]), secret)]
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
        """SIGTERM (SIGKILL after 5 s), its lab's devices with it; the exit status."""
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


#: Where :func:`session_emulator` finds ``pushwoosh-emulator`` (the plugin's ``--pushwoosh-bin``).
LAB_BIN_DIR: Optional[str] = None
_SESSION: List[EmulatorProcess] = []


def session_emulator(bin_dir: Optional[str] = None) -> EmulatorProcess:
    """This process's one lab (under pytest the session's ``pushwoosh_emulator``), with the example
    application, started on first use from :data:`LAB_BIN_DIR`, else ``bin_dir``, else ``PATH``;
    agents that name no lab live in it and end with it."""
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
