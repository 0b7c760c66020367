"""The real pushwoosh-emulator and pushwoosh-agentd for the OpenFeature tests, through the Python
client: each agent is a device of the session's lab (the client's AgentProcess), started and
waited for (READY=1) by the lab; each Emulator is an EmulatorProcess serving the agents' flags.

PUSHWOOSH_BIN names the directory of the built binaries (`make ofrep-test` passes the
debug build's; the plugin's --pushwoosh-bin defaults to it).
"""
import os
import socket
import tempfile
import time
import urllib.request

import pytest
from pushwoosh_agent.openfeature import UNIX_BASE_URL
from pushwoosh_agent.processes import AgentProcess, EmulatorProcess

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, "apps.json")
ROOT = os.path.dirname(os.path.dirname(HERE))
APPLICATION = "OFREP-00001"
USER = "alice"


def binary(name):
    directory = os.environ.get("PUSHWOOSH_BIN")
    if not directory:
        raise RuntimeError("set PUSHWOOSH_BIN to the directory of the built binaries")
    return os.path.join(directory, name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Emulator:
    """An emulator serving `apps` (its admin API through `.client`, with the lab's token)."""

    def __init__(self, apps=APPS):
        self.dir = tempfile.TemporaryDirectory(prefix="pwemu-ofrep-")
        self.process = EmulatorProcess(self.dir.name, apps=apps, binary=binary("pushwoosh-emulator")).start()
        self.port = self.process.port
        self.server_url = self.process.server_url
        self.client = self.process.client

    def stop(self):
        self.process.stop()
        self.dir.cleanup()


class Agent:
    """pushwoosh-agentd with [HTTP] Listen= (a free loopback port, or a Unix socket path): a device
    of the session's lab, ready (READY=1) when constructed."""

    def __init__(self, server_url, unix=False, application=APPLICATION, token=None, extra="", env=None):
        self.dir = tempfile.TemporaryDirectory(prefix="pwagent-ofrep-")
        d = self.dir.name
        self.token = token
        settings = {"application_code": application, "user_id": USER, "request_timeout": "5s",
                    "http_listen": os.path.join(d, "http.sock") if unix else "127.0.0.1:0"}
        if token is not None:
            with open(os.path.join(d, "token"), "w") as f:
                f.write(token + "\n")
            os.chmod(os.path.join(d, "token"), 0o600)
            settings["http_token_file"] = os.path.join(d, "token")
        self.device = AgentProcess(d, server_url=server_url, settings=settings, extra_config=extra,
                                   binary=binary("pushwoosh-agentd"), environment=env).start()
        self.unix = unix
        self.listen = self.device.http_address()
        if not unix:
            self.port = int(self.listen.rsplit(":", 1)[1])

    @property
    def base_url(self):
        return UNIX_BASE_URL if self.unix else f"http://127.0.0.1:{self.port}"

    def get(self, path):
        """(status, body) of a GET over plain sockets (TCP only)."""
        request = urllib.request.Request(self.base_url + path)
        if self.token is not None:
            request.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait(self, path="/readyz", timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.get(path)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"agent not answering 200 on {path}: " + self.device.log())

    def stop(self):
        self.device.close()
        self.dir.cleanup()


@pytest.fixture(scope="session")
def emulator():
    e = Emulator()
    yield e
    e.stop()


@pytest.fixture(scope="session")
def agent(emulator):
    a = Agent(emulator.server_url)
    a.wait()
    yield a
    a.stop()


@pytest.fixture(scope="session")
def unready_agent():
    """Its server is a closed port: it never gets flags."""
    a = Agent(f"http://127.0.0.1:{free_port()}/json/1.3/")
    a.wait("/healthz")
    yield a
    a.stop()


@pytest.fixture(scope="session")
def unix_agent(emulator):
    a = Agent(emulator.server_url, unix=True)
    assert os.path.exists(a.listen)  # bound before READY=1
    yield a
    a.stop()


@pytest.fixture(scope="session")
def example_agent():
    """The README's setting: config/flags.example.json, User ID alice."""
    e = Emulator(os.path.join(ROOT, "config", "flags.example.json"))
    a = Agent(e.server_url, application="ABCDE-12345")
    a.wait()
    yield a
    a.stop()
    e.stop()
