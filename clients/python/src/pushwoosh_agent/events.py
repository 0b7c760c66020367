"""Waiting on what the agent says happened (docs/device-clock.md H ``subscribe`` ``events``).

A test waits on these, never in a sleep loop::

    with agent.events("refresh") as events:
        agent.advance_clock(3600)                       # the hourly refresh runs meanwhile
        done = events.next("refreshCompleted", timeout=5)

:meth:`AgentClient.wait_for_refresh` and :meth:`AgentClient.wait_for_state` are built on it.
"""

from __future__ import annotations

import json
import socket as _socket
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .errors import AgentNotRunning, AgentTimeout, ProtocolError

#: The event names ``subscribe`` takes and the notifications each brings.
EVENTS: Dict[str, str] = {"flags": "featureFlagsDidUpdate", "refresh": "refreshCompleted", "state": "stateChanged"}


class EventStream:
    """A connection of its own, subscribed to ``events``; notifications in arrival order.

    Subscribed when constructed (so nothing that happens after the constructor
    returns is missed); a context manager that closes the connection.
    """

    def __init__(self, socket_path: str, events: Iterable[str], timeout: Optional[float] = 30.0) -> None:
        names = list(events)
        unknown = [n for n in names if n not in EVENTS]
        if not names or unknown:
            raise ValueError(f"events must name some of {', '.join(EVENTS)}; not {unknown or names!r}")
        self.socket_path = socket_path
        self._buffer = b""
        self._pending: List[Tuple[str, Dict[str, Any]]] = []
        self._waited: float = timeout if timeout is not None else 0.0
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(socket_path)
        except OSError as error:
            self._sock.close()
            raise AgentNotRunning(socket_path, str(error)) from None
        request = {"jsonrpc": "2.0", "id": 1, "method": "subscribe", "params": {"events": names}}
        self._sock.sendall(json.dumps(request).encode() + b"\n")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._read(deadline, "subscribe")
            if message.get("id") == 1:
                if "error" in message:
                    from .client import AgentClient  # the client imports this module
                    self.close()
                    raise AgentClient._error("subscribe", message["error"])
                return
            self._keep(message)

    def next(self, method: Optional[str] = None, timeout: Optional[float] = 10.0) -> Dict[str, Any]:
        """The next notification's params (of ``method``, when given: others are skipped)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._waited = timeout if timeout is not None else 0.0
        while True:
            while self._pending:
                name, params = self._pending.pop(0)
                if method is None or name == method:
                    return params
            self._keep(self._read(deadline, method or "a notification"))

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _keep(self, message: Dict[str, Any]) -> None:
        name = message.get("method")
        params = message.get("params")
        if isinstance(name, str) and "id" not in message:
            self._pending.append((name, params if isinstance(params, dict) else {}))

    def _read(self, deadline: Optional[float], waiting_for: str) -> Dict[str, Any]:
        while b"\n" not in self._buffer:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AgentTimeout(self.socket_path, waiting_for, self._waited)
                self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except _socket.timeout:
                raise AgentTimeout(self.socket_path, waiting_for, self._waited) from None
            except OSError as error:
                raise AgentNotRunning(self.socket_path, str(error)) from None
            if not chunk:
                raise AgentNotRunning(self.socket_path, "the agent closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except ValueError:
            raise ProtocolError(f"not JSON from the agent: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"unexpected message from the agent: {message!r}")
        return message
