"""OpenFeature's Python OFREP provider (``openfeature-provider-ofrep``, on ``requests``) over the agent's HTTP
interface on a Unix socket: ``OFREPProvider(UNIX_BASE_URL)``, with :class:`UnixAdapter` mounted on its session
(``provider.session.mount(UNIX_BASE_URL, UnixAdapter(path))``). ``requests`` and ``urllib3`` come with the
provider (this package needs only the standard library)."""

from __future__ import annotations

import socket
from typing import Any, Optional

import urllib3  # type: ignore[import-not-found, unused-ignore]
from requests.adapters import HTTPAdapter  # type: ignore[import-untyped, import-not-found, unused-ignore]

__all__ = ["UNIX_BASE_URL", "UnixAdapter", "UnixConnection", "UnixConnectionPool"]

#: A base URL whose host is never resolved: the adapter mounted on it sends everything to the socket.
UNIX_BASE_URL = "http://ofrep-over-unix.invalid"


class UnixConnection(urllib3.connection.HTTPConnection):  # type: ignore[misc, unused-ignore]
    """An HTTP connection to a Unix-domain socket at ``path``."""

    def __init__(self, path: str, timeout: float = 10.0, **kwargs: Any) -> None:
        self.unix_path, self.unix_timeout = path, timeout
        super().__init__("localhost", **kwargs)

    def _new_conn(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.unix_timeout)
        s.connect(self.unix_path)
        return s


class UnixConnectionPool(urllib3.connectionpool.HTTPConnectionPool):  # type: ignore[misc, unused-ignore]
    """A urllib3 pool whose connections go to the socket at ``path``."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        super().__init__("localhost")
        self.unix_path, self.unix_timeout = path, timeout

    def _new_conn(self) -> UnixConnection:
        return UnixConnection(self.unix_path, self.unix_timeout)


class UnixAdapter(HTTPAdapter):  # type: ignore[misc, unused-ignore]
    """A ``requests`` transport adapter that sends every request to the socket at ``path``."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        super().__init__()
        self.pool = UnixConnectionPool(path, timeout)

    def get_connection_with_tls_context(self, request: Any, verify: Any, proxies: Optional[Any] = None,
                                        cert: Optional[Any] = None) -> UnixConnectionPool:
        return self.pool

    def get_connection(self, url: Any, proxies: Optional[Any] = None) -> UnixConnectionPool:
        return self.pool
