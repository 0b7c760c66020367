"""Every exception: against the real agent, and against peers that misbehave as no agent should."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, List

import pytest

from conftest import run_as_nobody
from pushwoosh_agent import (
    AgentClient,
    AgentError,
    AgentNotRunning,
    AgentTimeout,
    FallbackWarning,
    MethodNotFound,
    PermissionDenied,
    ProtocolError,
    PushwooshError,
)
from pushwoosh_agent.plugin import RunningEmulator
from pushwoosh_agent.processes import AgentProcess


def test_agent_not_running_when_there_is_no_socket(pushwoosh_tmp_dir: str) -> None:
    path = os.path.join(pushwoosh_tmp_dir, "nothing.sock")
    with pytest.raises(AgentNotRunning) as caught:
        AgentClient(socket=path)
    assert caught.value.socket_path == path
    assert path in str(caught.value)


def test_agent_not_running_when_nobody_listens(pushwoosh_tmp_dir: str) -> None:
    path = os.path.join(pushwoosh_tmp_dir, "stale.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)  # a socket file left behind, no listener: ECONNREFUSED
    stale.close()
    with pytest.raises(AgentNotRunning, match="connection refused"):
        AgentClient(socket=path)


def test_a_socket_path_too_long_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        AgentClient(socket="/tmp/" + "x" * 200)
    with pytest.raises(ValueError):
        AgentClient(socket="/tmp/a.sock", instance="x")


def test_agent_error_carries_code_message_and_data(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.property("new_checkout", "button_color", "string", default=5)
    error = caught.value
    assert error.code == -32602
    assert "default" in error.message
    assert error.data == {"parameter": "default"}
    assert error.method == "property"
    assert type(error) is AgentError and isinstance(error, PushwooshError)


def test_method_not_found(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(MethodNotFound) as caught:
        pushwoosh_agent.call("noSuchMethod")
    assert caught.value.code == -32601
    assert isinstance(caught.value, AgentError)


@pytest.mark.pushwoosh_agent(socket_mode="0666")
def test_permission_denied_names_the_method(pushwoosh_agent_process: AgentProcess) -> None:
    path = pushwoosh_agent_process.socket_path

    def as_nobody() -> Dict[str, Any]:
        with AgentClient(socket=path, timeout=5) as client:
            state = client.status()["state"]  # reading is open to anyone who can connect
            flag = client.is_enabled("promo_banner", True)
            denied: Dict[str, Any] = {}
            for name, call in [("setUserId", lambda: client.set_user_id("mallory")),
                               ("refresh", client.refresh),
                               ("registerForPushNotifications", client.register_for_push)]:
                try:
                    call()
                    denied[name] = None
                except PermissionDenied as error:
                    denied[name] = [error.code, error.method, str(error)]
            return {"state": state, "flag": flag, "denied": denied}

    result = run_as_nobody(as_nobody)
    assert "ok" in result, result
    assert result["ok"]["state"] == "ready" and result["ok"]["flag"] is False
    for name, (code, method, text) in result["ok"]["denied"].items():
        assert code == -32001 and method == name and name in text
    assert pushwoosh_agent_process.client.status()["userId"] != "mallory"


def test_permission_denied_on_the_socket_itself(pushwoosh_agent_process: AgentProcess) -> None:
    os.chmod(pushwoosh_agent_process.socket_path, 0o600)  # only root may connect now
    path = pushwoosh_agent_process.socket_path

    def as_nobody() -> List[Any]:
        try:
            AgentClient(socket=path, timeout=5)
        except PermissionDenied as error:
            return [error.code, error.method, str(error)]
        return []

    result = run_as_nobody(as_nobody)
    code, method, text = result["ok"]
    assert code == -32001 and method is None and path in text


@pytest.mark.pushwoosh_agent(client_timeout=0.5)
def test_a_call_times_out_and_the_connection_stays_usable(pushwoosh_agent: AgentClient,
                                                          pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_emulator.add_fault("getFeatureFlags", delay_ms=1200)
    start = time.monotonic()
    with pytest.raises(AgentTimeout) as caught:
        pushwoosh_agent.refresh()
    assert 0.45 < time.monotonic() - start < 1.0
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.method == "refresh" and "refresh" in str(caught.value)
    assert pushwoosh_agent.is_enabled("promo_banner", True) is False  # answered while refresh is pending
    time.sleep(1.0)  # the late refresh answer arrives and is dropped
    with pytest.warns(FallbackWarning, match="FLAG_NOT_FOUND"):
        assert pushwoosh_agent.property("nope", "x", "number", 42) == 42
    pushwoosh_agent.refresh(timeout=5)  # a per-call timeout


def test_arguments_that_cannot_be_sent_fail_before_sending(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(TypeError):
        pushwoosh_agent.get(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pushwoosh_agent.property("k", "p", "number", float("nan"))
    with pytest.raises(ValueError):
        pushwoosh_agent.get("\ud800")  # a lone surrogate is not UTF-8
    with pytest.raises(ValueError):
        pushwoosh_agent.get("k" * (1 << 20))  # over the agent's line limit
    # None of that disturbed the connection.
    assert pushwoosh_agent.is_enabled("promo_banner", True) is False
    # What the agent itself rejects comes back as AgentError.
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.get(5)  # type: ignore[arg-type]
    assert caught.value.code == -32602


def test_use_after_close(pushwoosh_agent_process: AgentProcess) -> None:
    client = AgentClient(socket=pushwoosh_agent_process.socket_path)
    with client:
        assert client.connected
    assert not client.connected
    with pytest.raises(ValueError):
        client.status()


# --- Peers that misbehave: the client must never hang ------------------------------------------


@pytest.fixture
def fake_agent(pushwoosh_tmp_dir: str) -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """fake_agent(handler) -> socket path: a Unix socket server running handler(conn) per connection."""
    servers: List[socket.socket] = []
    threads: List[threading.Thread] = []

    def start(handler: Callable[[socket.socket], None]) -> str:
        path = os.path.join(pushwoosh_tmp_dir, f"fake{len(servers)}.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen()
        servers.append(server)

        def serve() -> None:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                handler(conn)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return path

    yield start
    for server in servers:
        server.close()
    for thread in threads:
        thread.join(5)


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_a_silent_peer_times_out(fake_agent: Callable[..., str]) -> None:
    done = threading.Event()
    path = fake_agent(lambda conn: (_read_line(conn), done.wait(5)))
    with AgentClient(socket=path, timeout=0.3) as client:
        start = time.monotonic()
        with pytest.raises(AgentTimeout):
            client.status()
        assert time.monotonic() - start < 1.0
    done.set()


def test_a_peer_that_hangs_up_fails_the_call_at_once(fake_agent: Callable[..., str]) -> None:
    path = fake_agent(lambda conn: _read_line(conn))  # reads the request, closes
    with AgentClient(socket=path, timeout=30) as client:
        start = time.monotonic()
        with pytest.raises(AgentNotRunning) as caught:
            client.status()
        assert time.monotonic() - start < 1.0
        assert caught.value.socket_path == path


REFUSAL = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"too many connections (MaxConnections=1)"}}\n'


@pytest.mark.parametrize("pause", [0.0, 0.3])
def test_a_refused_connection_is_told_why_never_broken_pipe(pushwoosh_tmp_dir: str, pause: float) -> None:
    """As the agent refuses a connection over MaxConnections when it cannot wait for the request:
    the reason (-32000, id null), then the close, before the client wrote anything. The call
    reports that reason whether its send comes before the close or after it (a broken pipe)."""
    path = os.path.join(pushwoosh_tmp_dir, "refusing.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()

    def refuse_every_connection() -> None:  # a new connection is refused as well
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(REFUSAL)  # and closes at once

    thread = threading.Thread(target=refuse_every_connection, daemon=True)
    thread.start()
    with AgentClient(socket=path, timeout=5) as client:
        time.sleep(pause)
        with pytest.raises(AgentError) as caught:
            client.status()
        assert caught.value.code == -32000
        assert "too many connections (MaxConnections=1)" in str(caught.value)
        assert "Broken pipe" not in str(caught.value)
    server.shutdown(socket.SHUT_RDWR)
    server.close()
    thread.join(5)


def test_garbage_and_stray_answers_are_skipped(fake_agent: Callable[..., str]) -> None:
    def handler(conn: socket.socket) -> None:
        _read_line(conn)
        conn.sendall(b"this is not json\n\r\n[1, 2]\n\"x\"\n"
                     b'{"jsonrpc":"2.0","id":999,"result":{}}\n'
                     b'{"jsonrpc":"2.0","method":"somethingElse","params":{}}\n'
                     b'{"jsonrpc":"2.0","id":1,"result":{"state":"ready"}}\r\n')
        _read_line(conn)
        conn.sendall(b'{"jsonrpc":"2.0","id":2,"result":"not an object"}\n')
        _read_line(conn)
        conn.sendall(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: x"}}\n')
        _read_line(conn)

    path = fake_agent(handler)
    with AgentClient(socket=path, timeout=5) as client:
        assert client.status() == {"state": "ready"}
        with pytest.raises(ProtocolError):
            client.status()
        with pytest.raises(AgentError) as caught:  # id null, one call in flight: it is that one's
            client.status()
        assert caught.value.code == -32700


def test_an_endless_answer_line_ends_the_connection(fake_agent: Callable[..., str]) -> None:
    def handler(conn: socket.socket) -> None:
        _read_line(conn)
        chunk = b"x" * (1 << 20)
        try:
            for _ in range(80):  # 80 MiB without a newline
                conn.sendall(chunk)
        except OSError:
            pass

    path = fake_agent(handler)
    with AgentClient(socket=path, timeout=20) as client:
        with pytest.raises(AgentNotRunning, match="longer than"):
            client.status()


def test_a_peer_that_stops_reading_times_out_the_send(fake_agent: Callable[..., str]) -> None:
    done = threading.Event()
    path = fake_agent(lambda conn: done.wait(10))  # accepts, never reads
    with AgentClient(socket=path, timeout=0.5) as client:
        start = time.monotonic()
        with pytest.raises(AgentTimeout) as caught:
            client.get("k" * 900_000)  # more than the socket buffers hold: the send blocks
        assert time.monotonic() - start < 2
        assert caught.value.method == "get"
        assert not client.connected  # half a line went out: that connection is done
    done.set()
