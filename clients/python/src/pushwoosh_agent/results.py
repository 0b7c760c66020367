"""What the agent answers, as types (docs/socket-api.md B, docs/device-clock.md H): the flag
results as frozen dataclasses; the answers read by key (``status()["state"]``, the events'
params) as ``TypedDict`` s, plain dicts at run time. Imports only :mod:`pushwoosh_agent.errors`."""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, TypedDict, Mapping

from .errors import ProtocolError


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
    """An evaluation with its provenance (docs/socket-api.md B.1): :meth:`AgentClient.details` (a flag's bool)
    or :meth:`AgentClient.property_details` (``property``'s value). ``reason`` is ``TARGETING_MATCH``,
    ``DEFAULT``, ``DISABLED`` or ``ERROR`` (the default was returned); then ``error_code`` is ``FLAG_NOT_FOUND``,
    ``PROVIDER_NOT_READY`` (no valid flags) or ``TYPE_MISMATCH`` (a property missing or of another type)."""

    key: str
    value: Any
    reason: Optional[str]
    error_code: Optional[str] = None
    #: ``network``, ``cache`` or ``none``.
    source: Optional[str] = None
    age_seconds: Optional[float] = None
    #: The property read (:meth:`AgentClient.property_details`); None for a flag.
    property: Optional[str] = None
    #: With ``error_code``: the agent's words for it.
    error_message: Optional[str] = None

    @builtins.property  # the field ``property`` hides the builtin in the class body
    def fallback(self) -> bool:
        """Whether ``value`` is the caller's default (``reason`` ``ERROR``)."""
        return self.reason == "ERROR" or self.error_code is not None


@dataclass(frozen=True)
class FlagsUpdate:
    """One ``featureFlagsDidUpdate`` notification."""

    #: ``refresh``, ``expired`` or ``discarded``.
    reason: str
    #: The keys whose flag changed (added, removed, or any field changed).
    changed: List[str]

    @staticmethod
    def from_params(params: Any) -> Optional["FlagsUpdate"]:
        """The update a notification's params describe; None when they are not one."""
        fields = params if isinstance(params, dict) else {}
        reason, changed = fields.get("reason"), fields.get("changed")
        if not isinstance(reason, str) or not isinstance(changed, list):
            return None
        return FlagsUpdate(reason, [k for k in changed if isinstance(k, str)])


@dataclass(frozen=True)
class RefreshResult:
    """What :meth:`AgentClient.refresh` did (a failed one raises :class:`RefreshError`): ``sent``
    False when answered from the stored flags inside the throttle window (RF-6), which ends at
    ``throttled_until`` (device time, aware UTC); ``changed``: the keys whose flag it changed."""

    sent: bool
    throttled_until: Optional[datetime] = None
    changed: List[str] = field(default_factory=list)


def parse_time(text: Any, what: str) -> Optional[datetime]:
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


# Answers read by key (dicts at run time): the client checks the keys each needs (the *Required bases).


class SDKError(TypedDict):
    """A refresh's error as the SDK reports it: ``domain`` (``PWFeatureFlagsErrorDomain``),
    ``code`` (the HTTP status, 0 or 200, as :class:`RefreshError`) and ``message``."""

    domain: str
    code: int
    message: str


class StorageError(TypedDict):
    """``status()["storageError"]``: ``operation`` (``save`` or ``load``), ``message``, ``at``."""

    operation: str
    message: str
    at: str


class _StatusRequired(TypedDict):
    state: str


class Status(_StatusRequired, total=False):
    """What :meth:`AgentClient.status` returns (docs/socket-api.md B.2). ``state`` is one of
    ``notReady``, ``ready``, ``stale``, ``error``, ``fatal``; times are ISO 8601 UTC device time
    (or None), ``now`` the device's time at the answer."""

    version: str
    applicationCode: str
    hwid: str
    userId: str
    appState: str
    sessionStartedAt: Optional[str]
    pushRegistered: bool
    pushToken: Optional[str]
    notificationAuthorization: str
    flagsCount: int
    flagsSource: str
    flagsAgeSeconds: Optional[float]
    flagsExpireAt: Optional[str]
    flagsPartial: bool
    lastRefreshAt: Optional[str]
    lastRefreshError: Optional[SDKError]
    consecutiveFailures: int
    nextRefreshAt: Optional[str]
    storageError: Optional[StorageError]
    #: The trigger of the refresh of ``lastRefreshAt`` (``sessionStart``, ``periodic``, ...).
    lastRefreshTrigger: Optional[str]
    #: The device's time at the answer (its controlled clock's, when controlled).
    now: str


class _ClockRequired(TypedDict):
    now: str


class ClockInfo(_ClockRequired, total=False):
    """What :meth:`AgentClient.clock` returns (docs/device-clock.md H): the device's time ``now`` (ISO
    8601), ``offsetSeconds`` ahead of the host, ``nextTimerAt`` the earliest armed timer's (or None)."""

    offsetSeconds: float
    controlled: bool
    nextTimerAt: Optional[str]
    requestsInFlight: int


class _FiredRequired(TypedDict):
    at: str
    event: str


class FiredTimer(_FiredRequired, total=False):
    """One timer that ran on a device (``advanceClock``): ``at`` (ISO 8601, device time), ``event``
    (``refresh``, ``retry``, ``expired``, ``sessionEnd``, ...), ``trigger`` when it started a refresh."""

    trigger: str


class _AdvanceRequired(TypedDict):
    now: str
    fired: List[FiredTimer]


class DeviceClockAdvance(_AdvanceRequired, total=False):
    """What :meth:`AgentClient.advance_clock` returns: the timers that ``fired`` on the way (in order)
    and how many ``requests`` went to the server meanwhile (the lab's: :class:`pushwoosh_agent.lab.ClockAdvance`)."""

    offsetSeconds: float
    requests: int


class RefreshCompleted(TypedDict, total=False):
    """The params of ``refreshCompleted`` (:meth:`AgentClient.wait_for_refresh`): ``trigger``
    (``sessionStart``, ``periodic``, ``pushRegistration``, ``userChange``, ``manual``, ``retry``,
    ``reload``), ``error`` (None, or the SDK's), ``sent`` and the device time ``at``."""

    trigger: str
    error: Optional[SDKError]
    sent: bool
    at: str


class StateChanged(TypedDict, total=False):
    """The params of ``stateChanged``: ``state``, ``previous`` and the device time ``at``."""

    state: str
    previous: str
    at: str


def flag_details(result: Mapping[str, Any], key: str, value: Any, name: Optional[str]) -> FlagDetails:
    """A read's answer as :class:`FlagDetails`: value, reason, error code and the agent's message
    for it (``errorMessage``, docs/socket-api.md B.1), source and age."""
    code = result.get("errorCode")
    message = result.get("errorMessage")
    return FlagDetails(key=key, value=value, reason=result.get("reason"),
                       error_code=str(code) if code is not None else None, source=result.get("source"),
                       age_seconds=age_seconds(result), property=name,
                       error_message=message if isinstance(message, str) else None)


def age_seconds(result: Mapping[str, Any]) -> Optional[float]:
    """A read's ``ageSeconds`` as a float, None when it has none."""
    age = result.get("ageSeconds")
    return float(age) if isinstance(age, (int, float)) and not isinstance(age, bool) else None
