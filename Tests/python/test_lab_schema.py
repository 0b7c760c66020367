"""The running lab held to its own OpenAPI document (docs/lab.md, "The contract").

The lab (`pushwoosh-emulator --lab DIR`, locked: its token in the file it names) serves
docs/lab-openapi.json at GET /lab/openapi.json. Here:

- the served document is the file in the tree, byte for byte, and an OpenAPI 3.1 document (the
  OpenAPI Initiative's schema of one, vendored in oas-3.1/) with the bearer scheme on everything;
- a scripted session (two devices, calls, advances, a restart, signals, the log and the
  notifications, an attached device, one on the system clock, a killed one, a fault by device
  name, the admin API from applications to state, a reset, and a 400, 401, 404, 405, 408, 409
  and 502 on the way) gets answers each of which is valid against the document: the status is
  one the operation lists, the body valid against that answer's schema (jsonschema_rs); every
  operation answers a 2xx in it;
- schemathesis (its command line, pinned in requirements-dev.txt) generates requests for every
  operation from the served document, valid and invalid ones, with the token, and checks that no
  answer is a 5xx and that every answer's status, content type, headers and body are the
  document's. lab_schema_hooks.py keeps generated requests from running any program but the
  lab's own agent (the real debug pushwoosh-agentd, given with --agentd), from starting more than
  two devices a request (nine at once), and from waiting long.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
import urllib.error
import urllib.request

import jsonschema_rs
import pytest

from conftest import HERE, ROOT, binary

DOCUMENT = os.path.join(ROOT, "docs", "lab-openapi.json")
HOOKS = os.path.join(HERE, "lab_schema_hooks.py")
# The OpenAPI Initiative's schema of OpenAPI 3.1 documents (oas-3.1/README.md).
OAS_SCHEMA = os.path.join(HERE, "oas-3.1", "schema.json")
# Requests per operation and phase (LAB_SCHEMA_EXAMPLES for a longer run): about half a minute.
MAX_EXAMPLES = int(os.environ.get("LAB_SCHEMA_EXAMPLES", "40"))
SEED = 20261207


class Lab:
    """pushwoosh-emulator --lab DIR on a free port: started as another language would (read
    `lab token: FILE`, then `listening on HOST:PORT`, from its standard output)."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="pwlab-schema-")
        self.stderr = open(os.path.join(self.dir.name, "emulator.err"), "w")
        self.process = subprocess.Popen(
            [binary("pushwoosh-emulator"), "--listen", "127.0.0.1:0", "--apps", os.path.join(ROOT, "config", "flags.example.json"),
             "--lab", os.path.join(self.dir.name, "lab"), "--agentd", binary("pushwoosh-agentd")],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        token_line = self.process.stdout.readline().strip()
        listening = self.process.stdout.readline().strip()
        assert token_line.startswith("lab token: ") and listening.startswith("listening on "), (token_line, listening)
        with open(token_line[len("lab token: "):]) as f:
            self.token = f.read().strip()
        self.url = "http://" + listening[len("listening on "):]

    def call(self, method, path, body=None, token=True, raw=None):
        """(status, headers, parsed body) of one request."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            request.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()  # its devices end with it (their parent-death signal)
            self.process.wait(5)
            raise
        self.stderr.close()
        self.dir.cleanup()


@pytest.fixture(scope="module")
def lab():
    lab = Lab()
    yield lab
    lab.stop()


@pytest.fixture(scope="module")
def document(lab):
    status, headers, body = lab.call("GET", "/lab/openapi.json")
    assert status == 200 and headers["Content-Type"] == "application/json", (status, dict(headers))
    return json.loads(body)


class Contract:
    """The document's answers: the schema of each operation's answer with each status."""

    def __init__(self, document):
        self.document = document
        self.components = document["components"]

    def response(self, method, template, status):
        operation = self.document["paths"][template][method.lower()]
        answer = operation["responses"].get(str(status))
        assert answer is not None, f"{method} {template}: {status} is not an answer the document lists ({sorted(operation['responses'])})"
        if "$ref" in answer:
            answer = self.components["responses"][answer["$ref"].rsplit("/", 1)[1]]
        return answer

    def check(self, method, template, status, headers, body):
        """Fails unless `status` is listed for the operation and `body` is valid against it."""
        answer = self.response(method, template, status)
        media = answer["content"]["application/json"]
        assert headers["Content-Type"].split(";")[0] == "application/json", headers["Content-Type"]
        for name, header in answer.get("headers", {}).items():
            assert not header.get("required") or headers.get(name) is not None, f"{method} {template} {status}: no {name} header"
        validator = jsonschema_rs.Draft202012Validator({"allOf": [media["schema"]], "components": self.components})
        value = json.loads(body)
        errors = [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(value)]
        assert not errors, f"{method} {template} {status} does not follow the document: {errors}\n{json.dumps(value)[:2000]}"
        return value


def test_the_served_document_is_the_one_in_the_tree(lab):
    status, headers, body = lab.call("GET", "/lab/openapi.json")
    with open(DOCUMENT, "rb") as f:
        assert body == f.read()
    assert lab.call("GET", "/lab/openapi.json", token=False)[0] == 401


def test_the_document_is_an_openapi_3_1_document_locked_by_bearer(document):
    with open(OAS_SCHEMA) as f:
        validator = jsonschema_rs.Draft202012Validator(json.load(f))
    errors = [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(document)]
    assert not errors, errors
    assert document["openapi"] == "3.1.0"
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"]["type"] == "http"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    # The check finds what it is for.
    broken = json.loads(json.dumps(document))
    broken["paths"]["/lab/devices"]["get"]["parameters"] = [{"name": "x"}]
    assert not validator.is_valid(broken)


def test_a_scripted_session_follows_the_document(lab, document):
    contract = Contract(document)
    seen = set()

    def step(method, path, template, expect, body=None, **kw):
        status, headers, raw = lab.call(method, path, body, **kw)
        assert status == expect, f"{method} {path}: {status} {raw[:500]!r}"
        seen.add((method, template, status))
        return contract.check(method, template, status, headers, raw)

    started = step("POST", "/lab/devices", "/lab/devices", 201, {"count": 2, "name": "qa", "config": {"Agent": {"UserId": "user-{n}"}}})
    assert [d["name"] for d in started["devices"]] == ["qa-0", "qa-1"]
    assert all(d["state"] == "ready" and d["flagsSource"] == "network" for d in started["devices"])
    step("GET", "/lab/devices", "/lab/devices", 200)
    step("GET", "/lab/devices/qa-0", "/lab/devices/{name}", 200)
    got = step("POST", "/lab/devices/qa-0/call", "/lab/devices/{name}/call", 200, {"method": "get", "params": {"key": "new_checkout"}})
    assert got["result"]["flag"]["key"] == "new_checkout"
    refused = step("POST", "/lab/devices/qa-0/call", "/lab/devices/{name}/call", 200, {"method": "noSuchMethod", "params": None})
    assert refused["error"]["code"] == -32601
    step("POST", "/admin/apps/ABCDE-12345/flags/new_checkout/kill", "/admin/apps/{code}/flags/{key}/kill", 200)
    moved = step("POST", "/lab/advance", "/lab/advance", 200, {"until": "nextRefresh"})
    assert moved["skipped"] == [] and set(moved["fired"]) == {"qa-0", "qa-1"}
    step("GET", "/lab/devices/qa-9", "/lab/devices/{name}", 404)
    bad = step("POST", "/lab/devices", "/lab/devices", 400, {"count": 65, "name": "qa"})
    assert bad["path"] == "count"
    bad = step("POST", "/lab/devices", "/lab/devices", 400, {"name": "x", "agentd": lab.dir.name})
    assert bad["path"] == "agentd"
    step("POST", "/lab/devices", "/lab/devices", 409, {"name": "qa-0"})
    # One device of the caller's own: its directory, environment and configuration text.
    own = step("POST", "/lab/devices", "/lab/devices", 201,
               {"name": "own", "directory": os.path.join(lab.dir.name, "own"), "environment": {"LAB_SCHEMA": "1"},
                "extraConfig": "[Agent]\nRequestTimeout=5s\n"})
    assert own["devices"][0]["directory"] == os.path.join(lab.dir.name, "own")
    step("DELETE", "/lab/devices/own", "/lab/devices/{name}", 200)
    assert step("POST", "/lab/devices", "/lab/devices", 400, {"name": "own", "extraConfig": "[Agent]\nNoSuchKey=1\n"})["path"] == "extraConfig"
    assert step("POST", "/lab/devices", "/lab/devices", 400, {"name": "own", "environment": {"1X": "a"}})["path"] == "environment.1X"
    assert step("POST", "/lab/devices", "/lab/devices", 400, {"name": "own", "config": {"Agent": {"Socket": "/x"}}})["path"] == "config.Agent.Socket"
    restarted = step("POST", "/lab/devices/qa-1/restart", "/lab/devices/{name}/restart", 200, {"signal": "KILL"})
    assert restarted["hwid"] == started["devices"][1]["hwid"]
    step("POST", "/lab/devices/qa-1/signal", "/lab/devices/{name}/signal", 200, {"signal": "HUP"})
    step("GET", "/lab/devices/qa-1/log?tail=5", "/lab/devices/{name}/log", 200)
    told = step("GET", "/lab/devices/qa-1/notifications?after=0", "/lab/devices/{name}/notifications", 200)
    assert any("READY=1" in n for n in told["notifications"])
    armed = step("POST", "/admin/faults", "/admin/faults", 200,
                 {"device": "qa-0", "method": "getFeatureFlags", "drop": True, "forSeconds": 60})
    assert armed["armed"]["hwid"] == started["devices"][0]["hwid"]
    step("POST", "/admin/faults", "/admin/faults", 400, {"device": "qa-9", "method": "getFeatureFlags", "drop": True})
    step("GET", "/admin/faults", "/admin/faults", 200)
    step("GET", "/admin/requests?method=getFeatureFlags", "/admin/requests", 200)
    step("GET", "/admin/requests/count?hwid=" + started["devices"][0]["hwid"], "/admin/requests/count", 200)
    step("GET", "/admin/requests/wait?count=1000&timeout=0.2", "/admin/requests/wait", 408)
    step("GET", "/admin/requests/wait?since=yesterday", "/admin/requests/wait", 400)
    step("GET", "/admin/devices", "/admin/devices", 200)
    step("GET", "/admin/apps", "/admin/apps", 200)
    step("GET", "/admin/state", "/admin/state", 200)
    step("POST", "/admin/clock", "/admin/clock", 200, {"advanceSeconds": 60})
    step("POST", "/lab/advance", "/lab/advance", 200, {"seconds": 60, "strict": True})
    step("GET", "/admin/requests/wait?count=1&method=getFeatureFlags", "/admin/requests/wait", 200)
    step("GET", "/admin/clock", "/admin/clock", 200)
    # The applications and flags, on an application of the session's own.
    step("GET", "/admin/apps/ABCDE-12345", "/admin/apps/{code}", 200)
    step("PUT", "/admin/apps/TEST-1", "/admin/apps/{code}", 200, {"flags": [{"key": "f1"}]})
    step("PUT", "/admin/apps/TEST-1", "/admin/apps/{code}", 400, {"code": "OTHER-1"})
    step("PUT", "/admin/apps/A%2FB", "/admin/apps/{code}", 404, {})
    step("GET", "/admin/apps/TEST-1/flags/f1", "/admin/apps/{code}/flags/{key}", 200)
    step("PUT", "/admin/apps/TEST-1/flags/f2", "/admin/apps/{code}/flags/{key}", 200,
         {"properties": {"c": {"type": "string", "default": "x"}},
          "rules": [{"id": "r1", "enabled": True, "when": {"rolloutPercent": 50, "sawFeature": {"flag": "f2", "days": 30}}, "properties": {"c": "y"}}]})
    for action in ("kill", "unkill", "archive", "unarchive"):
        step("POST", f"/admin/apps/TEST-1/flags/f2/{action}", f"/admin/apps/{{code}}/flags/{{key}}/{action}", 200)
    step("POST", "/admin/apps/TEST-1/flags/f9/kill", "/admin/apps/{code}/flags/{key}/kill", 404)
    step("DELETE", "/admin/apps/TEST-1/flags/f2", "/admin/apps/{code}/flags/{key}", 200)
    step("DELETE", "/admin/apps/TEST-1", "/admin/apps/{code}", 200)
    step("DELETE", "/admin/faults", "/admin/faults", 200)
    step("DELETE", "/admin/requests", "/admin/requests", 200)
    state = step("GET", "/admin/state", "/admin/state", 200)
    step("DELETE", "/admin/devices", "/admin/devices", 200)
    step("PUT", "/admin/state", "/admin/state", 200, state)
    step("PUT", "/admin/state", "/admin/state", 400, {k: v for k, v in state.items() if k != "devices"})
    step("POST", "/admin/reset", "/admin/reset", 200)
    # A device on the system clock cannot be moved: a strict advance moves nothing, another names it.
    step("POST", "/lab/devices", "/lab/devices", 201, {"name": "sys", "clock": "system"})
    refusal = step("POST", "/lab/advance", "/lab/advance", 409, {"seconds": 60, "strict": True})
    assert "sys" in [s["name"] for s in refusal["skipped"]], refusal
    moved = step("POST", "/lab/advance", "/lab/advance", 200, {"seconds": 60})
    # (qa-0 and qa-1 run ahead since the emulator's reset: skipped too, with that reason.)
    reasons = {s["name"]: s["reason"] for s in moved["skipped"]}
    assert "system" in reasons["sys"] and "sys" not in moved["fired"], moved
    step("POST", "/lab/advance", "/lab/advance", 404, {"seconds": 60, "devices": ["nobody"]})
    # qa-1 attached again by its socket (as a systemd instance would be): the lab calls and moves it,
    # never signals or restarts it.
    attached = step("POST", "/lab/devices", "/lab/devices", 201, {"attach": started["devices"][1]["socket"], "name": "att"})
    assert attached["devices"][0]["owned"] is False and attached["devices"][0]["pid"] is None
    step("POST", "/lab/devices/att/restart", "/lab/devices/{name}/restart", 409)
    step("POST", "/lab/devices/att/signal", "/lab/devices/{name}/signal", 409, {"signal": "HUP"})
    step("GET", "/lab/devices/att/notifications", "/lab/devices/{name}/notifications", 409)
    step("GET", "/lab/devices/att/log", "/lab/devices/{name}/log", 409)
    # A device killed: its record says how it ended; a call is a 502, a signal a 409.
    step("POST", "/lab/devices/qa-1/signal", "/lab/devices/{name}/signal", 200, {"signal": "KILL"})
    deadline = time.monotonic() + 5
    while step("GET", "/lab/devices/qa-1", "/lab/devices/{name}", 200)["state"] != "exited" and time.monotonic() < deadline:
        time.sleep(0.05)
    ended = step("GET", "/lab/devices/qa-1", "/lab/devices/{name}", 200)
    assert ended["state"] == "exited" and ended["exitSignal"] == 9 and ended["exitCode"] is None, ended
    step("POST", "/lab/devices/qa-1/call", "/lab/devices/{name}/call", 502, {"method": "status"})
    # The device attached by qa-1's socket no longer answers: down, with why; let go.
    down = step("GET", "/lab/devices/att", "/lab/devices/{name}", 200)
    assert down["state"] == "down" and down["error"], down
    let_go = step("DELETE", "/lab/devices/att", "/lab/devices/{name}", 200)
    assert let_go["released"] is True and let_go["stopped"] is False
    step("POST", "/lab/devices/qa-1/signal", "/lab/devices/{name}/signal", 409, {"signal": "HUP"})
    stopped = step("DELETE", "/lab/devices/qa-1", "/lab/devices/{name}", 200)
    assert stopped["stopped"] is True and stopped["state"] == "exited"
    reset = step("POST", "/lab/reset", "/lab/reset", 200)
    assert reset == {"reset": True, "stopped": 2, "released": 0}
    step("POST", "/lab/advance", "/lab/advance", 409, {"until": "nextTimer"})
    step("GET", "/lab/devices", "/lab/devices", 401, token=False)
    step("GET", "/lab/openapi.json", "/lab/openapi.json", 200)
    # A method no operation lists: 405, shaped as every error.
    status, headers, raw = lab.call("PUT", "/lab/devices", {})
    assert status == 405 and not list(jsonschema_rs.Draft202012Validator(document["components"]["schemas"]["Error"]).iter_errors(json.loads(raw)))
    assert {s for _, _, s in seen} >= {200, 201, 400, 401, 404, 408, 409, 502}
    # Every operation of the document answered a 2xx in the session, valid against its schema.
    operations = {(method.upper(), path) for path, item in document["paths"].items() for method in item if method != "parameters"}
    succeeded = {(method, template) for method, template, status in seen if 200 <= status < 300}
    assert operations - succeeded == set(), sorted(operations - succeeded)


def test_schemathesis_finds_every_answer_of_the_running_lab_in_the_document(lab, document, tmp_path):
    """Every operation, valid and invalid requests: no 5xx, every answer as the document says."""
    served = tmp_path / "lab-openapi.json"
    served.write_text(json.dumps(document))
    answers = tmp_path / "answers.txt"
    command = [os.path.join(os.path.dirname(sys.executable), "schemathesis"), "run", str(served),
               "--url", lab.url, "--header", f"Authorization: Bearer {lab.token}",
               "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                           "response_headers_conformance,response_schema_conformance,unsupported_method,allow_header_conformance",
               "--phases", "examples,coverage,fuzzing", "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED),
               "--workers", "1", "--request-timeout", "20", "--generation-database", "none",
               "--no-color", "--output-truncate", "false", "--warnings", "off"]
    began = time.monotonic()
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": HOOKS,
                                                                               "LAB_SCHEMA_ANSWERS": str(answers)})
    output = run.stdout + run.stderr
    operations = {f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item if method != "parameters"}
    statuses = {}
    for line in answers.read_text().splitlines():
        operation, status = line.rsplit(" ", 1)
        statuses.setdefault(operation, Counter())[int(status)] += 1
    seen = "\n".join(f"  {op}: {dict(sorted(statuses.get(op, {}).items()))}" for op in sorted(operations | set(statuses)))
    print(f"schemathesis: {time.monotonic() - began:.1f} s, {sum(map(sum, (c.values() for c in statuses.values())))} requests\n{seen}\n{output[-1200:]}")
    assert run.returncode == 0, output
    assert f"{len(operations)} selected / {len(operations)} total" in output, output
    # Every operation was sent requests, and did what it is for at least once (a 2xx; a wait's 408 is
    # its answer too): a run that only met refusals would test little.
    assert operations - set(statuses) == set(), sorted(operations - set(statuses))
    assert [op for op in operations if not any(200 <= s < 300 or s == 408 for s in statuses[op])] == [], seen
