"""The package's own tests: the plugin (installed with the package) against the real binaries."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

pytest_plugins = ["pytester"]

#: The repository's root (clients/python/tests -> ../../..).
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
APP = "ABCDE-12345"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_as_nobody(fn: Callable[[], Any], timeout: float = 20.0) -> Dict[str, Any]:
    """Runs ``fn`` in a forked child as uid/gid 65534 (nobody) with no supplementary groups;
    returns {"ok": result} or {"error": repr}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            payload = {"ok": fn()}
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            payload = {"error": repr(error)}
            status = 1
        try:
            os.write(w, json.dumps(payload).encode())
        finally:
            os._exit(status)
    os.close(w)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert data, "the child running as nobody said nothing"
    result: Dict[str, Any] = json.loads(data)
    return result


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01,
               what: Optional[Callable[[], str]] = None) -> Any:
    """Polls ``condition`` until it is truthy; returns its value. On timeout it asserts, saying
    ``what()`` (what was seen) when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"condition not met within {timeout} s" + (f": {what()}" if what else "")
        time.sleep(interval)


class FakeAgent:
    """A Unix socket at ``path`` that reads JSON-RPC lines and answers each with the bytes
    ``answer(request, seen)`` returns (``seen`` counts the methods this connection sent so far,
    this one included); ``close_after_answer`` closes each connection after its first answer.
    ``accepted`` holds the monotonic time of every accepted connection. ``backlog``: listen's;
    ``accepting`` False: nothing is accepted until :meth:`accept`."""

    def __init__(self, path: str, answer: Callable[[Dict[str, Any], "Counter[str]"], bytes], *, backlog: int = 64,
                 close_after_answer: bool = False, accepting: bool = True) -> None:
        self.path = path
        self.answer = answer
        self.close_after_answer = close_after_answer
        self.accepted: List[float] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(backlog)
        if accepting:
            self.accept()

    def accept(self, after: float = 0.0) -> None:
        """Starts accepting, ``after`` seconds from now."""
        threading.Thread(target=self._accept, args=(after,), daemon=True).start()

    def _accept(self, after: float) -> None:
        time.sleep(after)
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        seen: "Counter[str]" = Counter()
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    request = json.loads(line)
                    seen[request["method"]] += 1
                    try:
                        conn.sendall(self.answer(request, seen))
                    except OSError:
                        return
                    if self.close_after_answer:
                        return

    def close(self) -> None:
        self.server.close()


def result_line(request: Dict[str, Any], result: Any) -> bytes:
    """The answer line to ``request`` with ``result``."""
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode() + b"\n"
