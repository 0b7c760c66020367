"""Waiting on what the agent says happened (docs/socket-api.md B.1, docs/device-clock.md H.1):
:class:`Subscription` (flag updates) and :class:`EventStream` (any events), both listeners of the
connection with queues of their own. A test waits on these, never in a sleep loop::

    with agent.events("refresh") as events:
        agent.advance_clock(3600)                       # the hourly refresh runs meanwhile
        done = events.next("refreshCompleted", timeout=5)
"""

from __future__ import annotations

import queue
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Tuple, TypeVar, Union

from ._connection import EVENTS, Connection, Listener
from .errors import AgentNotRunning, WaitTimeout
from .results import FlagsUpdate

__all__ = ["EVENTS", "EventStream", "Subscription"]

_T = TypeVar("_T")
_L = TypeVar("_L", bound="_Listening")


class ConnectionSource(Protocol):
    """What a subscription listens through: an :class:`AgentClient` (its shared connection)."""

    socket_path: str
    timeout: Optional[float]

    def _connection(self) -> Connection: ...


class _Listening:
    """A listener of ``events`` on a connection, what :class:`Subscription` and :class:`EventStream`
    share; ``call_timeout()`` bounds the subscribe and unsubscribe calls."""

    def __init__(self, events: Iterable[str], socket_path: str, call_timeout: Callable[[], Optional[float]]) -> None:
        self._listener = Listener(events)
        self._path = socket_path
        self._call_timeout = call_timeout
        self._conn: Optional[Connection] = None
        self._owned: Optional[Connection] = None  # a connection of its own, closed with it
        self._closed = False

    def _listen(self, conn: Connection) -> None:
        try:
            conn.listen(self._listener, self._call_timeout())
        except BaseException:
            if self._owned is not None:
                self._owned.close()
            raise
        self._conn = conn

    def close(self) -> None:
        """Stops listening (the agent is unsubscribed once no other listener remains)."""
        self._closed = True
        if self._conn is not None:
            self._conn.unlisten(self._listener, self._call_timeout())
        self._listener.end()
        if self._owned is not None:
            self._owned.close()

    def __enter__(self: _L) -> _L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self, timeout: Optional[float], what: str, pick: Callable[[str, Any], Optional[_T]],
              closed: Callable[[], BaseException]) -> _T:
        """The first notification ``pick`` accepts within ``timeout`` (``closed()`` raised at the end); a
        :class:`WaitTimeout` naming ``what`` and the notifications that came instead."""
        deadline = None if timeout is None else time.monotonic() + timeout
        skipped: List[Tuple[str, Any]] = []
        while True:
            try:
                item = self._listener.take(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                waited = timeout if timeout is not None else 0.0
                counts = Counter(name for name, _ in skipped)
                came = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items())
                text = f"no '{what}' from pushwoosh-agentd on {self._path} within {waited:g} s " \
                    + (f"(other notifications came: {came})" if came else "(no notification came)")
                raise WaitTimeout(self._path, what, waited, text,
                                  seen=[p if isinstance(p, dict) else {} for _, p in skipped]) from None
            if item is None:
                raise closed()
            picked = pick(*item)
            if picked is not None:
                return picked
            skipped.append(item)


class Subscription(_Listening):
    """Flag updates (:meth:`AgentClient.subscribe`), in order, none lost; subscribed by ``with``::

        with client.subscribe() as updates:
            for update in updates:        # blocks until an update arrives
                print(update.reason, update.changed)

    Iteration ends when it is closed and raises :class:`AgentNotRunning` when the connection is
    lost; ``timeout`` bounds each ``next()`` (:class:`AgentTimeout`), :meth:`get` takes its own."""

    def __init__(self, client: ConnectionSource, timeout: Optional[float] = None) -> None:
        super().__init__(["flags"], client.socket_path, lambda: client.timeout)
        self._client = client
        self.timeout = timeout

    def open(self) -> "Subscription":
        """Subscribes (done by ``with``); returns self."""
        if self._conn is not None or self._closed:
            raise ValueError("a subscription is opened once")
        self._listen(self._client._connection())
        return self

    def __enter__(self) -> "Subscription":
        return self.open()

    def __iter__(self) -> Iterator[FlagsUpdate]:
        return self

    def __next__(self) -> FlagsUpdate:
        return self.get(self.timeout)

    def get(self, timeout: Optional[float] = None) -> FlagsUpdate:
        """The next update (:class:`AgentTimeout` after ``timeout`` seconds; ``StopIteration`` once closed)."""
        return self._take(timeout, EVENTS["flags"], lambda _, params: FlagsUpdate.from_params(params), StopIteration)

    @property
    def backlog(self) -> int:
        """How many updates have arrived and not been read yet."""
        return self._listener.backlog

    def drain(self) -> List[FlagsUpdate]:
        """The updates already received, without waiting."""
        updates = (FlagsUpdate.from_params(params) for _, params in self._listener.drain())
        return [update for update in updates if update is not None]


class EventStream(_Listening):
    """Notifications of ``events`` (``flags``, ``refresh``, ``state``) in arrival order, subscribed
    when constructed, on a connection of its own (``socket_path``) or an :class:`AgentClient`'s."""

    def __init__(self, socket_path: Union[str, ConnectionSource], events: Iterable[str],
                 timeout: Optional[float] = 30.0) -> None:
        names = list(events)
        unknown = [n for n in names if n not in EVENTS]
        if not names or unknown:
            raise ValueError(f"events must name some of {', '.join(EVENTS)}; not {unknown or names!r}")
        path = socket_path if isinstance(socket_path, str) else socket_path.socket_path
        super().__init__(names, path, lambda: timeout)
        self.socket_path = path
        if isinstance(socket_path, str):
            self._owned = conn = Connection(socket_path, timeout)
        else:
            conn = socket_path._connection()
        self._listen(conn)

    def next(self, method: Optional[str] = None, timeout: Optional[float] = 10.0) -> Dict[str, Any]:
        """The next notification's params (of ``method``, when given: others are skipped)."""
        def pick(name: str, params: Any) -> Optional[Dict[str, Any]]:
            if method is not None and name != method:
                return None
            return params if isinstance(params, dict) else {}
        return self._take(timeout, method or "a notification", pick,
                          lambda: AgentNotRunning(self.socket_path, "the event stream was closed"))
