"""The emulator's request log as the client reads it: its filters (``since``, ``hwid``, …), one
record in a line, and the timeout of a wait for requests."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Dict, List, Mapping, Optional, Union

from .errors import EmulatorError


#: When a request counts from: Unix seconds, an aware datetime, or the emulator's own text.
Since = Union[None, float, int, str, _dt.datetime]


class RequestsTimeout(EmulatorError, TimeoutError):
    """``wait_for_requests`` timed out (the emulator's 408): fewer than ``expected``
    matching requests arrived; ``requests`` holds those that did, ``seen`` the requests the
    emulator recorded in all (the message names the last of them: method, HWID, User ID,
    status, fault and time), so a wait that missed says what came instead."""

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
    text = f"{record.get('method', '?')} hwid={record.get('hwid') or '-'}"
    if record.get("userId") is not None:
        text += f" user={record.get('userId')}"
    text += f" -> {record.get('status', '?')}"
    fault = record.get("fault")
    if fault:
        text += f" (fault {json.dumps(fault, sort_keys=True) if not isinstance(fault, str) else fault})"
    return text + f" at {record.get('time', '?')}"


def _since(since: Since) -> Optional[str]:
    if since is None:
        return None
    if isinstance(since, _dt.datetime):
        if since.tzinfo is None:
            raise ValueError("since: give an aware datetime (e.g. with tzinfo=timezone.utc)")
        return repr(since.timestamp())
    if isinstance(since, (int, float)) and not isinstance(since, bool):
        return repr(float(since))
    if isinstance(since, str):
        return since
    raise TypeError(f"since: expected Unix seconds, a datetime or a string, not {since!r}")


def _filters(method: Optional[str], since: Since, hwid: Optional[str], user_id: Optional[str]) -> Dict[str, str]:
    query: Dict[str, str] = {}
    if method:
        query["method"] = method
    text = _since(since)
    if text is not None:
        query["since"] = text
    if hwid is not None:
        query["hwid"] = hwid
    if user_id is not None:
        query["userId"] = user_id
    return query
