"""Record and replay: `--upstream URL --record FILE.har` forwards the device API (here to a
second emulator) and writes a HAR 1.2 file with no token, HWID or User ID left in it;
`--replay FILE.har` and an `--apps-from-har` lab serve the recorded flags to a fresh device."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict

import pytest

from pushwoosh_agent.errors import RefreshError
from pushwoosh_agent.processes import AgentProcess, EmulatorProcess

TOKEN = "rec-S3CRET-api-token-42"
USER = "alice-recorded-user"


def _bin(pushwoosh_bin: str, name: str) -> str:
    return os.path.join(pushwoosh_bin, name)


def _agent(directory: str, pushwoosh_bin: str, url: str, **settings: Any) -> AgentProcess:
    os.makedirs(directory, exist_ok=True)
    return AgentProcess(directory, server_url=url, binary=_bin(pushwoosh_bin, "pushwoosh-agentd"),
                        settings={"disable_throttle": True, "request_timeout": "5s", **settings})


def _flags(agent: AgentProcess, timeout: float = 10.0) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = agent.client.status()
        if status.get("state") == "ready":
            return {k: agent.client.get(k) for k in ("new_checkout", "promo_banner", "home_layout")}
        if status.get("lastRefreshError"):
            raise AssertionError(status)
        time.sleep(0.02)
    raise AssertionError("no flags")


def _served(flags: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (v.is_enabled, v.rule_id, v.properties) if v is not None else None for k, v in flags.items()}


def _lab_on_top_of_the_upstream(agent: AgentProcess, recorder: EmulatorProcess, real: EmulatorProcess) -> None:
    """The recording emulator's admin API keeps working: it saw the calls it forwarded, and a
    fault answers a call instead of the upstream."""
    calls = recorder.client.requests()
    assert "getFeatureFlags" in [r["method"] for r in calls], calls
    assert all(r["status"] == 200 for r in calls), calls  # the upstream's answers
    before = len(real.client.requests(method="getFeatureFlags"))
    recorder.client.add_fault("getFeatureFlags", http=503, times=1)
    with pytest.raises(RefreshError) as failed:
        agent.client.refresh()
    assert failed.value.code == 503
    assert len(real.client.requests(method="getFeatureFlags")) == before, "a faulted call was forwarded"
    agent.client.refresh()  # forwarded again once the fault is spent
    assert len(real.client.requests(method="getFeatureFlags")) == before + 1


def test_record_redact_replay_and_lab(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    tmp = pushwoosh_tmp_dir
    har = os.path.join(tmp, "session.har")
    real = EmulatorProcess(os.path.join(tmp), binary=_bin(pushwoosh_bin, "pushwoosh-emulator"),
                           require_token=TOKEN).start()
    rec_dir = os.path.join(tmp, "rec")
    os.makedirs(rec_dir)
    recorder = EmulatorProcess(rec_dir, apps=None, binary=_bin(pushwoosh_bin, "pushwoosh-emulator"),
                               extra_args=["--upstream", real.server_url, "--record", har]).start()
    try:
        agent = _agent(os.path.join(tmp, "a1"), pushwoosh_bin, recorder.server_url, api_token=TOKEN, user_id=USER)
        try:
            agent.start()
            recorded = _flags(agent)
            hwid = agent.client.status()["hwid"]
            _lab_on_top_of_the_upstream(agent, recorder, real)
        finally:
            agent.close()
        # The upstream saw the real token and the real IDs.
        upstream_calls = real.client.requests(method="getFeatureFlags")
        assert upstream_calls and upstream_calls[0]["body"]["request"]["userId"] == USER

        text = open(har, encoding="utf-8").read()
        log = json.loads(text)["log"]
        assert log["version"] == "1.2"
        assert [e["comment"] for e in log["entries"]][-1] == "getFeatureFlags"
        for secret in (TOKEN, hwid, USER):
            assert secret not in text, f"{secret} left in the HAR"
        first = log["entries"][0]
        auth = [h["value"] for h in first["request"]["headers"] if h["name"].lower() == "authorization"]
        assert auth == ["Token API-TOKEN-1"], auth
        body = json.loads(first["request"]["postData"]["text"])["request"]
        assert body["hwid"] == "HWID-1" and body["userId"] == "USER-1", body
        flags_entry = [e for e in log["entries"] if e["comment"] == "getFeatureFlags"][-1]
        assert json.loads(flags_entry["request"]["postData"]["text"])["request"]["hwid"] == "HWID-1"  # stable
    finally:
        recorder.stop()
        real.stop()

    replay_dir = os.path.join(tmp, "replay")
    os.makedirs(replay_dir)
    replay = EmulatorProcess(replay_dir, apps=None, binary=_bin(pushwoosh_bin, "pushwoosh-emulator"),
                             extra_args=["--replay", har]).start()
    try:
        fresh = _agent(os.path.join(tmp, "a2"), pushwoosh_bin, replay.server_url, user_id="someone-else")
        try:
            fresh.start()
            assert _served(_flags(fresh)) == _served(recorded)
            replay.client.add_fault("getFeatureFlags", http=503, times=1)
            with pytest.raises(RefreshError) as failed:
                fresh.client.refresh()
            assert failed.value.code == 503
            fresh.client.refresh()  # the recording again once the fault is spent
            assert _served(_flags(fresh)) == _served(recorded)
        finally:
            fresh.close()
    finally:
        replay.stop()

    definition = subprocess.run([_bin(pushwoosh_bin, "pushwoosh-emulator"), "--apps-from-har", har],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True, timeout=10).stdout
    apps = json.loads(definition)
    assert apps["code"] == "ABCDE-12345"
    lab_dir = os.path.join(tmp, "lab")
    os.makedirs(lab_dir)
    lab = EmulatorProcess(lab_dir, apps=apps, binary=_bin(pushwoosh_bin, "pushwoosh-emulator")).start()
    try:
        fresh = _agent(os.path.join(tmp, "a3"), pushwoosh_bin, lab.server_url, user_id="another-user")
        try:
            fresh.start()
            assert _served(_flags(fresh)) == _served(recorded)
        finally:
            fresh.close()
    finally:
        lab.stop()


def test_bad_recording_options(pushwoosh_bin: str, pushwoosh_tmp_dir: str) -> None:
    emulator = _bin(pushwoosh_bin, "pushwoosh-emulator")

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([emulator, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)

    r = run("--record", "x.har")
    assert r.returncode == 2 and b"--record needs --upstream URL" in r.stderr
    r = run("--upstream", "ftp://x")
    assert r.returncode == 2 and b"--upstream: expected an http:// or https:// URL" in r.stderr
    r = run("--upstream", "http://127.0.0.1:1/json/1.3/", "--replay", "x.har")
    assert r.returncode == 2 and b"exclude each other" in r.stderr
    bad = os.path.join(pushwoosh_tmp_dir, "bad.har")
    with open(bad, "w", encoding="utf-8") as f:
        json.dump({"log": {"entries": [{"request": {}}]}}, f)
    r = run("--replay", bad)
    assert r.returncode == 1 and b"log.entries[0].request.url: missing" in r.stderr, r.stderr
    r = run("--apps-from-har", bad)
    assert r.returncode == 1 and b"log.entries[0].request.url: missing" in r.stderr, r.stderr
    r = run("--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1/json/1.3/", "--record",
            os.path.join(pushwoosh_tmp_dir, "no-such-dir", "s.har"))
    assert r.returncode == 1 and b"--record: cannot write" in r.stderr, r.stderr
    not_har = os.path.join(pushwoosh_tmp_dir, "not.har")
    with open(not_har, "w", encoding="utf-8") as f:
        f.write("{}")
    r = run("--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1/json/1.3/", "--record", not_har)
    assert r.returncode == 1 and b"log.entries: missing (expected a HAR 1.2 log)" in r.stderr, r.stderr
    r = run("--apps-from-har", os.path.join(pushwoosh_tmp_dir, "missing.har"))
    assert r.returncode == 1 and b"cannot read the file" in r.stderr
