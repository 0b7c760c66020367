"""A client of the Pushwoosh emulator's admin API (PROTOCOL D.2), on urllib only."""

from __future__ import annotations

import datetime as _dt
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Union

from .errors import EmulatorError

__all__ = ["EmulatorClient", "FAULT_FIELDS"]

#: add_fault's keywords and the D.2 fault fields they become.
FAULT_FIELDS: Dict[str, str] = {
    "http": "http", "retry_after": "retryAfter", "status_code": "statusCode", "body": "body",
    "drop": "drop", "delay_ms": "delayMs", "partial": "partial",
    # The D.2 names themselves are accepted too.
    "retryAfter": "retryAfter", "statusCode": "statusCode", "delayMs": "delayMs",
}


def _segment(text: str) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a non-empty string, not {text!r}")
    return urllib.parse.quote(text, safe="")


class EmulatorClient:
    """The admin API of a running ``pushwoosh-emulator`` at ``base_url``.

    ``base_url`` is the emulator's root, e.g. ``http://127.0.0.1:8080`` (its
    device API URL ``…/json/1.3/`` is accepted too). ``timeout``: seconds per
    HTTP request. Every method returns the emulator's JSON answer (for the
    list calls, the list); an error answer raises :class:`EmulatorError`
    carrying the emulator's message (a 400 says what is wrong and where).
    """

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        url = base_url.strip().rstrip("/")
        if url.endswith("/json/1.3"):
            url = url[: -len("/json/1.3")]
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = url
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"EmulatorClient({self.base_url!r})"

    @property
    def server_url(self) -> str:
        """The device API URL to give the agent (``ServerURL=``)."""
        return self.base_url + "/json/1.3/"

    def _request(self, method: str, path: str, body: Any = None,
                 query: Optional[Mapping[str, str]] = None) -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            error.close()
            answer: Any
            try:
                answer = json.loads(raw) if raw else None
            except ValueError:
                answer = raw.decode("utf-8", "replace")
            message = answer.get("error") if isinstance(answer, dict) else None
            where = answer.get("path") if isinstance(answer, dict) else None
            raise EmulatorError(method, url, error.code, str(message or answer or error.reason),
                                str(where) if where is not None else None, answer) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise EmulatorError(method, url, 0, f"cannot reach the emulator: {reason}") from None
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise EmulatorError(method, url, 200, f"the answer is not JSON: {text[:200]!r}") from None

    # -- applications and flags --

    def put_app(self, definition: Mapping[str, Any]) -> Dict[str, Any]:
        """Loads or replaces an application (PROTOCOL D.1); its ``code`` names it."""
        code = definition.get("code")
        if not isinstance(code, str):
            raise ValueError("an application definition needs a string \"code\"")
        result: Dict[str, Any] = self._request("PUT", f"/admin/apps/{_segment(code)}", dict(definition))
        return result

    def get_app(self, code: str) -> Dict[str, Any]:
        """The application's definition as the emulator holds it."""
        result: Dict[str, Any] = self._request("GET", f"/admin/apps/{_segment(code)}")
        return result

    def delete_app(self, code: str) -> None:
        """Removes an application (the device API then answers "Application not found")."""
        self._request("DELETE", f"/admin/apps/{_segment(code)}")

    def put_flag(self, code: str, flag: Mapping[str, Any]) -> Dict[str, Any]:
        """Adds or replaces one flag of an application; its ``key`` names it."""
        key = flag.get("key")
        if not isinstance(key, str):
            raise ValueError("a flag definition needs a string \"key\"")
        result: Dict[str, Any] = self._request("PUT", f"/admin/apps/{_segment(code)}/flags/{_segment(key)}",
                                               dict(flag))
        return result

    def delete_flag(self, code: str, key: str) -> None:
        """Removes one flag."""
        self._request("DELETE", f"/admin/apps/{_segment(code)}/flags/{_segment(key)}")

    def _switch(self, code: str, key: str, action: str) -> Dict[str, Any]:
        result: Dict[str, Any] = self._request(
            "POST", f"/admin/apps/{_segment(code)}/flags/{_segment(key)}/{action}")
        return result

    def kill(self, code: str, key: str) -> Dict[str, Any]:
        """Kills a flag: it is served disabled, rule ``""``, default properties."""
        return self._switch(code, key, "kill")

    def unkill(self, code: str, key: str) -> Dict[str, Any]:
        """Undoes :meth:`kill`."""
        return self._switch(code, key, "unkill")

    def archive(self, code: str, key: str) -> Dict[str, Any]:
        """Archives a flag: it is left out of responses."""
        return self._switch(code, key, "archive")

    def unarchive(self, code: str, key: str) -> Dict[str, Any]:
        """Undoes :meth:`archive`."""
        return self._switch(code, key, "unarchive")

    # -- faults --

    def add_fault(self, method: str, times: int = 1, **fault: Any) -> Dict[str, Any]:
        """The next ``times`` calls of device API ``method`` fail as described.

        Keywords (PROTOCOL D.2): ``http`` (status), ``retry_after`` (with
        ``http``), ``status_code`` (envelope code with HTTP 200), ``body``
        (``"garbage"``), ``drop`` (``True``: close without answering),
        ``delay_ms``, ``partial`` (``True``). Returns the armed fault.
        """
        body: Dict[str, Any] = {"method": method, "times": times}
        for name, value in fault.items():
            if name not in FAULT_FIELDS:
                raise TypeError(f"add_fault: unknown fault field {name!r} "
                                f"(known: http, retry_after, status_code, body, drop, delay_ms, partial)")
            body[FAULT_FIELDS[name]] = value
        result: Dict[str, Any] = self._request("POST", "/admin/faults", body)
        armed: Dict[str, Any] = result.get("armed", result) if isinstance(result, dict) else {}
        return armed

    def faults(self) -> List[Dict[str, Any]]:
        """The faults still armed (``GET /admin/faults``)."""
        result = self._request("GET", "/admin/faults")
        faults: List[Dict[str, Any]] = result.get("faults", []) if isinstance(result, dict) else []
        return faults

    def clear_faults(self) -> None:
        """Disarms every fault."""
        self._request("DELETE", "/admin/faults")

    # -- what the devices did --

    def requests(self, method: Optional[str] = None,
                 since: Union[None, float, int, str, _dt.datetime] = None) -> List[Dict[str, Any]]:
        """The recorded device API calls (oldest first): ``time``, ``unixTime``, ``method``,
        ``headers``, ``body``, ``status``, ``fault``.

        ``method`` selects one device API method; ``since`` (Unix seconds, an
        aware ``datetime`` or an ISO 8601 string) the calls received at or after it.
        """
        query: Dict[str, str] = {}
        if method:
            query["method"] = method
        if since is not None:
            if isinstance(since, _dt.datetime):
                if since.tzinfo is None:
                    raise ValueError("since: give an aware datetime (e.g. with tzinfo=timezone.utc)")
                query["since"] = repr(since.timestamp())
            elif isinstance(since, (int, float)) and not isinstance(since, bool):
                query["since"] = repr(float(since))
            elif isinstance(since, str):
                query["since"] = since
            else:
                raise TypeError(f"since: expected Unix seconds, a datetime or a string, not {since!r}")
        result = self._request("GET", "/admin/requests", query=query)
        recorded: List[Dict[str, Any]] = result.get("requests", []) if isinstance(result, dict) else []
        return recorded

    def clear_requests(self) -> None:
        """Forgets the recorded calls."""
        self._request("DELETE", "/admin/requests")

    def devices(self) -> List[Dict[str, Any]]:
        """What the emulator knows per HWID: User ID, push token, events posted."""
        result = self._request("GET", "/admin/devices")
        devices: List[Dict[str, Any]] = result.get("devices", []) if isinstance(result, dict) else []
        return devices
