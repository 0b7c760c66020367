"""A thread-safe client of pushwoosh-agentd's socket API (docs/socket-api.md B).

One :class:`AgentClient` holds one connection. Calls from any number of
threads are pipelined on it, each with its own JSON-RPC id; a reader thread
matches the answers to the callers by id and hands ``featureFlagsDidUpdate``
notifications to the open subscriptions, each of which has an unbounded queue
so that a slow consumer never loses an update.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import socket as _socket
import struct
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Union

from .events import EventStream
from .errors import (
    METHOD_NOT_FOUND,
    PERMISSION_DENIED,
    AgentError,
    AgentNotRunning,
    AgentTimeout,
    MethodNotFound,
    PermissionDenied,
    ProtocolError,
    RefreshError,
)

__all__ = [
    "AgentClient",
    "Subscription",
    "Flag",
    "FlagDetails",
    "FlagsUpdate",
    "PushRegistration",
    "PrimerResult",
    "RefreshResult",
    "PROPERTY_TYPES",
    "default_socket_path",
    "instance_socket_path",
    "resolve_socket_path",
    "DEFAULT_SOCKET_PATH",
]

#: The socket when neither ``$PUSHWOOSH_AGENT_SOCKET`` nor ``$RUNTIME_DIRECTORY`` is set.
DEFAULT_SOCKET_PATH = "/run/pushwoosh-agent/agent.sock"
#: Under this directory, instance NAME of ``pushwoosh-agent@NAME`` has ``NAME/agent.sock``.
INSTANCE_RUNTIME_ROOT = "/run/pushwoosh-agent"
#: The agent answers a longer request line with -32600 and closes the connection (docs/socket-api.md B).
MAX_REQUEST_LINE = 1 << 20
#: The longest answer line this client accepts (as pushwoosh-agentctl).
MAX_ANSWER_LINE = 64 << 20
#: ``sockaddr_un.sun_path`` holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


def default_socket_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """The socket ``pushwoosh-agentctl`` uses without ``--socket``.

    ``$PUSHWOOSH_AGENT_SOCKET`` when set, else ``$RUNTIME_DIRECTORY/agent.sock``
    (the first directory when systemd lists several), else
    ``/run/pushwoosh-agent/agent.sock`` (the socket unit's), else
    ``/run/pushwoosh-agentd/agent.sock`` when only that exists (the service binding its own).
    """
    env = os.environ if environ is None else environ
    explicit = env.get("PUSHWOOSH_AGENT_SOCKET", "")
    if explicit:
        return explicit
    runtime = env.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        return runtime.rstrip("/") + "/agent.sock" if runtime != "/" else "/agent.sock"
    return _first_existing([DEFAULT_SOCKET_PATH, "/run/pushwoosh-agentd/agent.sock"])


def instance_socket_path(name: str) -> str:
    """The socket of instance NAME (``pushwoosh-agent@NAME``, docs/fleet.md E), as
    ``pushwoosh-agentctl --instance NAME`` finds it: ``/run/pushwoosh-agent/NAME.sock``
    (``pushwoosh-agent@NAME.socket``), else ``/run/pushwoosh-agentd@NAME/agent.sock`` when
    only that exists (the instance's service binding its own socket).
    """
    if not is_instance_name(name):
        raise ValueError(f"not an instance name: {name!r} (letters, digits, '-', '_', '.'; 1-64; not starting with '.')")
    return _first_existing([f"{INSTANCE_RUNTIME_ROOT}/{name}.sock", f"/run/pushwoosh-agentd@{name}/agent.sock"])


def is_instance_name(name: str) -> bool:
    """The names ``pushwoosh-agentd --instance`` and ``pushwoosh-agentctl --instance`` accept:
    ``[A-Za-z0-9_.-]``, 1 to 64 characters, not starting with ``.`` (docs/fleet.md E)."""
    return (0 < len(name) <= 64 and not name.startswith(".")
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name))


def _first_existing(paths: List[str]) -> str:
    """The first of ``paths`` that exists, else the first."""
    return next((p for p in paths if os.path.exists(p)), paths[0])


def resolve_socket_path(socket: Optional[str] = None, instance: Optional[str] = None,
                        environ: Optional[Mapping[str, str]] = None) -> str:
    """``socket`` if given, else instance ``instance``'s socket, else :func:`default_socket_path`."""
    if socket is not None and instance is not None:
        raise ValueError("give either socket or instance, not both")
    if socket is not None:
        path = os.fspath(socket)
    elif instance is not None:
        path = instance_socket_path(instance)
    else:
        path = default_socket_path(environ)
    size = len(os.fsencode(path))
    if size == 0 or size > _MAX_SOCKET_PATH:
        raise ValueError(f"a socket path must be 1 to {_MAX_SOCKET_PATH} bytes: {path!r}")
    return path


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Flag:
    """A flag as ``get`` returns it (FF-4), with its provenance (docs/socket-api.md B.1)."""

    key: str
    is_enabled: bool
    #: The rule that decided it; ``"default"`` when none matched; ``""`` when killed.
    rule_id: str
    properties: Dict[str, Any] = field(default_factory=dict)
    #: ``TARGETING_MATCH``, ``DEFAULT`` or ``DISABLED``.
    reason: Optional[str] = None
    #: ``network`` (fetched by this agent process) or ``cache`` (loaded from disk).
    source: Optional[str] = None
    age_seconds: Optional[float] = None


@dataclass(frozen=True)
class FlagDetails:
    """An evaluation with its provenance (docs/socket-api.md B.1), as :meth:`AgentClient.details` returns it.

    ``reason`` is ``TARGETING_MATCH``, ``DEFAULT``, ``DISABLED`` or ``ERROR`` (the default was
    returned); with ``ERROR``, ``error_code`` tells ``FLAG_NOT_FOUND`` (flags are loaded but the
    key is absent) from ``PROVIDER_NOT_READY`` (no valid flags yet, expired or discarded).
    """

    key: str
    value: bool
    reason: Optional[str]
    error_code: Optional[str] = None
    #: ``network``, ``cache`` or ``none``.
    source: Optional[str] = None
    age_seconds: Optional[float] = None


@dataclass(frozen=True)
class FlagsUpdate:
    """One ``featureFlagsDidUpdate`` notification."""

    #: ``refresh``, ``expired`` or ``discarded``.
    reason: str
    #: The keys whose flag changed (added, removed, or any field changed).
    changed: List[str]


@dataclass(frozen=True)
class RefreshResult:
    """What :meth:`AgentClient.refresh` did (a failed refresh raises :class:`RefreshError`).

    ``sent`` is False when no request went to the server: the refresh was answered from
    the stored flags inside the throttle window (RF-6), and ``throttled_until`` is
    when that window ends, in device time (an aware UTC datetime; None when sent).
    ``changed`` lists the keys whose flag the refresh changed (empty when none did, and
    always when it was not sent).
    """

    sent: bool
    throttled_until: Optional[datetime] = None
    changed: List[str] = field(default_factory=list)


def _parse_time(text: Any, what: str) -> Optional[datetime]:
    """An ISO 8601 UTC time of the socket API (``2026-12-02T10:05:00Z``), or None for null."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ProtocolError(f"{what}: expected an ISO 8601 time, not {text!r}")
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise ProtocolError(f"{what}: expected an ISO 8601 time, not {text!r}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class PushRegistration:
    """The result of ``register_for_push``."""

    granted: bool
    push_token: Optional[str]


@dataclass(frozen=True)
class PrimerResult:
    """The result of ``present_push_primer``."""

    #: ``accepted``, ``declined``, ``suppressed`` or ``redirectedToSettings``.
    outcome: str
    #: The resolved style, position and visuals, or None when nothing was shown.
    presentation: Optional[Dict[str, Any]]


# ---------------------------------------------------------------------------------------------
# The connection


class _Call:
    __slots__ = ("method", "event", "answer")

    def __init__(self, method: str) -> None:
        self.method = method
        self.event = threading.Event()
        self.answer: Union[Dict[str, Any], BaseException, None] = None


_END = object()


class _Connection:
    """One socket, its reader thread and the calls waiting on it."""

    def __init__(self, path: str, timeout: Optional[float],
                 on_notification: Callable[["_Connection", str, Any], None]) -> None:
        self.path = path
        self.timeout = timeout
        self._on_notification = on_notification
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except (FileNotFoundError, NotADirectoryError):
            sock.close()
            raise AgentNotRunning(path, "no socket there") from None
        except ConnectionRefusedError:
            sock.close()
            raise AgentNotRunning(path, "connection refused") from None
        except PermissionError:
            sock.close()
            raise PermissionDenied(PERMISSION_DENIED,
                                   f"permission denied on {path}: join the socket's group") from None
        except _socket.timeout:
            sock.close()
            raise AgentNotRunning(path, "connect timed out (too many pending connections)") from None
        except OSError as error:
            sock.close()
            raise AgentNotRunning(path, error.strerror or str(error)) from None
        sock.settimeout(None)
        if timeout is not None and timeout > 0:
            # Bounds a send to an agent that stopped reading; the reader's recv stays blocking.
            seconds = int(timeout)
            tv = struct.pack("ll", seconds, int((timeout - seconds) * 1_000_000))
            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, tv)
        self._sock = sock
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.subscribe_lock = threading.Lock()
        self._pending: Dict[int, _Call] = {}
        self.subscriptions: List[Subscription] = []
        self.closed_reason: Optional[str] = None
        self._reader = threading.Thread(target=self._read_loop, name=f"pushwoosh-agent reader ({path})",
                                        daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    def start(self, call_id: int, method: str, line: bytes) -> _Call:
        """Registers the call, then sends its line (so the answer cannot come first)."""
        call = _Call(method)
        with self._lock:
            if self.closed_reason is not None:
                raise AgentNotRunning(self.path, self.closed_reason)
            self._pending[call_id] = call
        try:
            with self._send_lock:
                self._sock.sendall(line)
        except BlockingIOError:
            # SO_SNDTIMEO expired: the agent stopped reading. Part of the line may be out, so
            # the connection cannot carry another request; the next call connects again.
            self.fail(f"a send to the agent timed out ({method})")
            raise AgentTimeout(self.path, method, self.timeout or 0.0) from None
        except OSError as error:
            reason = f"lost the connection: {error.strerror or error}"
            self.fail(reason)
            raise AgentNotRunning(self.path, self.closed_reason or reason) from None
        return call

    def wait(self, call_id: int, call: _Call, timeout: Optional[float]) -> Dict[str, Any]:
        if not call.event.wait(timeout):
            with self._lock:
                still_pending = self._pending.pop(call_id, None) is not None
            if still_pending:
                raise AgentTimeout(self.path, call.method, timeout if timeout is not None else 0.0)
            call.event.wait()  # answered (or failed) at this very moment
        answer = call.answer
        if isinstance(answer, BaseException):
            raise answer
        assert answer is not None
        return answer

    def add_subscription(self, sub: "Subscription") -> bool:
        """Adds ``sub``; True when it is the first (the agent must be told)."""
        with self._lock:
            if self.closed_reason is not None:
                raise AgentNotRunning(self.path, self.closed_reason)
            self.subscriptions.append(sub)
            return len(self.subscriptions) == 1

    def remove_subscription(self, sub: "Subscription") -> bool:
        """Removes ``sub``; True when it was the last one."""
        with self._lock:
            if sub in self.subscriptions:
                self.subscriptions.remove(sub)
                return not self.subscriptions
            return False

    def fail(self, reason: str) -> None:
        """Marks the connection dead: every pending call and subscription ends with AgentNotRunning."""
        with self._lock:
            first = self.closed_reason is None
            if first:
                self.closed_reason = reason
            calls = list(self._pending.values())
            self._pending.clear()
            subs = list(self.subscriptions) if first else []
            self.subscriptions.clear()
        for call in calls:
            call.answer = AgentNotRunning(self.path, self.closed_reason or reason)
            call.event.set()
        for sub in subs:
            sub._end(AgentNotRunning(self.path, self.closed_reason or reason))
        try:
            self._sock.shutdown(_socket.SHUT_RDWR)  # wakes the reader; it closes the socket
        except OSError:
            pass

    def close(self, reason: str = "the client was closed") -> None:
        self.fail(reason)
        if self._reader is not threading.current_thread():
            self._reader.join(5)

    # -- the reader thread --

    def _read_loop(self) -> None:
        buffer = bytearray()
        reason = "the agent closed the connection"
        try:
            while True:
                try:
                    chunk = self._sock.recv(1 << 16)
                except OSError as error:
                    reason = f"lost the connection: {error.strerror or error}"
                    break
                if not chunk:
                    break
                scan = len(buffer)
                buffer += chunk
                start = 0
                while True:
                    newline = buffer.find(b"\n", scan)
                    if newline < 0:
                        break
                    self._dispatch_line(bytes(buffer[start:newline]))
                    start = scan = newline + 1
                if start:
                    del buffer[:start]
                if len(buffer) > MAX_ANSWER_LINE:
                    reason = f"an answer longer than {MAX_ANSWER_LINE} bytes"
                    break
        except BaseException as error:  # never leave callers waiting on a dead reader
            reason = f"the client's reader failed: {error!r}"
            raise
        finally:
            self.fail(reason)
            try:
                self._sock.close()
            except OSError:
                pass

    def _dispatch_line(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            return  # not JSON: nothing to route it to
        for item in message if isinstance(message, list) else [message]:
            if isinstance(item, dict):
                self._dispatch(item)

    def _dispatch(self, message: Dict[str, Any]) -> None:
        if "id" in message and ("result" in message or "error" in message):
            ident = message["id"]
            if isinstance(ident, float) and ident.is_integer():
                ident = int(ident)
            with self._lock:
                if ident is None and len(self._pending) == 1:
                    # The agent could not read a request (it answers those with id null):
                    # with one call in flight it can only be that one.
                    ident = next(iter(self._pending))
                call = self._pending.pop(ident, None) \
                    if isinstance(ident, int) and not isinstance(ident, bool) else None
            if call is not None:
                call.answer = message
                call.event.set()
            return
        method = message.get("method")
        if isinstance(method, str) and "id" not in message:
            self._on_notification(self, method, message.get("params"))

    def deliver(self, update: "FlagsUpdate") -> None:
        with self._lock:
            subs = list(self.subscriptions)
        for sub in subs:
            sub._put(update)


# ---------------------------------------------------------------------------------------------
# Subscriptions


class Subscription:
    """Flag updates, from :meth:`AgentClient.subscribe`, as a context manager and iterator.

    ::

        with client.subscribe() as updates:
            client.refresh()
            for update in updates:        # blocks until an update arrives
                print(update.reason, update.changed)

    The reader thread puts every update into this subscription's own unbounded
    queue, so none is lost while the consumer is busy; they come out in the
    order the agent sent them. Iteration ends when the subscription is closed
    (leaving the ``with`` block, or :meth:`close` from another thread) and
    raises :class:`AgentNotRunning` when the connection is lost. With
    ``timeout`` set, ``next()`` raises :class:`AgentTimeout` after that many
    seconds without an update; :meth:`get` takes a timeout per call.
    """

    def __init__(self, client: "AgentClient", timeout: Optional[float] = None) -> None:
        self._client = client
        self.timeout = timeout
        self._queue: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        self._conn: Optional[_Connection] = None
        self._closed = False
        self._ended = False  # the queue holds the end marker (or the error) once, at its end
        self._lock = threading.Lock()

    def open(self) -> "Subscription":
        """Subscribes (done by ``with``); returns self."""
        if self._conn is not None or self._closed:
            raise ValueError("a subscription is opened once")
        conn = self._client._connection()
        with conn.subscribe_lock:
            first = conn.add_subscription(self)
            self._conn = conn
            if first:
                try:
                    self._client._call_on(conn, "subscribe", {}, self._client.timeout)
                except BaseException:
                    conn.remove_subscription(self)
                    self._conn = None
                    raise
        return self

    def close(self) -> None:
        """Ends the subscription (the agent is told once no other subscription remains)."""
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn is not None:
            with conn.subscribe_lock:
                last = conn.remove_subscription(self)
                if last and not conn.closed:
                    try:
                        self._client._call_on(conn, "unsubscribe", {}, self._client.timeout)
                    except (AgentNotRunning, AgentTimeout, AgentError):
                        pass
        self._finish(_END)

    def __enter__(self) -> "Subscription":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[FlagsUpdate]:
        return self

    def __next__(self) -> FlagsUpdate:
        return self._take(self.timeout)

    def get(self, timeout: Optional[float] = None) -> FlagsUpdate:
        """The next update; raises :class:`AgentTimeout` when none arrives within ``timeout``
        seconds (None: wait as long as it takes), ``StopIteration`` once closed."""
        return self._take(timeout)

    @property
    def backlog(self) -> int:
        """How many updates have arrived and not been read yet."""
        return max(0, self._queue.qsize() - (1 if self._ended else 0))

    def drain(self) -> List[FlagsUpdate]:
        """The updates already received, without waiting."""
        updates: List[FlagsUpdate] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return updates
            if not isinstance(item, FlagsUpdate):
                self._queue.put(item)  # keep the end marker for the iterator
                return updates
            updates.append(item)

    def _take(self, timeout: Optional[float]) -> FlagsUpdate:
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AgentTimeout(self._client.socket_path, "featureFlagsDidUpdate",
                               timeout if timeout is not None else 0.0) from None
        if isinstance(item, FlagsUpdate):
            return item
        self._queue.put(item)  # the end stays the end
        if isinstance(item, BaseException):
            raise item
        raise StopIteration

    def _put(self, update: FlagsUpdate) -> None:
        if not self._closed:
            self._queue.put(update)

    def _end(self, error: BaseException) -> None:
        self._finish(error)

    def _finish(self, marker: object) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        self._queue.put(marker)


# ---------------------------------------------------------------------------------------------
# The client

_UNSET: Any = object()

#: The property types a user may type, each with the socket API's name: one vocabulary
#: (``string``, ``number``, ``bool``, ``jsonObject``, ``jsonArray``) as pushwoosh-agentctl's
#: ``property --type`` and the socket take it; ``json`` and ``json-object`` are accepted for
#: ``jsonObject``, ``json-array`` for ``jsonArray``; Python's types stand for their kind.
PROPERTY_TYPES: Dict[object, str] = {
    "string": "string", "number": "number", "bool": "bool",
    "jsonObject": "jsonObject", "json": "jsonObject", "json-object": "jsonObject",
    "jsonArray": "jsonArray", "json-array": "jsonArray",
    str: "string", float: "number", int: "number", bool: "bool", dict: "jsonObject", list: "jsonArray",
}
_PROPERTY_TYPES = PROPERTY_TYPES
_PROPERTY_SPELLINGS = "string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array)"
_SCALAR_DEFAULTS: Dict[str, Any] = {"string": "", "number": 0, "bool": False}

#: present_push_primer's pythonic keywords and the socket API's names (docs/socket-api.md B.2).
_PRIMER_NAMES = {
    "accept_button": "acceptButton", "decline_button": "declineButton",
    "fallback_to_settings": "fallbackToSettings", "min_interval": "minInterval",
    "image_url": "imageURL", "background_color": "backgroundColor",
    "background_gradient": "backgroundGradient", "title_color": "titleColor",
    "message_color": "messageColor", "accept_button_color": "acceptButtonColor",
    "accept_button_text_color": "acceptButtonTextColor", "decline_button_color": "declineButtonColor",
    "decline_button_text_color": "declineButtonTextColor", "corner_radius": "cornerRadius",
    "button_corner_radius": "buttonCornerRadius", "button_border_color": "buttonBorderColor",
}


class AgentClient:
    """A client of pushwoosh-agentd (docs/socket-api.md B, G).

    ``socket``: the socket path; ``instance``: instance NAME of
    ``pushwoosh-agent@NAME`` instead; neither: as ``pushwoosh-agentctl``
    (``$PUSHWOOSH_AGENT_SOCKET``, ``$RUNTIME_DIRECTORY/agent.sock``,
    ``/run/pushwoosh-agent/agent.sock``). ``timeout``: seconds each call
    (and the connect) may take; ``None`` waits as long as it takes.

    It connects at once (raising :class:`AgentNotRunning` when nobody
    listens) and keeps one connection, shared by every thread that uses the
    client. When the agent goes away, pending calls fail at once with
    :class:`AgentNotRunning`; the next call connects again (an agent that was
    restarted is picked up; open subscriptions are ended).

    Errors: :class:`AgentNotRunning`, :class:`AgentTimeout` (a
    ``TimeoutError``), :class:`PermissionDenied` (-32001, naming the method),
    :class:`MethodNotFound` (-32601), :class:`AgentError` (any other error
    answer, with ``code``, ``message`` and ``data``), :class:`RefreshError`
    from :meth:`refresh`; ``TypeError``/``ValueError`` for arguments that
    cannot be sent.
    """

    def __init__(self, socket: Optional[str] = None, instance: Optional[str] = None,
                 timeout: Optional[float] = 30.0) -> None:
        self.socket_path = resolve_socket_path(socket, instance)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive or None, not {timeout!r}")
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._conn: Optional[_Connection] = None
        self._closed = False
        self._connection()

    # -- lifecycle --

    def close(self) -> None:
        """Closes the connection; pending calls fail with :class:`AgentNotRunning`."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AgentClient(socket={self.socket_path!r}, timeout={self.timeout!r})"

    @property
    def connected(self) -> bool:
        """Whether the connection is open (the next call would not have to reconnect)."""
        conn = self._conn
        return conn is not None and not conn.closed

    def _connection(self) -> _Connection:
        with self._lock:
            if self._closed:
                raise ValueError("the AgentClient is closed")
            if self._conn is None or self._conn.closed:
                self._conn = _Connection(self.socket_path, self.timeout, self._notification)
            return self._conn

    def _notification(self, conn: _Connection, method: str, params: Any) -> None:
        if method != "featureFlagsDidUpdate" or not isinstance(params, dict):
            return
        reason = params.get("reason")
        changed = params.get("changed")
        if not isinstance(reason, str) or not isinstance(changed, list):
            return
        conn.deliver(FlagsUpdate(reason, [k for k in changed if isinstance(k, str)]))

    # -- the generic call --

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Optional[float] = _UNSET) -> Any:
        """Calls socket method ``method`` with ``params``; returns its ``result``.

        ``timeout`` overrides the client's for this call.
        """
        return self._call_on(self._connection(), method, params or {},
                             self.timeout if timeout is _UNSET else timeout)

    def _call_on(self, conn: _Connection, method: str, params: Mapping[str, Any],
                 timeout: Optional[float]) -> Any:
        call_id = next(self._ids)
        line = self._encode(call_id, method, params)
        call = conn.start(call_id, method, line)
        answer = conn.wait(call_id, call, timeout)
        if "error" in answer:
            raise self._error(method, answer["error"])
        return answer.get("result")

    @staticmethod
    def _encode(call_id: int, method: str, params: Mapping[str, Any]) -> bytes:
        if not isinstance(method, str) or not method:
            raise TypeError(f"method must be a non-empty string, not {method!r}")
        request = {"jsonrpc": "2.0", "id": call_id, "method": method, "params": dict(params)}
        try:
            text = json.dumps(request, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except TypeError as error:
            raise TypeError(f"{method}: the parameters are not JSON: {error}") from None
        except ValueError as error:
            raise ValueError(f"{method}: the parameters are not JSON: {error}") from None
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"{method}: a parameter is not valid Unicode (lone surrogate): {error}") from None
        if len(data) > MAX_REQUEST_LINE:
            raise ValueError(f"{method}: the request is {len(data)} bytes; the agent takes at most "
                             f"{MAX_REQUEST_LINE}")
        return data + b"\n"

    @staticmethod
    def _error(method: str, error: Any) -> AgentError:
        if not isinstance(error, dict) or not isinstance(error.get("code"), int) \
                or isinstance(error.get("code"), bool):
            return AgentError(-32603, f"unreadable error answer: {error!r}", None, method)
        code: int = error["code"]
        message = str(error.get("message", ""))
        data = error.get("data")
        if code == PERMISSION_DENIED:
            named = data.get("method") if isinstance(data, dict) else None
            return PermissionDenied(code, message, data, named if isinstance(named, str) else method)
        if code == METHOD_NOT_FOUND:
            return MethodNotFound(code, message, data, method)
        return AgentError(code, message, data, method)

    def _result(self, method: str, params: Mapping[str, Any], *keys: str,
                timeout: Optional[float] = _UNSET) -> Dict[str, Any]:
        result = self.call(method, params, timeout=timeout)
        if not isinstance(result, dict) or any(k not in result for k in keys):
            raise ProtocolError(f"{method}: unexpected result {result!r} (expected {', '.join(keys) or 'an object'})")
        return result

    # -- flags (docs/socket-api.md B.1) --

    def get(self, key: str) -> Optional[Flag]:
        """The stored flag for ``key``, or None (no valid flags, or no such key)."""
        result = self._result("get", {"key": key}, "flag")
        flag = result["flag"]
        if flag is None:
            return None
        if not isinstance(flag, dict):
            raise ProtocolError(f"get: unexpected flag {flag!r}")
        age = result.get("ageSeconds")
        return Flag(key=str(flag.get("key", key)), is_enabled=flag.get("isEnabled") is True,
                    rule_id=str(flag.get("ruleId", "")), properties=dict(flag.get("properties") or {}),
                    reason=result.get("reason"), source=result.get("source"),
                    age_seconds=float(age) if isinstance(age, (int, float)) else None)

    def is_enabled(self, key: str, default: bool = False) -> bool:
        """Whether flag ``key`` is on; ``default`` when the agent has no valid flag for it."""
        if not isinstance(default, bool):
            raise TypeError(f"default must be a bool, not {default!r}")
        return self._result("isEnabled", {"key": key, "default": default}, "enabled")["enabled"] is True

    def details(self, key: str, default: bool = False) -> FlagDetails:
        """:meth:`is_enabled` with its provenance: value, ``reason``, ``error_code``,
        ``source``, ``age_seconds`` (see :class:`FlagDetails`)."""
        if not isinstance(default, bool):
            raise TypeError(f"default must be a bool, not {default!r}")
        result = self._result("isEnabled", {"key": key, "default": default}, "enabled")
        age = result.get("ageSeconds")
        code = result.get("errorCode")
        return FlagDetails(key=key, value=result["enabled"] is True, reason=result.get("reason"),
                           error_code=str(code) if code is not None else None, source=result.get("source"),
                           age_seconds=float(age) if isinstance(age, (int, float)) and not isinstance(age, bool) else None)

    def property(self, key: str, name: str, type: Any, default: Any = None) -> Any:
        """Property ``name`` of flag ``key``, read as ``type``.

        ``type``: ``"string"``, ``"number"``, ``"bool"``, ``"jsonObject"`` (also
        ``"json"``, ``"json-object"``), ``"jsonArray"`` (also ``"json-array"``), or
        ``str``, ``float``, ``bool``, ``dict``, ``list``.
        Returns the value, else ``default``; for scalar types a missing default
        is ``""``, ``0`` or ``False`` (as ``pushwoosh-agentctl``), for the JSON
        types the result is None when absent.
        """
        try:
            wire = _PROPERTY_TYPES[type]
        except (KeyError, TypeError):
            raise ValueError(f"type must be one of {_PROPERTY_SPELLINGS}; not {type!r}") from None
        params: Dict[str, Any] = {"key": key, "property": name, "type": wire}
        if default is not None:
            params["default"] = default
        elif wire in _SCALAR_DEFAULTS:
            params["default"] = _SCALAR_DEFAULTS[wire]
        return self._result("property", params, "value")["value"]

    def refresh(self, *, timeout: Optional[float] = _UNSET) -> RefreshResult:
        """Fetches the flags now and waits for the outcome (RF-5).

        Returns a :class:`RefreshResult`: whether the request was ``sent`` or answered
        from the stored flags inside the throttle window (``throttled_until``, RF-6),
        and the keys it ``changed``. Raises :class:`RefreshError` (``code``, ``domain``,
        ``message``) when the refresh failed.
        """
        # The updates the agent sends before its answer are this refresh's changes (or
        # those of a refresh in flight that this one joined).
        with self.subscribe() as updates:
            result = self._result("refresh", {}, "error", "sent", timeout=timeout)
            heard = updates.drain()
        error = result["error"]
        if error is not None:
            if not isinstance(error, dict):
                raise ProtocolError(f"refresh: unexpected error {error!r}")
            code = error.get("code")
            raise RefreshError(code if isinstance(code, int) else -1, str(error.get("domain", "")),
                               str(error.get("message", "")))
        sent = result["sent"]
        if not isinstance(sent, bool):
            raise ProtocolError(f"refresh: unexpected sent {sent!r}")
        until = _parse_time(result.get("throttledUntil"), "refresh: throttledUntil")
        if sent and until is not None:
            raise ProtocolError(f"refresh: a sent refresh with a throttle window: {result!r}")
        changed: List[str] = []
        for update in heard:
            if update.reason == "refresh":
                changed += [key for key in update.changed if key not in changed]
        return RefreshResult(sent=sent, throttled_until=until, changed=sorted(changed) if sent else [])

    def log_impression(self, key: str) -> bool:
        """Records that the user saw flag ``key``'s feature; whether an impression was sent or queued."""
        return self._result("logImpression", {"key": key}, "logged")["logged"] is True

    # -- the headless device (docs/socket-api.md B.2) --

    def set_user_id(self, user_id: str) -> None:
        """Sets the User ID; the previous user's flags are discarded at once and a refresh follows."""
        self._result("setUserId", {"userId": user_id})

    def set_app_state(self, state: str) -> bool:
        """Moves the simulated app to ``active`` or ``background``; whether a session started."""
        return self._result("setAppState", {"state": state}, "sessionStarted")["sessionStarted"] is True

    def register_for_push(self) -> PushRegistration:
        """Registers for push notifications (the simulated prompt answers per configuration)."""
        result = self._result("registerForPushNotifications", {}, "granted", "pushToken")
        token = result["pushToken"]
        return PushRegistration(result["granted"] is True, token if isinstance(token, str) else None)

    def unregister_for_push(self) -> None:
        """Unregisters from push notifications."""
        self._result("unregisterForPushNotifications", {})

    def set_notification_authorization(self, status: str) -> None:
        """Sets the simulated authorization: ``notDetermined``, ``denied``, ``authorized``,
        ``provisional`` or ``ephemeral``."""
        self._result("setNotificationAuthorization", {"status": status})

    def present_push_primer(self, **params: Any) -> PrimerResult:
        """Presents the push primer (PR-1 to PR-5) and simulates the user's ``answer``.

        Parameters by their socket names (``title``, ``message``,
        ``acceptButton``, ``declineButton``, ``answer``, ``style``, …) or
        their snake_case spellings (``accept_button``, ``image_url``, …).
        """
        wire = {_PRIMER_NAMES.get(name, name): value for name, value in params.items()}
        result = self._result("presentPushPrimer", wire, "outcome")
        presentation = result.get("presentation")
        return PrimerResult(str(result["outcome"]), presentation if isinstance(presentation, dict) else None)

    def status(self) -> Dict[str, Any]:
        """The agent's status (docs/socket-api.md B.2): ``state``, ``version``, ``hwid``, ``userId``, …"""
        return self._result("status", {}, "state")

    def metrics(self) -> str:
        """The Prometheus text exposition (docs/http.md F.2, socket method ``metrics``).

        An agent without that method raises :class:`MethodNotFound`.
        """
        text = self._result("metrics", {}, "text")["text"]
        if not isinstance(text, str):
            raise ProtocolError(f"metrics: unexpected text {text!r}")
        return text

    # -- the device clock and events (docs/device-clock.md H) --

    def clock(self) -> Dict[str, Any]:
        """The device's time: ``now`` (ISO 8601), ``offsetSeconds``, ``controlled``.

        An agent with ``Clock=system`` raises :class:`AgentError` with code -32004.
        """
        return self._result("clock", {}, "now")

    def advance_clock(self, seconds: Optional[float] = None, to: Optional[str] = None, *,
                      timeout: Optional[float] = _UNSET) -> Dict[str, Any]:
        """Moves the controlled device clock forward by ``seconds`` or to ``to`` (ISO 8601).

        Answered once the device is quiet again: every timer due meanwhile ran at its
        own device time. The result has ``now``, ``fired`` (``at``, ``event``,
        ``trigger``) and ``requests``.
        """
        if (seconds is None) == (to is None):
            raise ValueError("advance_clock takes seconds or to, not both and not neither")
        params: Dict[str, Any] = {"seconds": seconds} if seconds is not None else {"to": to}
        return self._result("advanceClock", params, "now", "fired", timeout=timeout)

    def events(self, *names: str) -> EventStream:
        """A stream of ``names`` (``flags``, ``refresh``, ``state``) on a connection of its own,
        subscribed before this returns (see :mod:`pushwoosh_agent.events`)."""
        return EventStream(self.socket_path, names or ("flags",), self.timeout)

    def wait_for_refresh(self, timeout: float = 10.0) -> Dict[str, Any]:
        """Waits for the next refresh to complete, changed or not; its ``trigger``,
        ``error``, ``sent`` and ``at``. To catch a refresh that something you do
        starts, open :meth:`events` first."""
        with self.events("refresh") as stream:
            return stream.next("refreshCompleted", timeout)

    def wait_for_state(self, state: str, timeout: float = 10.0) -> Dict[str, Any]:
        """Returns the status once ``status()["state"]`` is ``state`` (at once if it is)."""
        with self.events("state") as stream:
            status = self.status()
            deadline = time.monotonic() + timeout
            while status.get("state") != state:
                stream.next("stateChanged", max(0.0, deadline - time.monotonic()))
                status = self.status()
            return status

    def subscribe(self, timeout: Optional[float] = None) -> Subscription:
        """Flag updates as a context manager yielding an iterator (see :class:`Subscription`).

        ``timeout`` bounds each ``next()`` (None: wait for the next update as long as it takes).
        """
        return Subscription(self, timeout)
