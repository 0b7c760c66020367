"""The real pushwoosh-emulator and pushwoosh-agentd for the OpenFeature tests.

PUSHWOOSH_BIN names the directory of the built binaries (`make ofrep-test` passes the
debug build's).
"""
import os
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest
from pushwoosh_agent.openfeature import UNIX_BASE_URL

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
    def __init__(self, apps=APPS):
        self.process = subprocess.Popen([binary("pushwoosh-emulator"), "--listen", "127.0.0.1:0", "--apps", apps],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.server_url = f"http://127.0.0.1:{self.port}/json/1.3/"

    def stop(self):
        self.process.terminate()
        self.process.wait(5)


class Agent:
    """pushwoosh-agentd with [HTTP] Listen= (a loopback port, or a Unix socket path)."""

    def __init__(self, server_url, unix=False, application=APPLICATION, token=None, extra="", env=None):
        self.dir = tempfile.TemporaryDirectory(prefix="pwagent-ofrep-")
        d = self.dir.name
        self.token = token
        http_extra = ""
        if token is not None:
            with open(os.path.join(d, "token"), "w") as f:
                f.write(token + "\n")
            os.chmod(os.path.join(d, "token"), 0o600)
            http_extra = f"TokenFile={d}/token\n"
        if unix:
            self.listen = os.path.join(d, "http.sock")
        else:
            self.port = free_port()
            self.listen = f"127.0.0.1:{self.port}"
        with open(os.path.join(d, "agent.conf"), "w") as f:
            f.write(f"[Agent]\nApplicationCode={application}\nServerURL={server_url}\nUserId={USER}\n"
                    f"Socket={d}/agent.sock\nStateDirectory={d}/state\nRequestTimeout=5s\n"
                    f"[HTTP]\nListen={self.listen}\n{http_extra}{extra}")
        self.stderr = open(os.path.join(d, "stderr.log"), "w")
        self.process = subprocess.Popen([binary("pushwoosh-agentd"), "--config", os.path.join(d, "agent.conf")],
                                        stdout=subprocess.DEVNULL, stderr=self.stderr,
                                        env={"PATH": "/usr/bin:/bin", **(env or {})})
        self.unix = unix

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
        raise RuntimeError(f"agent not answering 200 on {path}: " + open(self.stderr.name).read())

    def stop(self):
        self.process.terminate()
        self.process.wait(5)
        self.stderr.close()
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
    deadline = time.monotonic() + 15
    while not os.path.exists(a.listen) and time.monotonic() < deadline:
        time.sleep(0.05)
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
