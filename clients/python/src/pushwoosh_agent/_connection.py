"""One connection to the agent's socket: connect, pipelined calls matched by id, and the one
subscription mechanism (listeners fed by the reader thread)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import queue
import random
import socket as _socket
import struct
import threading
import time
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Tuple, Union

from ._framing import LineReader, LineTooLong, decode_line, encode_request
from .errors import PERMISSION_DENIED, AgentNotRunning, AgentTimeout, PermissionDenied, PushwooshError, agent_error

__all__ = ["EVENTS", "Connection", "Listener", "connect"]

#: The event names ``subscribe`` takes and the notification each brings (docs/socket-api.md B.1).
EVENTS: Dict[str, str] = {"flags": "featureFlagsDidUpdate", "refresh": "refreshCompleted", "state": "stateChanged"}

#: The waits between connects that meet a full backlog: from 1 ms, doubling, at most 25 ms, with jitter.
CONNECT_RETRY_FIRST = 0.001
CONNECT_RETRY_MAX = 0.025

#: Why a connect failed, by its exception (else its strerror).
_CONNECT_FAILURES = {FileNotFoundError: "no socket there", NotADirectoryError: "no socket there",
                     ConnectionRefusedError: "connection refused",
                     _socket.timeout: "connect timed out (too many pending connections)"}


def connect(path: str, timeout: Optional[float]) -> _socket.socket:
    """A connected socket to ``path`` (:class:`AgentNotRunning` or :class:`PermissionDenied`);
    ``timeout`` bounds the connect and every send. A full backlog (``EAGAIN``: a busy or flooded
    agent) is tried again until ``timeout``; nobody listening fails at once."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = CONNECT_RETRY_FIRST
    for attempts in itertools.count(1):
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
            sock.connect(path)
            break
        except OSError as error:
            sock.close()
            if isinstance(error, PermissionError):
                why = f"permission denied on {path}: join the socket's group"
                raise PermissionDenied(PERMISSION_DENIED, why) from None
            if not isinstance(error, BlockingIOError) and error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                why = _CONNECT_FAILURES.get(type(error)) or error.strerror or str(error)
                raise AgentNotRunning(path, why) from None
        now = time.monotonic()  # the backlog is full
        if deadline is not None and now >= deadline:
            raise AgentNotRunning(path, f"its backlog of pending connections stayed full for {timeout:g} s "
                                        f"({attempts} attempts; the agent is busy, or flooded)")
        wait = delay * (0.5 + random.random())
        time.sleep(wait if deadline is None else min(wait, deadline - now))
        delay = min(CONNECT_RETRY_MAX, delay * 2)
    sock.settimeout(None)
    if timeout is not None and timeout > 0:  # bounds a send to an agent that stopped reading
        timeval = struct.pack("ll", int(timeout), int(timeout % 1 * 1e6))
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, timeval)
    return sock


class _Call:
    __slots__ = ("event", "answer")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.answer: Union[Dict[str, Any], BaseException, None] = None


#: What a listener's queue holds after its last notification once it was closed.
_CLOSED = object()


class Listener:
    """The notifications of some events on one connection, in arrival order, in an unbounded queue
    of its own (none lost while the consumer is busy); then the end: closed, or the loss."""

    def __init__(self, events: Iterable[str]) -> None:
        self.events: FrozenSet[str] = frozenset(events)
        self.methods: FrozenSet[str] = frozenset(EVENTS[name] for name in self.events)
        self._queue: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self._ended = False
        self._lock = threading.Lock()

    def take(self, timeout: Optional[float]) -> Optional[Tuple[str, Any]]:
        """The next notification (method, params); None once closed; ``queue.Empty`` after
        ``timeout`` seconds; the connection's loss once that is all that is left."""
        item = self._queue.get(timeout=timeout)
        if isinstance(item, tuple):
            return item
        self._queue.put(item)  # the end stays the end
        if isinstance(item, BaseException):
            raise item
        return None

    def drain(self) -> List[Tuple[str, Any]]:
        """The notifications already received, without waiting."""
        items: List[Tuple[str, Any]] = []
        with contextlib.suppress(queue.Empty):
            while isinstance(item := self._queue.get_nowait(), tuple):
                items.append(item)
            self._queue.put(item)  # keep the end for the next take
        return items

    @property
    def backlog(self) -> int:
        """How many notifications have arrived and not been taken."""
        return max(0, self._queue.qsize() - (1 if self._ended else 0))

    def put(self, method: str, params: Any) -> None:
        with self._lock:
            if not self._ended:
                self._queue.put((method, params))

    def end(self, marker: object = _CLOSED) -> None:
        with self._lock:
            if not self._ended:
                self._ended = True
                self._queue.put(marker)


class Connection:
    """One socket and its reader thread, which hands answers to their callers by id and notifications to
    the listeners that want them; the agent is subscribed to every open listener's events."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.path = path
        self.timeout = timeout
        self._sock = connect(path, timeout)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._subscribe_lock = threading.Lock()
        self._pending: Dict[int, _Call] = {}
        self._listeners: List[Listener] = []
        self._subscribed: FrozenSet[str] = frozenset()
        self.closed_reason: Optional[str] = None
        # An unclaimed error answer with id null: the agent refused the connection (-32000) before
        # any request; later calls get it, not a bare "closed".
        self._refusal: Optional[Dict[str, Any]] = None
        self._reader = threading.Thread(target=self._read_loop, name=f"pushwoosh-agent reader ({path})",
                                        daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    def call(self, method: str, params: Mapping[str, Any], timeout: Optional[float]) -> Any:
        """Calls ``method``; its ``result``, or the error answer as an :class:`AgentError`."""
        call_id = next(self._ids)
        call = self._start(call_id, method, encode_request(call_id, method, params))
        if not call.event.wait(timeout):
            with self._lock:
                still_pending = self._pending.pop(call_id, None) is not None
            if still_pending:
                raise AgentTimeout(self.path, method, timeout if timeout is not None else 0.0)
            call.event.wait()  # answered (or failed) at this very moment
        answer = call.answer
        if isinstance(answer, BaseException):
            raise answer
        assert answer is not None
        if "error" in answer:
            raise agent_error(method, answer["error"])
        return answer.get("result")

    def _start(self, call_id: int, method: str, line: bytes) -> _Call:
        """Registers the call, then sends its line (so the answer cannot come first)."""
        call = _Call()
        with self._lock:
            if self.closed_reason is not None:
                if self._refusal is not None:
                    raise agent_error(method, self._refusal["error"])
                raise AgentNotRunning(self.path, self.closed_reason)
            self._pending[call_id] = call
        try:
            with self._send_lock:
                self._sock.sendall(line)
        except BlockingIOError:
            # SO_SNDTIMEO expired (the agent stopped reading): part of the line may be out; the next call reconnects.
            self.fail(f"a send to the agent timed out ({method})")
            raise AgentTimeout(self.path, method, self.timeout or 0.0) from None
        except OSError as error:
            # A refused connection's -32000 may have come first: the reader gives it to this call.
            if self._reader is not threading.current_thread():
                self._reader.join(1.0)
            self.fail(f"lost the connection: {error.strerror or error}")
        return call

    def listen(self, listener: Listener, timeout: Optional[float]) -> None:
        """Adds ``listener`` (subscribing the agent to its events first if new): it hears all that comes after."""
        with self._subscribe_lock:
            with self._lock:
                if self.closed_reason is not None:
                    raise AgentNotRunning(self.path, self.closed_reason)
                self._listeners.append(listener)
                wanted = self._subscribed | listener.events
            if wanted != self._subscribed:
                try:
                    self.call("subscribe", {"events": sorted(wanted)}, timeout)
                except BaseException:
                    self._drop(listener)
                    raise
                self._subscribed = wanted

    def unlisten(self, listener: Listener, timeout: Optional[float]) -> None:
        """Closes ``listener``; unsubscribes the agent when no other listener remains."""
        with self._subscribe_lock:
            if self._drop(listener) and self._subscribed and not self.closed:
                self._subscribed = frozenset()
                with contextlib.suppress(PushwooshError):
                    self.call("unsubscribe", {}, timeout)
        listener.end()

    def _drop(self, listener: Listener) -> bool:
        """Removes ``listener``; True when it was the last one."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
                return not self._listeners
            return False

    def fail(self, reason: str) -> None:
        """Marks the connection dead: every pending call and listener ends with AgentNotRunning."""
        with self._lock:
            if self.closed_reason is None:
                self.closed_reason = reason
            reason = self.closed_reason
            calls, self._pending = self._pending, {}
            listeners, self._listeners = self._listeners, []
        for call in calls.values():
            call.answer = self._refusal or AgentNotRunning(self.path, reason)
            call.event.set()
        for listener in listeners:
            listener.end(AgentNotRunning(self.path, reason))
        with contextlib.suppress(OSError):
            self._sock.shutdown(_socket.SHUT_RDWR)  # wakes the reader; it closes the socket

    def close(self, reason: str = "the client was closed") -> None:
        self.fail(reason)
        if self._reader is not threading.current_thread():
            self._reader.join(5)

    def _read_loop(self) -> None:
        lines = LineReader()
        reason = "the agent closed the connection"
        try:
            while chunk := self._sock.recv(1 << 16):
                for line in lines.feed(chunk):
                    for message in decode_line(line):
                        self._dispatch(message)
        except LineTooLong as error:
            reason = str(error)
        except OSError as error:
            reason = f"lost the connection: {error.strerror or error}"
        except BaseException as error:  # never leave callers waiting on a dead reader
            reason = f"the client's reader failed: {error!r}"
            raise
        finally:
            if self._refusal is not None:
                refused = self._refusal.get("error")
                if isinstance(refused, dict):
                    reason = f"the agent refused the connection: {refused.get('code')} {refused.get('message')}"
            self.fail(reason)
            with contextlib.suppress(OSError):
                self._sock.close()

    def _dispatch(self, message: Dict[str, Any]) -> None:
        if "id" in message and ("result" in message or "error" in message):
            ident = message["id"]
            if isinstance(ident, float) and ident.is_integer():
                ident = int(ident)
            with self._lock:
                if ident is None and len(self._pending) == 1:
                    # An unreadable request is answered with id null: with one call in flight, that one.
                    ident = next(iter(self._pending))
                elif ident is None and not self._pending and "error" in message:
                    self._refusal = message
                call = self._pending.pop(ident, None) \
                    if isinstance(ident, int) and not isinstance(ident, bool) else None
            if call is not None:
                call.answer = message
                call.event.set()
            return
        method = message.get("method")
        if isinstance(method, str) and "id" not in message:
            with self._lock:
                listeners = [listener for listener in self._listeners if method in listener.methods]
            for listener in listeners:
                listener.put(method, message.get("params"))
