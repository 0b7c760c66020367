"""The exceptions of :mod:`pushwoosh_agent`.

Every exception raised on purpose by this package derives from
:class:`PushwooshError`::

    PushwooshError
    ├── AgentNotRunning      no agent on the socket, or it went away mid-call
    ├── AgentTimeout         no answer in time (also a TimeoutError)
    │   └── WaitTimeout      a wait_for_* ended first: what it saw last
    ├── ProtocolError        the agent's answer could not be read
    ├── FallbackError        a strict client's read answered with the caller's default
    ├── AgentError           a JSON-RPC error answer: code, message, data
    │   ├── PermissionDenied -32001: the caller may not call the method
    │   └── MethodNotFound   -32601: the agent does not know the method
    ├── RefreshError         refresh() completed with an SDK error
    └── EmulatorError        the emulator's admin API answered an error

Arguments that cannot be sent (not JSON, a lone surrogate, over the agent's 1 MiB line) raise
``TypeError`` or ``ValueError``. A read answered with the caller's default warns with
:class:`FallbackWarning` (a ``UserWarning``), or from a ``strict=True`` client raises :class:`FallbackError`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

#: JSON-RPC error codes of the agent (docs/socket-api.md B, B.3).
PERMISSION_DENIED = -32001
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


class PushwooshError(Exception):
    """Base class of every exception this package raises on purpose."""


class AgentNotRunning(PushwooshError):
    """No agent on ``socket_path``: the connect failed, or the agent went away (failing every pending call at once)."""

    def __init__(self, socket_path: str, reason: str) -> None:
        self.socket_path, self.reason = socket_path, reason
        super().__init__(f"pushwoosh-agentd is not running on {socket_path}: {reason}")


class AgentTimeout(PushwooshError, TimeoutError):
    """No answer to ``method`` within ``timeout`` seconds (a ``TimeoutError``); the connection stays
    usable, a late answer is dropped."""

    def __init__(self, socket_path: str, method: str, timeout: float) -> None:
        self.socket_path, self.method, self.timeout = socket_path, method, timeout
        super().__init__(f"no answer from pushwoosh-agentd on {socket_path} to '{method}' within {timeout:g} s")


class WaitTimeout(AgentTimeout):
    """A wait ended before what it waited for came; the message says what it saw last. ``last_status``:
    ``status()`` at the end (None if unreadable); ``seen``: the notifications' params meanwhile, oldest first."""

    def __init__(self, socket_path: str, method: str, timeout: float, message: str,
                 last_status: Optional[Dict[str, Any]] = None, seen: Optional[List[Dict[str, Any]]] = None) -> None:
        super().__init__(socket_path, method, timeout)
        self.args = (message,)
        self.last_status = last_status
        self.seen: List[Dict[str, Any]] = list(seen or [])


class _Fallback(Exception):
    """A read answered with the caller's default: ``code`` (``FLAG_NOT_FOUND``, ``TYPE_MISMATCH``,
    ``PROVIDER_NOT_READY``), ``key``, ``property`` (None for a flag), ``value`` (the default
    returned) and ``message`` (the agent's words). The text names them all and the call."""

    def __init__(self, text: str, code: str, key: str, property: Optional[str] = None,
                 value: Any = None, message: str = "") -> None:
        super().__init__(text)
        self.code = code
        self.key = key
        self.property = property
        self.value = value
        self.message = message


class FallbackWarning(_Fallback, UserWarning):
    """A read returned the caller's default (``reason`` ``ERROR``): what a client not strict emits."""


class FallbackError(_Fallback, PushwooshError):
    """:class:`FallbackWarning`, raised by a client made with ``strict=True`` (or ``--pushwoosh-strict``)."""


class ProtocolError(PushwooshError):
    """The agent sent something this client cannot read (not JSON-RPC, wrong shape, too long)."""


class AgentError(PushwooshError):
    """A JSON-RPC error answer (docs/socket-api.md B): ``code``, ``message`` and ``data``."""

    def __init__(self, code: int, message: str, data: Any = None, method: Optional[str] = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        self.method = method
        super().__init__(f"{code}: {message}" if method is None else f"{method}: {code}: {message}")


class PermissionDenied(AgentError):
    """-32001 (docs/socket-api.md B.3): ``method`` needs root, the agent's user or ControlGroup; with
    ``method`` None, the socket refused the connection (not in its group)."""


class MethodNotFound(AgentError):
    """Error -32601: the agent does not know ``method`` (an older agent)."""


class RefreshError(PushwooshError):
    """``refresh()`` completed with an error (RF-7): ``code`` the HTTP status, ``0`` without a
    response, ``200`` when the answer was unusable; ``domain`` ``PWFeatureFlagsErrorDomain``."""

    def __init__(self, code: int, domain: str, message: str) -> None:
        self.code, self.domain, self.message = code, domain, message
        super().__init__(f"refresh failed: {domain} {code}: {message}")


class EmulatorError(PushwooshError):
    """The emulator answered ``status`` (0: unreachable): ``message`` its ``error``, ``path`` the
    field at fault (or None), ``body`` the whole answer."""

    def __init__(self, method: str, url: str, status: int, message: str,
                 path: Optional[str] = None, body: Any = None) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.message = message
        self.path = path
        self.body = body
        where = f" (at {path})" if path else ""
        super().__init__(f"{method} {url}: HTTP {status}: {message}{where}")


def agent_error(method: str, error: Any) -> AgentError:
    """The exception of a JSON-RPC error answer to ``method`` (``error`` is its ``error`` member)."""
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) or isinstance(error.get("code"), bool):
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
