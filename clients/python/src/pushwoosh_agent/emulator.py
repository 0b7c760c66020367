"""A client of the Pushwoosh emulator's admin API (docs/emulator.md D.2 and D.3), on urllib only."""

from __future__ import annotations

import copy
import datetime as _dt
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Union, cast

from ._framing import camel_case, positive_seconds
from .errors import EmulatorError

__all__ = ["EmulatorClient", "FAULT_FIELDS", "RequestsTimeout"]

#: The fault kinds of D.2/D.3, as add_fault's keywords.
_FAULT_KINDS = ["http", "retry_after", "status_code", "body", "drop", "delay_ms", "partial", "truncate_after_bytes",
                "stall_after_headers", "reset"]
#: add_fault's keywords and the fault fields they become (the protocol's names are accepted too).
FAULT_FIELDS: Dict[str, str] = {name: camel_case(k) for k in _FAULT_KINDS for name in (k, camel_case(k))}
#: When a request counts from (emulator time): Unix seconds, an aware datetime, or ISO 8601 text.
Since = Union[None, float, int, str, _dt.datetime]
#: How many of the recorded requests a timed-out wait names.
_SEEN_NAMED = 8


class _Default:
    def __repr__(self) -> str:  # add_fault's ``times`` when not given
        return "1 (every call in the window with for_seconds)"


_DEFAULT = _Default()


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


def checked_token(admin_token: Optional[str]) -> Optional[str]:
    """``admin_token`` if it can be sent as a bearer token (or None), else a ``ValueError``."""
    if admin_token is not None and (not isinstance(admin_token, str) or not admin_token
                                    or any(c.isspace() for c in admin_token)):
        raise ValueError(f"admin_token: expected a non-empty string without spaces, not {admin_token!r}")
    return admin_token


def _segment(text: str) -> str:
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a non-empty string, not {text!r}")
    return urllib.parse.quote(text, safe="")


class EmulatorClient:
    """The admin API of a running ``pushwoosh-emulator`` at ``base_url`` (its root or ``…/json/1.3/``): ``timeout``
    seconds per HTTP request, ``ca_file`` an ``https://`` emulator's CA, ``admin_token`` (``--admin-token``, a lab's
    ``DIR/token``) sent as ``Authorization: Bearer``. An error answer raises :class:`EmulatorError`."""

    def __init__(self, base_url: str, timeout: float = 10.0, ca_file: Optional[str] = None,
                 admin_token: Optional[str] = None) -> None:
        url = base_url.strip().rstrip("/").removesuffix("/json/1.3")
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = url
        self.timeout = timeout
        self.ssl_context: Optional[ssl.SSLContext] = None
        if ca_file is not None:
            self.ssl_context = ssl.create_default_context()
            self.ssl_context.load_verify_locations(cafile=ca_file)
        self.admin_token = checked_token(admin_token)

    def __repr__(self) -> str:
        return f"EmulatorClient({self.base_url!r})"

    @property
    def server_url(self) -> str:
        """The device API URL to give the agent (``ServerURL=``)."""
        return self.base_url + "/json/1.3/"

    def _request(self, method: str, path: str, body: Any = None,
                 query: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> Any:
        url = self.base_url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.admin_token is not None:
            request.add_header("Authorization", "Bearer " + self.admin_token)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout if timeout is None else timeout,
                                        context=self.ssl_context) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            error.close()
            try:
                answer: Any = json.loads(raw) if raw else None
            except ValueError:
                answer = raw.decode("utf-8", "replace")
            fields = answer if isinstance(answer, dict) else {}
            where = fields.get("path")
            raise EmulatorError(method, url, error.code, str(fields.get("error") or answer or error.reason),
                                None if where is None else str(where), answer) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise EmulatorError(method, url, 0, f"cannot reach the emulator: {reason}") from None
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise EmulatorError(method, url, 200, f"the answer is not JSON: {text[:200]!r}") from None

    def _object(self, method: str, path: str, body: Any = None) -> Dict[str, Any]:
        return cast(Dict[str, Any], self._request(method, path, body))

    def _list(self, path: str, field: str, query: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """The list ``field`` of ``GET path``'s answer."""
        result = self._request("GET", path, query=query, timeout=timeout)
        return list(result.get(field, [])) if isinstance(result, dict) else []

    def put_app(self, definition: Mapping[str, Any]) -> Dict[str, Any]:
        """Loads or replaces an application (docs/emulator.md D.1); its ``code`` names it."""
        code = definition.get("code")
        if not isinstance(code, str):
            raise ValueError("an application definition needs a string \"code\"")
        return self._object("PUT", f"/admin/apps/{_segment(code)}", dict(definition))

    def get_app(self, code: str) -> Dict[str, Any]:
        """The application's definition as the emulator holds it."""
        return self._object("GET", f"/admin/apps/{_segment(code)}")

    def delete_app(self, code: str) -> None:
        """Removes an application (the device API then answers "Application not found")."""
        self._request("DELETE", f"/admin/apps/{_segment(code)}")

    def put_flag(self, code: str, flag: Mapping[str, Any]) -> Dict[str, Any]:
        """Adds or replaces one flag of an application; its ``key`` names it."""
        key = flag.get("key")
        if not isinstance(key, str):
            raise ValueError("a flag definition needs a string \"key\"")
        return self._object("PUT", f"/admin/apps/{_segment(code)}/flags/{_segment(key)}", dict(flag))

    def delete_flag(self, code: str, key: str) -> None:
        """Removes one flag."""
        self._request("DELETE", f"/admin/apps/{_segment(code)}/flags/{_segment(key)}")

    def _switch(self, code: str, key: str, action: str) -> Dict[str, Any]:
        return self._object("POST", f"/admin/apps/{_segment(code)}/flags/{_segment(key)}/{action}")

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

    @staticmethod
    def rollout_bucket(flag: str, user: str) -> int:
        """The emulator's rollout bucket (0-99) of ``user`` (the User ID, else the HWID) for ``flag``
        (``rolloutPercent: P`` matches below P): MurmurHash3's fmix64 of FNV-1a-64, mod 100."""
        if not isinstance(flag, str) or not isinstance(user, str):
            raise TypeError(f"rollout_bucket: flag and user must be strings, not {flag!r} and {user!r}")
        mask = (1 << 64) - 1
        h = 0xCBF29CE484222325
        for byte in flag.encode("utf-8") + b"\x00" + user.encode("utf-8"):
            h = ((h ^ byte) * 0x100000001B3) & mask
        for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
            h = ((h ^ (h >> 33)) * multiplier) & mask
        h ^= h >> 33
        return h % 100

    def set_rollout(self, code: str, flag: str, rule: str, percent: float) -> Dict[str, Any]:
        """Sets rule ``rule`` of flag ``flag`` to match ``percent`` % of users, the rest as it is;
        the stored flag. An unknown flag or rule, or a percent outside 0-100, is a ``ValueError``."""
        if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 <= percent <= 100:
            raise ValueError(f"set_rollout: percent must be a number from 0 to 100, not {percent!r}")
        # The emulator refuses a flag key or a rule id given twice: each names one.
        flags = {f.get("key"): f for f in self.get_app(code).get("flags", []) if isinstance(f, dict)}
        if flag not in flags:
            raise ValueError(f"set_rollout: application {code} has no flag {flag!r} "
                             f"(flags: {', '.join(map(str, flags))})")
        definition = copy.deepcopy(flags[flag])
        rules = {r.get("id"): r for r in definition.get("rules", []) if isinstance(r, dict)}
        if rule not in rules:
            raise ValueError(f"set_rollout: flag {flag!r} has no rule {rule!r} "
                             f"(rules: {', '.join(map(str, rules)) or 'none'})")
        rules[rule].setdefault("when", {})["rolloutPercent"] = percent
        return self.put_flag(code, definition)

    def add_fault(self, method: str, times: Union[int, None, _Default] = _DEFAULT, *, hwid: Optional[str] = None,
                  user_id: Optional[str] = None, for_seconds: Optional[float] = None,
                  probability: Optional[float] = None, seed: Optional[int] = None, **fault: Any) -> Dict[str, Any]:
        """Calls of device API ``method`` fail as the ``fault`` keywords say (:data:`FAULT_FIELDS`, docs/emulator.md
        D.2, D.3); the armed fault. Scope: ``hwid`` / ``user_id``, ``for_seconds`` (a window of emulator time),
        ``times`` (1, or every call in the window), ``probability`` with ``seed``. An unknown method is a 400."""
        if times is None and for_seconds is None:
            raise ValueError("add_fault: times=None needs for_seconds (a window instead of a count)")
        unknown = [name for name in fault if name not in FAULT_FIELDS]
        if unknown:
            raise TypeError(f"add_fault: unknown fault field {unknown[0]!r} (known: hwid, user_id, for_seconds, "
                            f"probability, seed, {', '.join(_FAULT_KINDS)})")
        if isinstance(times, _Default):
            times = 1 if for_seconds is None else None
        scope = {"method": method, "times": times, "hwid": hwid, "userId": user_id, "forSeconds": for_seconds,
                 "probability": probability, "seed": seed}
        body = {**{name: value for name, value in scope.items() if value is not None},
                **{FAULT_FIELDS[name]: value for name, value in fault.items()}}
        result = self._request("POST", "/admin/faults", body)
        return cast(Dict[str, Any], result.get("armed", result)) if isinstance(result, dict) else {}

    def faults(self) -> List[Dict[str, Any]]:
        """The faults still armed, in order, with ``remaining`` and ``until`` (None: unlimited)."""
        return self._list("/admin/faults", "faults")

    def clear_faults(self) -> None:
        """Disarms every fault."""
        self._request("DELETE", "/admin/faults")

    def requests(self, method: Optional[str] = None, since: Since = None, hwid: Optional[str] = None,
                 user_id: Optional[str] = None) -> List[Dict[str, Any]]:
        """The recorded device API calls that match the filters given (``since``: :data:`Since`), oldest first."""
        return self._list("/admin/requests", "requests", query=_filters(method, since, hwid, user_id))

    def count_requests(self, method: Optional[str] = None, *, since: Since = None, hwid: Optional[str] = None,
                       user_id: Optional[str] = None) -> int:
        """How many recorded calls match (``GET /admin/requests/count``)."""
        return int(self._request("GET", "/admin/requests/count", query=_filters(method, since, hwid, user_id))["count"])

    def wait_for_requests(self, method: Optional[str] = None, *, hwid: Optional[str] = None,
                          user_id: Optional[str] = None, since: Since = None, count: int = 1,
                          timeout: float = 10.0) -> List[Dict[str, Any]]:
        """Waits (a long poll) for ``count`` matching calls; them. :class:`RequestsTimeout` (a
        ``TimeoutError``) naming what came instead after ``timeout`` seconds (at most 300)."""
        if not isinstance(count, int) or isinstance(count, bool):
            raise TypeError(f"count must be an int, not {count!r}")
        if count < 1:
            raise ValueError(f"count must be 1 or more, not {count!r}")
        timeout = positive_seconds(timeout)
        filters = _filters(method, since, hwid, user_id)
        query = {**filters, "count": str(count), "timeout": repr(timeout)}
        try:
            return self._list("/admin/requests/wait", "requests", query, timeout=timeout + self.timeout)
        except EmulatorError as error:
            arrived = error.body.get("requests") if error.status == 408 and isinstance(error.body, dict) else None
            if not isinstance(arrived, list):
                raise
            raise self._missed(error, arrived, filters, count, float(timeout)) from None

    def _missed(self, timed_out: EmulatorError, arrived: List[Dict[str, Any]], filters: Mapping[str, str],
                count: int, timeout: float) -> RequestsTimeout:
        """A wait's 408 as a :class:`RequestsTimeout` naming what it waited for and what the emulator recorded."""
        wanted = ", ".join(f"{k}={v}" for k, v in filters.items()) or "any request"
        text = f"wait_for_requests({wanted}): {len(arrived)} of {count} matching request{'s' if count > 1 else ''}" \
            f" arrived within {timeout:g} s"
        seen: List[Dict[str, Any]] = []
        try:
            seen = self.requests(since=filters.get("since"))
        except EmulatorError as error:
            text += f"; the recorded requests could not be read ({error.message})"
        else:
            named = seen[-_SEEN_NAMED:]
            text += f"; the emulator recorded {len(seen) or 'no'} request{'s' if len(seen) > 1 else ''}" \
                + (f" since {filters['since']}" if "since" in filters else "") \
                + (f" (the last {len(named)})" if len(seen) > len(named) else "") \
                + (": " + "; ".join(map(describe_request, named)) if named else "")
        missed = RequestsTimeout(timed_out.method, timed_out.url, text, arrived, count, timed_out.body, seen)
        missed.args = (f"{text} ({timed_out.method} {timed_out.url.split('?')[0]}: HTTP 408)",)
        return missed

    def clear_requests(self) -> None:
        """Forgets the recorded calls."""
        self._request("DELETE", "/admin/requests")

    def devices(self) -> List[Dict[str, Any]]:
        """What the emulator knows per HWID: User ID, push token, events posted."""
        return self._list("/admin/devices", "devices")

    def clock(self) -> Dict[str, Any]:
        """The emulator's time: ``now`` (ISO 8601), ``unixTime``, ``offsetSeconds`` (ahead of the host)."""
        return self._object("GET", "/admin/clock")

    def advance_clock(self, seconds: float) -> Dict[str, Any]:
        """Moves the emulator's time forward by ``seconds``; returns :meth:`clock`."""
        return self._object("POST", "/admin/clock", {"advanceSeconds": seconds})

    def set_clock(self, when: Union[str, _dt.datetime]) -> Dict[str, Any]:
        """Sets the emulator's time (ISO 8601 or an aware datetime; never backwards)."""
        if isinstance(when, _dt.datetime):
            if when.tzinfo is None:
                raise ValueError("set_clock: give an aware datetime (e.g. with tzinfo=timezone.utc)")
            when = when.isoformat()
        return self._object("POST", "/admin/clock", {"set": when})

    def reset(self) -> None:
        """Back to the ``--apps`` file: faults, requests, devices and the clock offset cleared."""
        self._request("POST", "/admin/reset")

    def state(self) -> Dict[str, Any]:
        """The whole state (apps, devices with their events, clock offset) as one document."""
        return self._object("GET", "/admin/state")

    def load_state(self, document: Mapping[str, Any]) -> Dict[str, Any]:
        """Replaces the state with a :meth:`state` document (faults, requests cleared; a missing section is a 400)."""
        return self._object("PUT", "/admin/state", dict(document))
