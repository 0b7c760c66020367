"""The socket's framing (docs/socket-api.md B): one JSON-RPC message per line, both ways, each line
held to the agent's limit, :data:`MAX_LINE`; and the spellings and checks both clients share."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Mapping, Optional

from .errors import ProtocolError

__all__ = ["MAX_LINE", "LineTooLong", "LineReader", "encode_request", "decode_line"]

#: The longest line, without its newline, either side sends (the agent answers -32600 past it).
MAX_LINE = 1 << 20


class LineTooLong(ProtocolError):
    """The agent sent a line longer than the limit (the connection cannot be read further)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"a line from the agent longer than {limit} bytes")


class LineReader:
    """Splits the bytes read into lines (without ``\\n`` and a trailing ``\\r``); :meth:`feed` raises
    :class:`LineTooLong` once a line, complete or not, is longer than ``limit``."""

    def __init__(self, limit: Optional[int] = None) -> None:
        self.limit = MAX_LINE if limit is None else limit
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The lines ``chunk`` completes, in order (each is yielded before a later one can fail)."""
        scan = len(self._buffer)
        self._buffer += chunk
        start = 0
        while (newline := self._buffer.find(b"\n", scan)) >= 0:
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
    """The JSON-RPC messages of one line (a batch gives several); none when it is blank or not JSON."""
    try:
        message = json.loads(line)
    except ValueError:  # blank, not JSON, or not decodable
        return []
    return [item for item in (message if isinstance(message, list) else [message]) if isinstance(item, dict)]


def encode_request(call_id: int, method: str, params: Mapping[str, Any]) -> bytes:
    """The line of request ``call_id``; ``TypeError``/``ValueError`` when it cannot be sent."""
    if not isinstance(method, str) or not method:
        raise TypeError(f"method must be a non-empty string, not {method!r}")
    request = {"jsonrpc": "2.0", "id": call_id, "method": method, "params": dict(params)}
    try:
        data = json.dumps(request, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError as error:  # a ValueError too: caught first
        raise ValueError(f"{method}: a parameter is not valid Unicode (lone surrogate): {error}") from None
    except (TypeError, ValueError) as error:
        raise type(error)(f"{method}: the parameters are not JSON: {error}") from None
    if len(data) > MAX_LINE:
        raise ValueError(f"{method}: the request is {len(data)} bytes; the agent takes at most {MAX_LINE}")
    return data + b"\n"


def camel_case(name: str) -> str:
    """A keyword as the JSON spells it: ``accept_button`` is ``acceptButton``, ``image_url`` ``imageURL``."""
    head, *rest = name.split("_")
    return head + "".join("URL" if part == "url" else part[:1].upper() + part[1:] for part in rest)


def positive_seconds(timeout: Any, must_be: str = "a positive number of seconds") -> float:
    """``timeout`` checked to be a positive number (a ``ValueError`` saying it ``must_be``), as a float."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be {must_be}, not {timeout!r}")
    return float(timeout)
