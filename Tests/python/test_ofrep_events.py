"""docs/http.md F.3, OFREP's change events, end to end: the bulk answer names the stream
(valid against OFREP's `eventStream` schema), a flag killed in the emulator and a refresh give
one event within a second (valid against `sseEvent` and `sseEventData` of the vendored
documents), the re-fetch it asks for gets the new value and the event's ETag, keep-alive
comments come, and If-None-Match still gets 304."""
import json
import os
import socket
import time
import urllib.request

import jsonschema_rs
import pytest
import yaml

from conftest import APPLICATION, HERE, Agent, Emulator
from pushwoosh_agent import AgentClient

OPENAPI = os.path.join(HERE, "ofrep-openapi", "openapi.yaml")
EVENT_STREAMS = os.path.join(HERE, "ofrep-openapi", "event-streams.yaml")
CONTEXT = b'{"context":{}}'


def schema(name):
    with open(OPENAPI) as f:
        components = yaml.safe_load(f)["components"]
    return jsonschema_rs.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": components})


class EventStream:
    """`GET /ofrep/v1/events` on a raw socket: the head, then events as they come (the chunked
    transfer coding undone), comments kept apart."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(b"GET /ofrep/v1/events HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
        self.raw = b""
        while b"\r\n\r\n" not in self.raw:
            self.raw += self.sock.recv(4096)
        head, self.raw = self.raw.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        self.text = ""
        self.comments = []

    def _decode(self):
        while b"\r\n" in self.raw:
            size_line, rest = self.raw.split(b"\r\n", 1)
            size = int(size_line, 16)
            if len(rest) < size + 2:
                return
            self.text += rest[:size].decode()
            self.raw = rest[size + 2:]

    def blocks(self, seconds, until=lambda blocks: False):
        """The blocks (dicts of fields; comments go to `comments`) received within `seconds`."""
        deadline = time.monotonic() + seconds
        found = []
        while time.monotonic() < deadline and not until(found):
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(4096)
            except socket.timeout:
                break
            if not chunk:
                break
            self.raw += chunk
            self._decode()
            while "\n\n" in self.text:
                block, self.text = self.text.split("\n\n", 1)
                fields = {}
                for line in block.split("\n"):
                    if line.startswith(":"):
                        self.comments.append(line)
                    elif ":" in line:
                        name, value = line.split(":", 1)
                        fields[name] = value[1:] if value.startswith(" ") else value
                if fields:
                    found.append(fields)
        return found

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def lab():
    """An emulator and agent of their own (a flag gets killed), refreshes not throttled,
    keep-alives every 0.5 s."""
    emulator = Emulator()
    agent = Agent(emulator.server_url, extra="[FeatureFlags]\nDisableThrottle=yes\n",
                  env={"PUSHWOOSH_AGENT_SSE_KEEPALIVE": "0.5"})
    agent.wait()
    yield emulator, agent
    agent.stop()
    emulator.stop()


def bulk(agent, etag=None, query=""):
    request = urllib.request.Request(agent.base_url + "/ofrep/v1/evaluate/flags" + query, data=CONTEXT, method="POST",
                                     headers={"Content-Type": "application/json"})
    if etag:
        request.add_header("If-None-Match", etag)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get("ETag"), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("ETag"), None


def test_a_killed_flag_is_one_event_and_the_refetch_gets_it(lab):
    emulator, agent = lab
    status, etag_before, body = bulk(agent)
    assert status == 200
    streams = body["eventStreams"]
    assert streams == [{"type": "sse", "endpoint": {"requestUri": "/ofrep/v1/events"}, "inactivityDelaySec": 120}]
    for stream in streams:
        schema("eventStream").validate(stream)
    schema("bulkEvaluationSuccess").validate({"flags": [], "eventStreams": streams})

    events = EventStream(agent.port)
    assert events.status == 200
    assert events.headers["content-type"] == "text/event-stream"
    emulator.client.kill(APPLICATION, "flag_on")  # the lab is locked: its client sends the token
    started = time.monotonic()
    AgentClient(os.path.join(agent.dir.name, "agent.sock")).refresh()
    blocks = events.blocks(5, until=lambda found: len(found) >= 1)
    took = time.monotonic() - started
    assert len(blocks) == 1, blocks
    assert took < 1, f"the event came {took:.2f} s after the refresh"
    event = blocks[0]
    assert event["event"] == "message" and event["id"] == "1"
    schema("sseEvent").validate(event)
    data = json.loads(event["data"])
    schema("sseEventData").validate(data)
    assert data["type"] == "refetchEvaluation"
    assert isinstance(data["lastModified"], int) and data["lastModified"] > 1_600_000_000

    # The re-fetch the event asks for (with its hints): the new value, the event's ETag.
    status, etag_after, body = bulk(agent, query=f"?flagConfigEtag={urllib.parse.quote(data['etag'])}&flagConfigLastModified={data['lastModified']}")
    assert status == 200
    assert etag_after == data["etag"] != etag_before
    flag = next(item for item in body["flags"] if item["key"] == "flag_on")
    assert (flag["value"], flag["reason"], flag["variant"]) == (False, "DISABLED", "killed")
    assert bulk(agent, etag=etag_after)[0] == 304
    assert bulk(agent, etag=etag_before)[0] == 200

    # Quiet: keep-alive comments, no event.
    assert events.blocks(1.2) == []
    assert events.comments.count(": keep-alive") >= 2
    events.close()


def test_the_stream_document_is_vendored_unchanged():
    """The event-stream document names `sseEvent` as the item of `text/event-stream`."""
    with open(EVENT_STREAMS) as f:
        doc = yaml.safe_load(f)
    get = doc["components"]["pathItems"]["eventStreamConnection"]["get"]
    item = get["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
    assert item == {"$ref": "openapi.yaml#/components/schemas/sseEvent"}
