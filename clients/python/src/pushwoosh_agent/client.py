"""A thread-safe client of pushwoosh-agentd's socket API (docs/socket-api.md B): one connection
(:mod:`pushwoosh_agent._connection`) whose calls, from any thread, are pipelined by JSON-RPC id,
its notifications handed to the open subscriptions and event streams (:mod:`pushwoosh_agent.events`)."""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, cast

from ._connection import Connection
from ._framing import camel_case, positive_seconds
from .errors import (AgentError, AgentTimeout, FallbackError, FallbackWarning, ProtocolError, PushwooshError,
                     RefreshError, WaitTimeout)
from .events import EventStream, Subscription
from .paths import resolve_socket_path
from .results import (ClockInfo, DeviceClockAdvance, Flag, FlagDetails, PrimerResult, PushRegistration,
                      RefreshCompleted, RefreshResult, Status, age_seconds, flag_details, parse_time)

__all__ = ["AgentClient", "PROPERTY_TYPES", "STATES"]

_UNSET: Any = object()

#: The property types a user may give, each with the socket's name (``pushwoosh-agentctl property
#: --type``'s vocabulary, with ``json``, ``json-object`` and ``json-array``, and Python's types).
PROPERTY_TYPES: Dict[object, str] = {
    "string": "string", "number": "number", "bool": "bool",
    "jsonObject": "jsonObject", "json": "jsonObject", "json-object": "jsonObject",
    "jsonArray": "jsonArray", "json-array": "jsonArray",
    str: "string", float: "number", int: "number", bool: "bool", dict: "jsonObject", list: "jsonArray",
}
_PROPERTY_SPELLINGS = "string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array)"
_SCALAR_DEFAULTS: Dict[str, Any] = {"string": "", "number": 0, "bool": False}

#: The values of ``status()["state"]`` (docs/socket-api.md B.2), what :meth:`AgentClient.wait_for_state` waits for.
STATES = ("notReady", "ready", "stale", "error", "fatal")


def _typed(method: str, result: Mapping[str, Any], key: str, kind: Any) -> Any:
    """``result[key]``, checked to be a ``kind`` (else :class:`ProtocolError`)."""
    value = result[key]
    if not isinstance(value, kind):
        raise ProtocolError(f"{method}: unexpected {key} {value!r}")
    return value


class AgentClient:
    """A client of pushwoosh-agentd (docs/socket-api.md B, G; the package's README has the reference).

    ``socket``: the socket path, or ``instance``: NAME of ``pushwoosh-agent@NAME``, else as
    ``pushwoosh-agentctl`` finds it; ``timeout``: seconds the connect and each call may take (None:
    no limit). It connects at once (:class:`AgentNotRunning` when nobody listens); when the agent
    goes away pending calls fail at once, and the next call connects again. A read answered with the
    caller's default warns (:class:`FallbackWarning`), or with ``strict=True`` raises :class:`FallbackError`."""

    def __init__(self, socket: Optional[str] = None, instance: Optional[str] = None,
                 timeout: Optional[float] = 30.0, strict: bool = False) -> None:
        self.socket_path = resolve_socket_path(socket, instance)
        if timeout is not None:
            positive_seconds(timeout, "positive or None")
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False, not {strict!r}")
        self.timeout = timeout
        self.strict = strict  #: whether a read answered with the default raises (else warns)
        self._lock = threading.Lock()
        self._conn: Optional[Connection] = None
        self._closed = False
        self._connection()

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
        strict = ", strict=True" if self.strict else ""
        return f"AgentClient(socket={self.socket_path!r}, timeout={self.timeout!r}{strict})"

    @property
    def connected(self) -> bool:
        """Whether the connection is open (the next call would not have to reconnect)."""
        conn = self._conn
        return conn is not None and not conn.closed

    def _connection(self) -> Connection:
        with self._lock:
            if self._closed:
                raise ValueError("the AgentClient is closed")
            if self._conn is None or self._conn.closed:
                self._conn = Connection(self.socket_path, self.timeout)
            return self._conn

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Optional[float] = _UNSET) -> Any:
        """Calls socket method ``method`` with ``params``; its ``result`` (``timeout``: this call's)."""
        return self._connection().call(method, params or {}, self.timeout if timeout is _UNSET else timeout)

    def _result(self, method: str, params: Mapping[str, Any], *keys: str,
                timeout: Optional[float] = _UNSET, on: Optional[Connection] = None) -> Dict[str, Any]:
        """``method``'s result, checked to be an object with ``keys``; on connection ``on`` if given."""
        conn = on if on is not None else self._connection()
        result = conn.call(method, params, self.timeout if timeout is _UNSET else timeout)
        if not isinstance(result, dict) or any(k not in result for k in keys):
            raise ProtocolError(f"{method}: unexpected result {result!r} (expected {', '.join(keys) or 'an object'})")
        return result

    # -- flags (docs/socket-api.md B.1) --

    def get(self, key: str) -> Optional[Flag]:
        """The stored flag for ``key``, or None (no valid flags, or no such key)."""
        result = self._result("get", {"key": key}, "flag")
        flag = _typed("get", result, "flag", (dict, type(None)))
        if flag is None:
            return None
        return Flag(key=str(flag.get("key", key)), is_enabled=flag.get("isEnabled") is True,
                    rule_id=str(flag.get("ruleId", "")), properties=dict(flag.get("properties") or {}),
                    reason=result.get("reason"), source=result.get("source"),
                    age_seconds=age_seconds(result))

    def is_enabled(self, key: str, default: bool = False) -> bool:
        """Whether flag ``key`` is on; ``default`` when the agent has no valid flag for it (with
        a :class:`FallbackWarning`, or :class:`FallbackError` when strict)."""
        return bool(self._unless_fallback(lambda: f"is_enabled({key!r})", self.details(key, default)))

    def details(self, key: str, default: bool = False) -> FlagDetails:
        """:meth:`is_enabled` with its provenance (:class:`FlagDetails`); a fallback as data, never a warning."""
        if not isinstance(default, bool):
            raise TypeError(f"default must be a bool, not {default!r}")
        result = self._result("isEnabled", {"key": key, "default": default}, "enabled")
        return flag_details(result, key, result["enabled"] is True, None)

    def property(self, key: str, name: str, type: Any, default: Any = None) -> Any:
        """Property ``name`` of flag ``key`` read as ``type`` (:data:`PROPERTY_TYPES`), else
        ``default`` (for a scalar type ``""``, ``0`` or ``False`` when not given, as
        ``pushwoosh-agentctl``; None for the JSON types), with a :class:`FallbackWarning`
        (:class:`FallbackError` when strict) that tells a missing property from a mistyped one."""
        details = self.property_details(key, name, type, default)
        return self._unless_fallback(lambda: f"property({key!r}, {name!r}, {self._type_name(type)!r})", details)

    def property_details(self, key: str, name: str, type: Any, default: Any = None) -> FlagDetails:
        """:meth:`property` with its provenance (:class:`FlagDetails`), as :meth:`details`."""
        wire = self._type_name(type)
        default = _SCALAR_DEFAULTS.get(wire) if default is None else default
        params: Dict[str, Any] = {"key": key, "property": name, "type": wire}
        if default is not None:
            params["default"] = default
        result = self._result("property", params, "value")
        return flag_details(result, key, result["value"], name)

    @staticmethod
    def _type_name(type: Any) -> str:
        """The socket's name of a property type as a user may give it (:data:`PROPERTY_TYPES`)."""
        try:
            return PROPERTY_TYPES[type]
        except (KeyError, TypeError):
            raise ValueError(f"type must be one of {_PROPERTY_SPELLINGS}; not {type!r}") from None

    def _unless_fallback(self, call: Callable[[], str], details: FlagDetails) -> Any:
        """``details.value``; a fallback (the default returned) warns at the read's caller, or raises when strict
        (``call()`` names the read: made only then, not on every read)."""
        if not details.fallback:
            return details.value
        code = details.error_code or "ERROR"
        message = details.error_message or "the agent answered with the caller's default"
        text = f"{call()}: {code}: {message}; returned the default {details.value!r}"
        if self.strict:
            raise FallbackError(text, code, details.key, details.property, details.value, message)
        warnings.warn(FallbackWarning(text, code, details.key, details.property, details.value, message), stacklevel=3)
        return details.value

    def refresh(self, *, timeout: Optional[float] = _UNSET) -> RefreshResult:
        """Fetches the flags now and waits for the outcome (RF-5): a :class:`RefreshResult`, or
        :class:`RefreshError` when it failed."""
        # The updates the agent sends before its answer are this refresh's changes (or those of
        # the refresh in flight it joined), heard on the subscription's own connection.
        with self.subscribe() as updates:
            result = self._result("refresh", {}, "error", "sent", timeout=timeout, on=updates._conn)
            heard = updates.drain()
        error = _typed("refresh", result, "error", (dict, type(None)))
        if error is not None:
            code = error.get("code")
            raise RefreshError(code if isinstance(code, int) else -1, str(error.get("domain", "")),
                               str(error.get("message", "")))
        sent = _typed("refresh", result, "sent", bool)
        until = parse_time(result.get("throttledUntil"), "refresh: throttledUntil")
        if sent and until is not None:
            raise ProtocolError(f"refresh: a sent refresh with a throttle window: {result!r}")
        changed = {key for update in heard if update.reason == "refresh" for key in update.changed}
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
        """Presents the push primer (PR-1 to PR-5) and simulates the user's ``answer``; parameters
        by their socket names (``acceptButton``) or in snake_case (``accept_button``, ``image_url``)."""
        wire = {camel_case(name): value for name, value in params.items()}
        result = self._result("presentPushPrimer", wire, "outcome")
        presentation = result.get("presentation")
        return PrimerResult(str(result["outcome"]), presentation if isinstance(presentation, dict) else None)

    def status(self) -> Status:
        """The agent's status (docs/socket-api.md B.2): ``state``, ``version``, ``hwid``, ``userId``, …
        (a :class:`Status`, a dict)."""
        return cast(Status, self._result("status", {}, "state"))

    def metrics(self) -> str:
        """The Prometheus text exposition (docs/http.md F.2)."""
        return cast(str, _typed("metrics", self._result("metrics", {}, "text"), "text", str))

    # -- the device clock and events (docs/device-clock.md H) --

    def clock(self) -> ClockInfo:
        """The device's time (a :class:`ClockInfo`); with ``Clock=system`` an :class:`AgentError` -32004."""
        return cast(ClockInfo, self._result("clock", {}, "now"))

    def advance_clock(self, seconds: Optional[float] = None, to: Optional[str] = None, *,
                      timeout: Optional[float] = _UNSET) -> DeviceClockAdvance:
        """Moves the controlled device clock forward by ``seconds`` or to ``to`` (ISO 8601), every
        timer due meanwhile run at its own device time (a :class:`DeviceClockAdvance`)."""
        if (seconds is None) == (to is None):
            raise ValueError("advance_clock takes seconds or to, not both and not neither")
        params: Dict[str, Any] = {"seconds": seconds} if seconds is not None else {"to": to}
        return cast(DeviceClockAdvance, self._result("advanceClock", params, "now", "fired", timeout=timeout))

    def events(self, *names: str) -> EventStream:
        """A stream of ``names`` (``flags``, ``refresh``, ``state``) on the client's connection,
        subscribed before this returns (see :mod:`pushwoosh_agent.events`)."""
        return EventStream(self, names or ("flags",), self.timeout)

    def wait_for_refresh(self, timeout: float = 10.0) -> RefreshCompleted:
        """The next completed refresh (open :meth:`events` first to catch one you cause); a
        :class:`WaitTimeout` naming the last refresh, the state and the next due, if none comes."""
        timeout = positive_seconds(timeout, "a positive number of seconds")
        with self.events("refresh") as stream:
            try:
                return cast(RefreshCompleted, stream.next("refreshCompleted", timeout))
            except AgentTimeout:
                pass
        text = f"no refresh completed on pushwoosh-agentd on {self.socket_path} within {timeout:g} s; "
        status: Optional[Status] = None
        try:
            status = self.status()
            text += _describe_refreshes(status, self._clock_controlled())
        except PushwooshError:
            text += "the agent's status could not be read"
        raise WaitTimeout(self.socket_path, "refreshCompleted", timeout, text, cast(Optional[Dict[str, Any]], status))

    def _clock_controlled(self) -> Optional[bool]:
        """Whether the device clock is controlled (None: not known)."""
        try:
            return self.clock().get("controlled") is True
        except AgentError:  # -32004 with Clock=system; an older agent
            return False
        except PushwooshError:
            return None

    def wait_for_state(self, state: str, timeout: float = 10.0) -> Status:
        """The status once its state is ``state`` (one of :data:`STATES`); a :class:`WaitTimeout`
        naming the state it is in, the changes seen and the last refresh, if not in time."""
        if not isinstance(state, str) or not state:
            raise TypeError(f"state must be a state's name ({', '.join(STATES)}), not {state!r}")
        timeout = positive_seconds(timeout, "a positive number of seconds")
        seen: List[Dict[str, Any]] = []
        with self.events("state") as stream:
            status = self.status()
            deadline = time.monotonic() + timeout
            while status.get("state") != state and time.monotonic() < deadline:
                try:
                    seen.append(stream.next("stateChanged", deadline - time.monotonic()))
                except AgentTimeout:
                    pass
                status = self.status()
        if status.get("state") == state:
            return status
        changes = ", ".join(f"{c.get('previous', '?')} -> {c.get('state', '?')} at {c.get('at', '?')}" for c in seen)
        unknown = "" if state in STATES else f" ({state!r} is none of the states it reports: {', '.join(STATES)})"
        text = f"pushwoosh-agentd on {self.socket_path} did not reach state {state!r}{unknown} within {timeout:g} s: " \
            f"it is {status.get('state')!r}" + (f" (changes seen: {changes})" if seen else " (no state change seen)") \
            + "; " + _describe_refreshes(status)
        raise WaitTimeout(self.socket_path, "stateChanged", timeout, text, cast(Dict[str, Any], status), seen)

    def subscribe(self, timeout: Optional[float] = None) -> Subscription:
        """Flag updates, a context manager and iterator (:class:`Subscription`); ``timeout`` bounds each ``next()``."""
        return Subscription(self, timeout)


def _describe_refreshes(status: Mapping[str, Any], controlled: Optional[bool] = None) -> str:
    """The last refresh (device time, trigger, outcome), the state, the next refresh."""
    at = status.get("lastRefreshAt")
    if at is None:
        text = "no refresh has completed yet"
    else:
        error = status.get("lastRefreshError")
        outcome = "succeeded" if error is None else "failed"
        if isinstance(error, dict):
            outcome += f": {error.get('code', '?')} {error.get('message', '')}".rstrip()
        trigger = status.get("lastRefreshTrigger")
        text = f"the last refresh: at {at} (device time)" + (f", trigger {trigger}" if trigger else "") + f", {outcome}"
        failures = status.get("consecutiveFailures")
        if isinstance(failures, int) and failures > 1:
            text += f" ({failures} failures in a row)"
    text += f"; state {status.get('state')!r}"
    now = status.get("now")
    if now is not None:
        text += f", device time {now}"
    following = status.get("nextRefreshAt")
    if following is not None:
        text += f"; the next refresh is due at {following}"
        if controlled:
            text += " (the device clock is controlled: advance_clock moves it)"
    elif status.get("appState") == "background":
        text += "; no refresh is due (the app is in the background)"
    return text
