"""docs/http.md F with clients nobody here wrote: OpenFeature's Python SDK and OFREP provider
(unmodified, from PyPI), prometheus-client's parser and promtool, against the real agent
and emulator (the flags are Tests/python/apps.json, the User ID alice)."""
import contextlib
import io
import os
import re
import shutil
import subprocess
import time

import pytest
from openfeature import api
from openfeature.client import OpenFeatureClient
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import Reason
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, USER
from pushwoosh_agent.openfeature import UnixAdapter


def client_for(agent, domain):
    provider = OFREPProvider(agent.base_url)
    if agent.unix:
        provider.session.mount(agent.base_url, UnixAdapter(agent.listen))
    api.set_provider(provider, domain)
    return api.get_client(domain)


@pytest.fixture(scope="module")
def of(agent) -> OpenFeatureClient:
    return client_for(agent, "tcp")


# Boolean flags: on, off (a rule that switches it off), the default rule (STATIC in OFREP, whose
# schema has no DEFAULT; the OpenFeature reason in metadata), killed.
@pytest.mark.parametrize("key, value, reason, variant, socket_reason", [
    ("flag_on", True, Reason.TARGETING_MATCH, "r_everyone", "TARGETING_MATCH"),
    ("flag_off", False, Reason.TARGETING_MATCH, "r_off", "TARGETING_MATCH"),
    ("flag_default", False, Reason.STATIC, "default", "DEFAULT"),
    ("flag_killed", False, Reason.DISABLED, "killed", "DISABLED"),
])
def test_boolean_flags(of, key, value, reason, variant, socket_reason):
    d = of.get_boolean_details(key, not value)
    assert (d.value, d.reason, d.variant, d.error_code) == (value, reason, variant, None)
    assert d.flag_metadata["reason"] == socket_reason
    assert d.flag_metadata["ruleId"] == ("" if variant == "killed" else variant)
    assert d.flag_metadata["source"] == "network"
    assert d.flag_metadata["fetchedAt"].endswith("Z")


# Properties as KEY.PROPERTY, each with its JSON type.
def test_properties(of):
    assert of.get_string_value("flag_on.color", "x") == "green"
    assert of.get_integer_value("flag_on.limit", 0) == 5
    assert of.get_float_value("flag_on.ratio", 0.0) == 0.5
    assert of.get_boolean_value("flag_on.express", False) is True
    assert of.get_object_value("flag_on.layout", {}) == {"columns": 2}
    assert of.get_object_value("flag_on.steps", {}) == ["cart", "pay"]
    d = of.get_string_details("flag_default.color", "x")
    assert (d.value, d.reason, d.variant) == ("blue", Reason.STATIC, "default")


def test_flag_not_found(of):
    d = of.get_boolean_details("no_such_flag", True)
    assert (d.value, d.reason, d.error_code) == (True, Reason.ERROR, ErrorCode.FLAG_NOT_FOUND)
    assert of.get_string_details("flag_on.no_such_property", "x").error_code == ErrorCode.FLAG_NOT_FOUND


# A type mismatch as the SDK reports it: the provider checks the type, the caller's
# default comes back. Whole numbers are integers on the wire, so a float read of one is
# a mismatch too (README: what the mapping cannot express).
def test_type_mismatch(of):
    d = of.get_string_details("flag_on", "x")
    assert (d.value, d.reason, d.error_code) == ("x", Reason.ERROR, ErrorCode.TYPE_MISMATCH)
    assert of.get_boolean_details("flag_on.color", False).error_code == ErrorCode.TYPE_MISMATCH
    assert of.get_float_details("flag_on.limit", 1.5).error_code == ErrorCode.TYPE_MISMATCH


def test_targeting_key(of):
    assert of.get_boolean_value("flag_on", False, EvaluationContext(targeting_key=USER, attributes={"plan": "x"}))
    d = of.get_boolean_details("flag_on", False, EvaluationContext(targeting_key="mallory"))
    assert (d.value, d.reason, d.error_code) == (False, Reason.ERROR, ErrorCode.INVALID_CONTEXT)
    assert "mallory" in d.error_message and USER in d.error_message


def test_not_ready(unready_agent):
    of = client_for(unready_agent, "unready")
    d = of.get_boolean_details("flag_on", True)
    assert (d.value, d.reason, d.error_code) == (True, Reason.ERROR, ErrorCode.PROVIDER_NOT_READY)
    assert unready_agent.get("/readyz")[0] == 503


def test_unix_socket(unix_agent):
    of = client_for(unix_agent, "unix")
    deadline = time.monotonic() + 15
    while of.get_boolean_details("flag_on", False).error_code == ErrorCode.PROVIDER_NOT_READY and time.monotonic() < deadline:
        time.sleep(0.05)
    d = of.get_boolean_details("flag_on", False)
    assert (d.value, d.reason, d.variant) == (True, Reason.TARGETING_MATCH, "r_everyone")
    assert of.get_integer_value("flag_on.limit", 0) == 5
    assert of.get_boolean_details("no_such_flag", True).error_code == ErrorCode.FLAG_NOT_FOUND


def test_metrics_parse(agent, of):
    of.get_boolean_value("flag_on", False)
    status, text = agent.get("/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ["pushwoosh_agent_build_info", "pushwoosh_agent_state", "pushwoosh_agent_flags",
                 "pushwoosh_agent_refreshes", "pushwoosh_agent_refresh_duration_seconds", "pushwoosh_agent_impressions",
                 "pushwoosh_agent_rpc_requests", "process_cpu_seconds", "process_resident_memory_bytes"]:
        assert name in families, name
    assert families["pushwoosh_agent_refresh_duration_seconds"].type == "histogram"
    assert families["pushwoosh_agent_refreshes"].type == "counter"
    flags = [s.value for s in families["pushwoosh_agent_flags"].samples]
    assert flags == [4.0]
    ready = [s for s in families["pushwoosh_agent_state"].samples if s.labels["state"] == "ready"]
    assert ready[0].value == 1.0


def test_promtool(agent):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found (Debian package prometheus; scripts/install-deps installs it)"
    _, text = agent.get("/metrics")
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stdout + result.stderr


# The README's "Using OpenFeature" example, as written, against the agent it describes.
def test_readme_example(example_agent):
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme.split("## Using OpenFeature", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    expected = re.search(r"# User ID alice, config/flags.example.json: (.*)", code).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code.replace("http://127.0.0.1:8016", example_agent.base_url), {})
    assert out.getvalue().strip() == expected
