"""The package's own tests: the plugin (installed with the package) against the real binaries."""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any, Callable, Dict, Optional

pytest_plugins = ["pytester"]

#: The repository's root (clients/python/tests -> ../../..).
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
APP = "ABCDE-12345"


def run_as_nobody(fn: Callable[[], Any], timeout: float = 20.0) -> Dict[str, Any]:
    """Runs ``fn`` in a forked child as uid/gid 65534 (nobody) with no supplementary groups;
    returns {"ok": result} or {"error": repr}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            payload = {"ok": fn()}
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            payload = {"error": repr(error)}
            status = 1
        try:
            os.write(w, json.dumps(payload).encode())
        finally:
            os._exit(status)
    os.close(w)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    assert data, "the child running as nobody said nothing"
    result: Dict[str, Any] = json.loads(data)
    return result


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01,
               what: Optional[Callable[[], str]] = None) -> Any:
    """Polls ``condition`` until it is truthy; returns its value. On timeout it asserts, saying
    ``what()`` (what was seen) when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"condition not met within {timeout} s" + (f": {what()}" if what else "")
        time.sleep(interval)
