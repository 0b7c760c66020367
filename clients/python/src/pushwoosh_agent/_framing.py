"""The socket's framing (docs/socket-api.md B): one JSON-RPC message per line, both ways.

One limit for every line, read or written: :data:`MAX_LINE`, the agent's (1 MiB, not counting
the newline). The agent refuses a longer request and never sends a longer answer (it answers
-32600 naming the limit instead), so :class:`LineReader` holds every line it reads to it and
:func:`encode_request` every request. Imports only :mod:`pushwoosh_agent.errors`.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Mapping, Optional

from .errors import ProtocolError

__all__ = ["MAX_LINE", "MAX_REQUEST_LINE", "LineTooLong", "LineReader", "encode_request", "decode_line"]

#: The longest line, without its newline, either side sends: the agent's line limit.
MAX_LINE = 1 << 20
#: The same limit, under the name the client had for requests.
MAX_REQUEST_LINE = MAX_LINE


class LineTooLong(ProtocolError):
    """The agent sent a line longer than the limit (the connection cannot be read further)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"a line from the agent longer than {limit} bytes")


class LineReader:
    """Splits the bytes read from the socket into lines (without ``\\n`` and a trailing ``\\r``).

    :meth:`feed` raises :class:`LineTooLong` once a line, complete or not, is longer than
    ``limit`` (:data:`MAX_LINE` unless given).
    """

    def __init__(self, limit: Optional[int] = None) -> None:
        self.limit = MAX_LINE if limit is None else limit
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The lines ``chunk`` completes, in order (each is yielded before a later one can fail)."""
        scan = len(self._buffer)
        self._buffer += chunk
        start = 0
        while True:
            newline = self._buffer.find(b"\n", scan)
            if newline < 0:
                break
            if newline - start > self.limit:
                raise LineTooLong(self.limit)
            line = bytes(self._buffer[start:newline])
            start = scan = newline + 1
            yield line[:-1] if line.endswith(b"\r") else line
        if start:
            del self._buffer[:start]
        if len(self._buffer) > self.limit:
            raise LineTooLong(self.limit)


def decode_line(line: bytes) -> List[Dict[str, Any]]:
    """The JSON-RPC messages of one line (a batch gives several); none for a blank line or one
    that is not JSON (nothing could be routed to it)."""
    if not line.strip():
        return []
    try:
        message = json.loads(line)
    except ValueError:
        return []
    return [item for item in (message if isinstance(message, list) else [message]) if isinstance(item, dict)]


def encode_request(call_id: int, method: str, params: Mapping[str, Any]) -> bytes:
    """The line of request ``call_id``; ``TypeError``/``ValueError`` when it cannot be sent (not
    JSON, a lone surrogate, longer than :data:`MAX_LINE`)."""
    if not isinstance(method, str) or not method:
        raise TypeError(f"method must be a non-empty string, not {method!r}")
    request = {"jsonrpc": "2.0", "id": call_id, "method": method, "params": dict(params)}
    try:
        text = json.dumps(request, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except TypeError as error:
        raise TypeError(f"{method}: the parameters are not JSON: {error}") from None
    except ValueError as error:
        raise ValueError(f"{method}: the parameters are not JSON: {error}") from None
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{method}: a parameter is not valid Unicode (lone surrogate): {error}") from None
    if len(data) > MAX_LINE:
        raise ValueError(f"{method}: the request is {len(data)} bytes; the agent takes at most "
                         f"{MAX_LINE}")
    return data + b"\n"


def camel_case(name: str) -> str:
    """A pythonic keyword as the agent's and the emulator's JSON spell it: ``accept_button_color``
    is ``acceptButtonColor``, ``image_url`` is ``imageURL``; a name without ``_`` is kept."""
    head, *rest = name.split("_")
    return head + "".join("URL" if part == "url" else part[:1].upper() + part[1:] for part in rest)
