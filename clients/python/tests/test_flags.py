"""The flag methods (docs/socket-api.md B.1) against the real agent and emulator."""

from __future__ import annotations

import pytest

from conftest import APP
from pushwoosh_agent import PROPERTY_TYPES, AgentClient, FallbackWarning, Flag, RefreshError, RefreshResult
from pushwoosh_agent.plugin import RunningEmulator

pytestmark = pytest.mark.pushwoosh_agent(user_id="alice")  # alice matches new_checkout's r_qa_team


def test_get_returns_the_flag_with_its_provenance(pushwoosh_agent: AgentClient) -> None:
    flag = pushwoosh_agent.get("new_checkout")
    assert flag == Flag(key="new_checkout", is_enabled=True, rule_id="r_qa_team",
                        properties={"button_color": "green", "max_items": 10},
                        reason="TARGETING_MATCH", source="network", age_seconds=flag.age_seconds if flag else None)
    assert flag is not None and flag.age_seconds is not None and 0 <= flag.age_seconds < 60


def test_get_of_a_killed_flag_and_of_a_missing_key(pushwoosh_agent: AgentClient) -> None:
    killed = pushwoosh_agent.get("promo_banner")
    assert killed is not None
    assert (killed.is_enabled, killed.rule_id, killed.reason) == (False, "", "DISABLED")
    assert killed.properties == {"text": "Spring sale: 20% off", "dismissible": True}
    assert pushwoosh_agent.get("legacy_onboarding") is None  # archived: absent
    assert pushwoosh_agent.get("New_Checkout") is None  # keys are case-sensitive
    default_rule = pushwoosh_agent.get("rich_notifications")
    assert default_rule is not None and (default_rule.rule_id, default_rule.reason) == ("default", "DEFAULT")


def test_is_enabled(pushwoosh_agent: AgentClient) -> None:
    assert pushwoosh_agent.is_enabled("new_checkout", False) is True
    assert pushwoosh_agent.is_enabled("promo_banner", True) is False  # killed beats the default
    with pytest.warns(FallbackWarning, match="FLAG_NOT_FOUND"):  # the default, never silently
        assert pushwoosh_agent.is_enabled("no_such_flag", True) is True
        assert pushwoosh_agent.is_enabled("no_such_flag", False) is False
        assert pushwoosh_agent.is_enabled("no_such_flag") is False
    with pytest.raises(TypeError):
        pushwoosh_agent.is_enabled("new_checkout", "yes")  # type: ignore[arg-type]


def test_property_of_every_type(pushwoosh_agent: AgentClient) -> None:
    agent = pushwoosh_agent
    assert agent.property("new_checkout", "button_color", "string", "blue") == "green"
    assert agent.property("new_checkout", "button_color", str) == "green"
    assert agent.property("new_checkout", "max_items", "number", 0) == 10
    assert agent.property("new_checkout", "max_items", float) == 10
    assert agent.property("promo_banner", "dismissible", "bool", False) is True
    assert agent.property("promo_banner", "dismissible", bool) is True
    layout = {"columns": 1, "sections": ["recent", "recommended"]}
    assert agent.property("home_layout", "layout", "jsonObject") == layout
    assert agent.property("home_layout", "layout", dict) == layout
    with pytest.warns(FallbackWarning, match="is a jsonObject, not a jsonArray"):
        assert agent.property("home_layout", "layout", "jsonArray") is None  # another type
        assert agent.property("home_layout", "layout", list) is None
    # Missing, or of another type: the default; without one, the CLI's "", 0, False.
    with pytest.warns(FallbackWarning, match="TYPE_MISMATCH"):
        assert agent.property("new_checkout", "nope", "string", "fallback") == "fallback"
        assert agent.property("new_checkout", "button_color", "number", 7) == 7
        assert agent.property("new_checkout", "nope", "string") == ""
        assert agent.property("new_checkout", "nope", "number") == 0
        assert agent.property("new_checkout", "nope", "bool") is False
    with pytest.raises(ValueError, match="jsonObject \\(or json, json-object\\)"):
        agent.property("new_checkout", "button_color", "text")


def test_property_types_have_one_vocabulary(pushwoosh_agent: AgentClient) -> None:
    layout = {"columns": 1, "sections": ["recent", "recommended"]}
    for spelling in ["json", "jsonObject", "json-object", dict]:
        assert pushwoosh_agent.property("home_layout", "layout", spelling) == layout, spelling
    for spelling in ["jsonArray", "json-array", list]:
        with pytest.warns(FallbackWarning, match="TYPE_MISMATCH"):
            assert pushwoosh_agent.property("home_layout", "layout", spelling) is None, spelling
    # The socket takes the same spellings (a user typing JSON-RPC by hand).
    assert pushwoosh_agent.call("property", {"key": "home_layout", "property": "layout", "type": "json"})["value"] == layout
    assert set(PROPERTY_TYPES.values()) == {"string", "number", "bool", "jsonObject", "jsonArray"}


def test_refresh_picks_up_a_change(pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_emulator.put_flag(APP, {"key": "brand_new", "rules": [{"id": "r_all", "enabled": True}]})
    assert pushwoosh_agent.get("brand_new") is None
    assert pushwoosh_agent.refresh() == RefreshResult(sent=True, throttled_until=None, changed=["brand_new"])
    flag = pushwoosh_agent.get("brand_new")
    assert flag is not None and (flag.is_enabled, flag.rule_id) == (True, "r_all")
    assert pushwoosh_agent.refresh() == RefreshResult(sent=True, throttled_until=None, changed=[])


@pytest.mark.pushwoosh_agent(request_timeout="1s")  # a dropped connection costs the agent a RequestTimeout
@pytest.mark.parametrize("fault, code", [
    ({"http": 503}, 503),
    ({"http": 429, "retry_after": 1}, 429),
    ({"status_code": 210}, 200),   # answered, but not usable (RF-7)
    ({"body": "garbage"}, 200),
    ({"drop": True}, 0),           # no HTTP response at all
])
def test_refresh_error_carries_the_sdk_code(pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator,
                                            fault: dict, code: int) -> None:  # type: ignore[type-arg]
    pushwoosh_emulator.add_fault("getFeatureFlags", **fault)
    with pytest.raises(RefreshError) as caught:
        pushwoosh_agent.refresh()
    assert caught.value.code == code
    assert caught.value.domain == "PWFeatureFlagsErrorDomain"
    assert caught.value.message
    assert str(code) in str(caught.value)
    # The stored flags still serve (ST-4).
    assert pushwoosh_agent.is_enabled("new_checkout", False) is True
    assert pushwoosh_agent.status()["state"] == "stale"


@pytest.mark.pushwoosh_agent(server_url="http://127.0.0.1:9/no-device-api/", wait_for_flags=False)
def test_refresh_error_code_0_when_no_request_can_be_sent(pushwoosh_agent: AgentClient) -> None:
    with pytest.raises(RefreshError) as caught:
        pushwoosh_agent.refresh()
    assert caught.value.code == 0
    with pytest.warns(FallbackWarning, match="PROVIDER_NOT_READY"):
        assert pushwoosh_agent.is_enabled("new_checkout", True) is True  # no flags: the default


def test_log_impression(pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    assert pushwoosh_agent.log_impression("new_checkout") is True
    assert pushwoosh_agent.log_impression("new_checkout") is False  # once per session (IM-3)
    assert pushwoosh_agent.log_impression("no_such_flag") is False

    def impression_arrived() -> bool:
        for device in pushwoosh_emulator.devices():
            for event in device["events"]:
                if event["event"] == "PW_FeatureFlagImpression" and \
                        event["attributes"] == {"flag_key": "new_checkout", "rule_id": "r_qa_team", "enabled": True}:
                    return True
        return False

    from conftest import wait_until
    wait_until(impression_arrived)
