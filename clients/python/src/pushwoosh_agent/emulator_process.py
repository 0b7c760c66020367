"""``pushwoosh-emulator`` run for tests (:class:`EmulatorProcess`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from .emulator import EmulatorClient
from .lab import LabClient

from ._process_support import EXAMPLE_APP_PATH, StartError, _terminate, find_binary, tail

__all__ = ["EmulatorProcess"]


class EmulatorProcess:
    """``pushwoosh-emulator`` on a free loopback port, logging to ``directory/emulator.log``.

    ``apps``: a path, an application definition, a list of them, or None for
    none; by default :data:`EXAMPLE_APP_PATH`. ``state``: a saved lab
    (``--state``: a path or a document from ``EmulatorClient.state()``).
    ``admin_token``: lock the admin API and the lab (``--admin-token``, the token written to a
    0600 file in ``directory``); without one, the lab's own token (``DIR/token``, read from the
    file the emulator names). :attr:`client` sends it; :attr:`token_file` is where it is.
    After :meth:`stop`, :meth:`start` starts it again on the same port (the network
    went away and came back); its state starts afresh from ``apps`` and ``state``.
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
        #: The daemon its lab starts (``--agentd``); by default the one beside :attr:`binary`.
        self.agentd = agentd
        #: Run under a parent-death signal (``setpriv --pdeathsig TERM``, when util-linux has it):
        #: the emulator, and its lab's devices with it, end when the thread that started it does,
        #: even if this process is killed with SIGKILL.
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
        """A :class:`~pushwoosh_agent.lab.LabClient` of this emulator's lab (docs/lab.md M): the
        devices it starts (:class:`~pushwoosh_agent.processes.AgentProcess`) and its clock."""
        return LabClient.of(self.client)

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
            # In a file (0600), as the admin token: never on the command line, where every local
            # user can read it.
            path = os.path.join(self.directory, "require-token")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.require_token + "\n")
            args += ["--require-token", path]
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
        # The lab (docs/lab.md M): advance_clock moves the emulator and the agents through it.
        args += ["--lab", os.path.join(self.directory, "emulator-lab")]
        if self.agentd is not None:
            args += ["--agentd", self.agentd]
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
                    if line.startswith(b"lab token: "):
                        # The lab is always locked (docs/lab.md "The token"): its token, from the file it
                        # names (a restart keeps it: it is then this object's --admin-token).
                        self.token_file = line[len(b"lab token: "):].strip().decode()
                        if self.admin_token is None:
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
        """SIGTERM (SIGKILL after 5 s); the exit status. The port is kept for :meth:`start`."""
        return _terminate(self.process, signal.SIGTERM, 5) if self.process else None

    def __enter__(self) -> "EmulatorProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
