"""`pushwoosh-agentd --doctor`: one exchange with the configured server, each step reported,
the answer checked against the contract with JSON paths, nothing written, the token never
printed; exit 0 usable, 1 not."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from typing import Any, Iterator, List, Tuple

import pytest

from pushwoosh_agent.processes import agent_config
from pushwoosh_agent.tls import TestCA

TOKEN = "doctor-S3CRET-token"


def _doctor(pushwoosh_bin: str, directory: str, settings: dict[str, Any], *args: str,
            env: dict[str, str] | None = None) -> Tuple[int, str]:
    path = os.path.join(directory, "doctor.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(agent_config({"application_code": "ABCDE-12345", "state_directory": os.path.join(directory, "state"),
                              "request_timeout": "5s", **settings}))
    result = subprocess.run([os.path.join(pushwoosh_bin, "pushwoosh-agentd"), "--doctor", "--config", path, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                            env={"PATH": "/usr/bin:/bin", **(env or {})})
    return result.returncode, result.stdout.decode()


@pytest.mark.pushwoosh_emulator(tls=True, require_token=TOKEN)
def test_against_the_emulator_usable_nothing_written(pushwoosh_bin: str, pushwoosh_emulator: Any,
                                                      pushwoosh_tmp_dir: str) -> None:
    settings = {"server_url": pushwoosh_emulator.server_url, "ca_file": pushwoosh_emulator.ca_file,
                "api_token": TOKEN, "user_id": "alice"}
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, settings)
    assert code == 0, out
    for step in ("configuration", "resolution", "connection", "tls", "applicationOpen", "getFeatureFlags",
                 "contract", "flags"):
        assert f"\n{step} " in out, (step, out)
    assert "issuer CN = pushwoosh-agent test CA emulator-ca" in out, out
    assert "HTTP 200, status_code 200" in out and "result: usable" in out, out
    assert "new_checkout=" in out and "token set" in out
    assert TOKEN not in out
    assert not os.path.exists(os.path.join(pushwoosh_tmp_dir, "state")), "the doctor wrote a state directory"
    # As the device at start: applicationOpen, then getFeatureFlags, with the token.
    methods = [r["method"] for r in pushwoosh_emulator.requests()]
    assert methods == ["applicationOpen", "getFeatureFlags"], methods

    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, settings, "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["usable"] is True and report["deviations"] == []
    assert {f["key"] for f in report["flags"]} >= {"new_checkout"}
    assert [s["name"] for s in report["steps"]][:3] == ["configuration", "device", "resolution"]
    assert TOKEN not in out


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the class's ``answer`` (a JSON document)."""
    answer: Any = None
    seen: List[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).seen.append(self.path)
        body = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[Tuple[str, type]]:
    class Handler(_Canned):
        seen: List[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/json/1.3/", Handler
    finally:
        server.shutdown()
        server.server_close()


def test_flags_not_an_array_is_named_and_unusable(pushwoosh_bin: str, pushwoosh_tmp_dir: str,
                                                   canned: Tuple[str, Any]) -> None:
    url, handler = canned
    handler.answer = {"status_code": 200, "status_message": "OK", "response": {"flags": {"new_checkout": True}}}
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"server_url": url})
    assert code == 1, out
    assert "response.flags: object, expected an array  [unusable]" in out, out
    assert "result: NOT usable" in out
    assert "plain HTTP" in out
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"server_url": url}, "--json")
    report = json.loads(out)
    assert code == 1 and report["usable"] is False
    assert {"path": "response.flags", "problem": "object, expected an array", "fatal": True} in report["deviations"]


def test_lenient_deviations_are_listed_but_usable(pushwoosh_bin: str, pushwoosh_tmp_dir: str,
                                                   canned: Tuple[str, Any]) -> None:
    url, handler = canned
    handler.answer = {"status_code": 200, "response": {
        "flags": [{"key": "a", "enabled": True, "variant": "x"}, {"key": "a", "enabled": False, "rule_id": "r"}]}}
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"server_url": url})
    assert code == 0, out
    assert 'response.flags[0].rule_id: missing (served as "default")' in out, out
    assert "response.flags[0].variant: not in the contract (ignored)" in out, out
    assert 'response.flags[1].key: "a" again (response.flags[0]); the last one wins' in out, out
    assert "1 flag: a=off (r)" in out, out
    handler.answer = {"status_code": 200, "response": {}}
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"server_url": url})
    assert code == 0 and "response.flags: missing (read as no flags" in out, out


def test_untrusted_certificate_is_named(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    from pushwoosh_agent.processes import EmulatorProcess
    ca = TestCA(pushwoosh_tmp_dir, "unknown-ca")
    emulator = EmulatorProcess(pushwoosh_tmp_dir, binary=os.path.join(pushwoosh_bin, "pushwoosh-emulator"),
                               tls=ca.issue("server"), ca_file=ca.ca_file).start()
    try:
        code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"server_url": emulator.server_url})
        assert code == 1, out
        assert "\ntls " in out and "failed" in out and "certificate is not trusted" in out, out
        assert "getFeatureFlags  failed  not sent" in out, out
        assert emulator.client.requests() == [], "nothing may be sent to a server not trusted"
    finally:
        emulator.stop()


def test_bad_configuration_and_usage(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"ca_file": "/nonexistent/ca.pem"})
    assert code == 1 and "CAFile: cannot read \"/nonexistent/ca.pem\": no such file" in out, out
    result = subprocess.run([os.path.join(pushwoosh_bin, "pushwoosh-agentd"), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=10)
    assert result.returncode == 2 and b"--json goes with --doctor" in result.stdout


def test_uses_the_stored_device_read_only(pushwoosh_bin: str, pushwoosh_emulator: Any, pushwoosh_tmp_dir: str) -> None:
    from pushwoosh_agent.processes import AgentProcess
    agent = AgentProcess(pushwoosh_tmp_dir, server_url=pushwoosh_emulator.server_url,
                         binary=os.path.join(pushwoosh_bin, "pushwoosh-agentd"), settings={"user_id": "stored-user"})
    agent.start()
    hwid = agent.client.status()["hwid"]
    agent.close()
    state_file = os.path.join(agent.state_dir, "state.json")
    before = open(state_file, "rb").read(), os.stat(state_file).st_mtime_ns, sorted(os.listdir(agent.state_dir))
    code, out = _doctor(pushwoosh_bin, pushwoosh_tmp_dir, {"server_url": pushwoosh_emulator.server_url,
                                                           "state_directory": agent.state_dir})
    assert code == 0, out
    assert f"HWID {hwid}, User ID stored-user (from the stored state, read only)" in out, out
    after = open(state_file, "rb").read(), os.stat(state_file).st_mtime_ns, sorted(os.listdir(agent.state_dir))
    assert after == before, "the doctor changed the state directory"
    calls = pushwoosh_emulator.requests(method="getFeatureFlags")
    assert calls[-1]["hwid"] == hwid and calls[-1]["userId"] == "stored-user"
