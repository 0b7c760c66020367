"""One line limit for everything the client reads (``_framing.MAX_LINE``), from every reading
path: a call's answer, subscribe(), refresh(), events(), wait_for_refresh(), wait_for_state()
and an EventStream on a connection of its own."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterator, List

import pytest

from conftest import APP, FakeAgent, result_line
from pushwoosh_agent import AgentClient, AgentError, AgentNotRunning, EventStream
from pushwoosh_agent import _framing
from pushwoosh_agent._framing import LineReader, LineTooLong
from pushwoosh_agent.plugin import RunningEmulator

#: The limit the fake agent's tests run with (the real one, 1 MiB, is held against the real
#: agent below and in test_errors.test_an_endless_answer_line_ends_the_connection).
LIMIT = 4096


class _FakeAgent(FakeAgent):
    """A Unix socket that answers every request; ``long`` decides which answer (or which
    notification after a ``subscribe``) is one line longer than ``LIMIT``."""

    def __init__(self, path: str, long: str) -> None:
        self.long = long
        super().__init__(path, lambda request, seen: self._answer(request, seen["status"]))

    def _answer(self, request: Dict[str, Any], statuses: int) -> bytes:
        method = request["method"]
        padding = "x" * (LIMIT + 1)
        result: Dict[str, Any] = {}
        if method == "status":
            # "ready", then "done": wait_for_state("done") reads a stateChanged in between.
            result = {"state": padding if self.long == "answer" else "ready" if statuses == 1 else "done"}
        elif method == "refresh":
            result = {"error": None, "sent": True, "throttledUntil": None}
        out = result_line(request, result)
        if method == "subscribe" and self.long == "notification":
            for name in ["featureFlagsDidUpdate", "refreshCompleted", "stateChanged"]:
                note = {"jsonrpc": "2.0", "method": name, "params": {"reason": "refresh", "changed": [],
                                                                     "trigger": padding}}
                out += json.dumps(note).encode() + b"\n"
        return out


@pytest.fixture
def fake(pushwoosh_tmp_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    monkeypatch.setattr(_framing, "MAX_LINE", LIMIT)
    agents: List[_FakeAgent] = []

    def start(long: str) -> str:
        agent = _FakeAgent(os.path.join(pushwoosh_tmp_dir, f"fake{len(agents)}.sock"), long)
        agents.append(agent)
        return agent.path

    yield start
    for agent in agents:
        agent.close()


def _subscribe(client: AgentClient) -> None:
    with client.subscribe(timeout=5) as updates:
        next(updates)


def _events(client: AgentClient) -> None:
    with client.events("refresh", "state") as stream:
        stream.next(timeout=5)


def _own_stream(client: AgentClient) -> None:
    with EventStream(client.socket_path, ["refresh"], timeout=5) as stream:
        stream.next("refreshCompleted", timeout=5)


READERS: Dict[str, Callable[[AgentClient], Any]] = {
    "subscribe": _subscribe,
    "refresh": lambda client: client.refresh(),
    "events": _events,
    "wait_for_refresh": lambda client: client.wait_for_refresh(timeout=5),
    "wait_for_state": lambda client: client.wait_for_state("done", timeout=5),
    "an EventStream of its own": _own_stream,
}


def test_an_answer_over_the_limit_fails_the_call_and_names_the_limit(fake: Callable[[str], str]) -> None:
    with AgentClient(socket=fake("answer"), timeout=5) as client:
        with pytest.raises(AgentNotRunning, match=f"a line from the agent longer than {LIMIT} bytes"):
            client.status()
        assert not client.connected


@pytest.mark.parametrize("reader", list(READERS))
def test_a_notification_over_the_limit_ends_every_listening_path(fake: Callable[[str], str], reader: str) -> None:
    with AgentClient(socket=fake("notification"), timeout=5) as client:
        with pytest.raises(AgentNotRunning, match=f"a line from the agent longer than {LIMIT} bytes"):
            READERS[reader](client)


@pytest.mark.parametrize("reader", list(READERS))
def test_the_same_paths_read_lines_up_to_the_limit(fake: Callable[[str], str], reader: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A line one byte longer than the padding is let through once the limit is that much higher:
    # the limit, and nothing else, is what ended the paths above.
    monkeypatch.setattr(_framing, "MAX_LINE", 2 * LIMIT)
    with AgentClient(socket=fake("notification"), timeout=5) as client:
        READERS[reader](client)


def test_the_line_reader_counts_complete_and_partial_lines() -> None:
    reader = LineReader(limit=10)
    assert list(reader.feed(b"0123456789\n01234")) == [b"0123456789"]  # exactly the limit
    assert list(reader.feed(b"\r\n")) == [b"01234"]                     # a trailing CR is dropped
    lines = reader.feed(b"ok\n0123456789A\n")
    assert next(lines) == b"ok"                                  # a line before a long one still counts
    with pytest.raises(LineTooLong, match="longer than 10 bytes"):
        next(lines)                                              # complete, one byte over
    with pytest.raises(LineTooLong):
        list(LineReader(limit=10).feed(b"0123456789A"))          # no newline yet, one byte over


def test_the_client_reads_what_the_agent_sends_up_to_their_one_limit(pushwoosh_agent: AgentClient,
                                                                     pushwoosh_emulator: RunningEmulator) -> None:
    # The agent refuses to send an answer over its 1 MiB line limit (-32600 naming it) and the
    # client reads every line up to that limit: a property just under it comes through whole.
    assert _framing.MAX_LINE == 1 << 20
    near = "n" * (_framing.MAX_LINE - 4096)
    over = "o" * (_framing.MAX_LINE + 1)
    for key, blob in [("near", near), ("over", over)]:
        pushwoosh_emulator.put_flag(APP, {"key": key, "properties": {"blob": {"type": "string", "default": blob}},
                                          "rules": [{"id": "r_all", "enabled": True}]})
    assert pushwoosh_agent.refresh().changed == ["near", "over"]
    assert pushwoosh_agent.property("near", "blob", "string") == near
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.property("over", "blob", "string")
    assert caught.value.code == -32600 and f"line limit of {_framing.MAX_LINE} bytes" in caught.value.message
    assert pushwoosh_agent.is_enabled("near") is True  # the connection carries on


# The agent's fast path for get and isEnabled refuses an answer over its line limit as the
# general path does (it once sent the whole line, and the client ended the connection).
def test_get_of_a_flag_over_the_limit_is_refused_as_property_is(pushwoosh_agent: AgentClient,
                                                                pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_emulator.put_flag(APP, {"key": "over", "properties": {"blob": {"type": "string",
                                                                            "default": "o" * (_framing.MAX_LINE + 1)}},
                                      "rules": [{"id": "r_all", "enabled": True}]})
    assert pushwoosh_agent.refresh().changed == ["over"]
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.get("over")
    assert caught.value.code == -32600
    assert pushwoosh_agent.is_enabled("over") is True  # the short answer still goes; the connection carries on
