"""The emulator's request log as the client reads it: filters, a record in a line, a wait's timeout."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Dict, List, Mapping, Optional, Union

from .errors import EmulatorError

#: When a request counts from: Unix seconds, an aware datetime, or the emulator's own text.
Since = Union[None, float, int, str, _dt.datetime]


class RequestsTimeout(EmulatorError, TimeoutError):
    """``wait_for_requests`` timed out (408) with fewer than ``expected`` matching ``requests``;
    ``seen``: every request recorded, the last of them named in the message."""

    def __init__(self, method: str, url: str, message: str, requests: List[Dict[str, Any]], expected: int,
                 body: Any = None, seen: Optional[List[Dict[str, Any]]] = None) -> None:
        super().__init__(method, url, 408, message, None, body)
        self.requests = requests
        self.expected = expected
        self.seen: List[Dict[str, Any]] = list(seen or [])

    def __str__(self) -> str:  # TimeoutError (OSError) would otherwise format its args
        return str(self.args[0]) if self.args else ""


#: How many of the recorded requests a timed-out wait names.
_SEEN_NAMED = 8


def describe_request(record: Mapping[str, Any]) -> str:
    """One recorded request in a line: ``getFeatureFlags hwid=H user=U -> 503 (fault) at T``."""
    user, fault = record.get("userId"), record.get("fault")
    text = f"{record.get('method', '?')} hwid={record.get('hwid') or '-'}" + ("" if user is None else f" user={user}")
    text += f" -> {record.get('status', '?')}"
    if fault:
        text += f" (fault {fault if isinstance(fault, str) else json.dumps(fault, sort_keys=True)})"
    return text + f" at {record.get('time', '?')}"


def _since(since: Since) -> Optional[str]:
    if since is None or isinstance(since, str):
        return since
    if isinstance(since, _dt.datetime):
        if since.tzinfo is None:
            raise ValueError("since: give an aware datetime (e.g. with tzinfo=timezone.utc)")
        return repr(since.timestamp())
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return repr(float(since))
    raise TypeError(f"since: expected Unix seconds, a datetime or a string, not {since!r}")


def _filters(method: Optional[str], since: Since, hwid: Optional[str], user_id: Optional[str]) -> Dict[str, str]:
    given = {"method": method or None, "since": _since(since), "hwid": hwid, "userId": user_id}
    return {name: value for name, value in given.items() if value is not None}
