"""``AgentClient.wait_for_refresh`` and ``wait_for_state``, and what one that timed out tells."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Protocol, cast

from .errors import AgentError, AgentTimeout, PushwooshError, WaitTimeout
from .events import EventStream
from .results import ClockInfo, RefreshCompleted, Status


class _Agent(Protocol):
    """What a wait asks of the client (:class:`~pushwoosh_agent.AgentClient`)."""
    socket_path: str

    def events(self, *names: str) -> EventStream: ...
    def status(self) -> Status: ...
    def clock(self) -> ClockInfo: ...


#: The values of ``status()["state"]`` (docs/socket-api.md B.2), what :meth:`AgentClient.wait_for_state` waits for.
STATES = ("notReady", "ready", "stale", "error", "fatal")


def wait_for_refresh(client: _Agent, timeout: float) -> RefreshCompleted:
    timeout = _wait_timeout(timeout)
    with client.events("refresh") as stream:
        try:
            return cast(RefreshCompleted, stream.next("refreshCompleted", timeout))
        except AgentTimeout:
            pass
    text = f"no refresh completed on pushwoosh-agentd on {client.socket_path} within {timeout:g} s; "
    status: Optional[Status] = None
    try:
        status = client.status()
        text += _describe_refreshes(status, _controlled_clock(client))
    except PushwooshError:
        text += "the agent's status could not be read"
    raise WaitTimeout(client.socket_path, "refreshCompleted", timeout, text, cast(Optional[Dict[str, Any]], status))


def wait_for_state(client: _Agent, state: str, timeout: float) -> Status:
    if not isinstance(state, str) or not state:
        raise TypeError(f"state must be a state's name ({', '.join(STATES)}), not {state!r}")
    timeout = _wait_timeout(timeout)
    seen: List[Dict[str, Any]] = []
    with client.events("state") as stream:
        status = client.status()
        deadline = time.monotonic() + timeout
        while status.get("state") != state and time.monotonic() < deadline:
            try:
                seen.append(stream.next("stateChanged", deadline - time.monotonic()))
            except AgentTimeout:
                pass
            status = client.status()
    if status.get("state") == state:
        return status
    changes = ", ".join(f"{c.get('previous', '?')} -> {c.get('state', '?')} at {c.get('at', '?')}" for c in seen)
    unknown = "" if state in STATES else f" ({state!r} is none of the states it reports: {', '.join(STATES)})"
    text = f"pushwoosh-agentd on {client.socket_path} did not reach state {state!r}{unknown} within {timeout:g} s: " \
        f"it is {status.get('state')!r}" + (f" (changes seen: {changes})" if seen else " (no state change seen)") \
        + "; " + _describe_refreshes(status)
    raise WaitTimeout(client.socket_path, "stateChanged", timeout, text, cast(Dict[str, Any], status), seen)


def _controlled_clock(client: _Agent) -> Optional[bool]:
    """Whether the device clock is controlled (None: not known)."""
    try:
        return client.clock().get("controlled") is True
    except AgentError:  # -32004 with Clock=system; an older agent
        return False
    except PushwooshError:
        return None


def _wait_timeout(timeout: Any) -> float:
    """A wait's timeout, checked: a positive number of seconds."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


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
