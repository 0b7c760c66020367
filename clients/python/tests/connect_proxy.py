"""A loopback-only HTTP CONNECT proxy for the proxy tests: it tunnels to 127.0.0.1 only,
records each CONNECT target, and refuses (403) anything else."""

from __future__ import annotations

import select
import socket
import threading
from typing import List, Optional


class ConnectProxy:
    """``with ConnectProxy() as proxy:`` listens on ``proxy.url`` (``http://127.0.0.1:PORT``);
    ``proxy.targets`` lists the ``host:port`` of every tunnel asked for, in order."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets: List[str] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "ConnectProxy":
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self.listener.close()

    def tunnels(self) -> List[str]:
        with self._lock:
            return list(self.targets)

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            request = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(request) != 3 or request[0] != "CONNECT":
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            host, _, port = request[1].rpartition(":")
            with self._lock:
                self.targets.append(request[1])
            if host not in ("127.0.0.1", "localhost"):
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            with upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                rest = head.split(b"\r\n\r\n", 1)[1]
                if rest:
                    upstream.sendall(rest)
                self._relay(client, upstream)

    @staticmethod
    def _relay(a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while True:
            ready, _, _ = select.select([a, b], [], [], 60)
            if not ready:
                return
            for s in ready:
                data = s.recv(65536)
                if not data:
                    return
                peers[s].sendall(data)
