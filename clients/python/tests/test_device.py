"""The headless device methods (docs/socket-api.md B.2), status and metrics."""

from __future__ import annotations

import re

import pytest

from conftest import APP, REPO, wait_until
from pushwoosh_agent import AgentClient, AgentError, MethodNotFound, PrimerResult, PushRegistration, __version__
from pushwoosh_agent.plugin import RunningEmulator


def test_set_user_id_discards_the_previous_users_flags(pushwoosh_agent: AgentClient,
                                                       pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_agent.set_user_id("alice")
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.get("new_checkout").rule_id == "r_qa_team"  # type: ignore[union-attr]
    # Hold bob's flags request in the emulator: meanwhile nothing of alice's may be served.
    pushwoosh_emulator.add_fault("getFeatureFlags", delay_ms=1500)
    pushwoosh_agent.set_user_id("bob")
    assert pushwoosh_agent.get("new_checkout") is None
    assert pushwoosh_agent.status()["userId"] == "bob"
    pushwoosh_agent.refresh()  # joins the request in flight (RF-9)
    assert pushwoosh_agent.get("new_checkout").rule_id == "r_qa_team"  # type: ignore[union-attr]
    last = pushwoosh_emulator.requests(method="getFeatureFlags")[-1]
    assert last["body"]["request"]["userId"] == "bob"
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.set_user_id("")
    assert caught.value.code == -32602


def test_set_app_state(pushwoosh_agent: AgentClient) -> None:
    assert pushwoosh_agent.status()["appState"] == "active"
    assert pushwoosh_agent.set_app_state("background") is False
    assert pushwoosh_agent.status()["appState"] == "background"
    assert pushwoosh_agent.set_app_state("active") is False  # back within SessionTimeout: no new session
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.set_app_state("sideways")
    assert caught.value.code == -32602


@pytest.mark.pushwoosh_agent(session_timeout="1s")
def test_set_app_state_starts_a_session_after_the_timeout(pushwoosh_agent: AgentClient) -> None:
    pushwoosh_agent.set_app_state("background")
    import time
    time.sleep(1.2)
    assert pushwoosh_agent.set_app_state("active") is True


def test_register_and_unregister_for_push(pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    registration = pushwoosh_agent.register_for_push()
    assert isinstance(registration, PushRegistration)
    assert registration.granted is True
    assert registration.push_token and re.fullmatch(r"[0-9a-f]+", registration.push_token)
    # The server learns of it asynchronously (registerDevice), then the flags follow (RF-3).
    wait_until(lambda: pushwoosh_agent.status()["pushRegistered"])
    assert pushwoosh_agent.status()["pushToken"] == registration.push_token
    assert any(d["pushToken"] == registration.push_token for d in pushwoosh_emulator.devices())
    wait_until(lambda: pushwoosh_agent.get("rich_notifications").rule_id == "r_push_registered")  # type: ignore
    pushwoosh_agent.unregister_for_push()
    assert pushwoosh_agent.status()["pushRegistered"] is False
    wait_until(lambda: pushwoosh_emulator.requests(method="unregisterDevice"))


@pytest.mark.pushwoosh_agent(permission_prompt_answer="deny")
def test_register_for_push_denied(pushwoosh_agent: AgentClient) -> None:
    assert pushwoosh_agent.register_for_push() == PushRegistration(False, None)


def test_set_notification_authorization(pushwoosh_agent: AgentClient) -> None:
    for status in ["denied", "authorized", "provisional", "ephemeral", "notDetermined"]:
        pushwoosh_agent.set_notification_authorization(status)
        assert pushwoosh_agent.status()["notificationAuthorization"] == status
    with pytest.raises(AgentError):
        pushwoosh_agent.set_notification_authorization("maybe")


PRIMER = dict(title="Stay in the loop", message="Get order updates", accept_button="Allow",
              decline_button="Not now")


def test_present_push_primer(pushwoosh_agent: AgentClient) -> None:
    declined = pushwoosh_agent.present_push_primer(**PRIMER, answer="decline", style="sheet", position="top",
                                                   background_color="#112233")
    assert isinstance(declined, PrimerResult) and declined.outcome == "declined"
    assert declined.presentation is not None
    assert declined.presentation["style"] == "sheet" and declined.presentation["position"] == "top"
    accepted = pushwoosh_agent.present_push_primer(title="t", message="m", acceptButton="Allow",
                                                   declineButton="No", answer="accept")
    assert accepted.outcome == "accepted"
    wait_until(lambda: pushwoosh_agent.status()["notificationAuthorization"] == "authorized")
    suppressed = pushwoosh_agent.present_push_primer(**PRIMER, answer="accept")
    assert suppressed == PrimerResult("suppressed", None)
    with pytest.raises(AgentError) as caught:
        pushwoosh_agent.present_push_primer(title="only a title")
    assert caught.value.code == -32602


def test_status(pushwoosh_agent: AgentClient) -> None:
    status = pushwoosh_agent.status()
    assert status["state"] == "ready"
    assert status["applicationCode"] == APP
    assert status["flagsCount"] == 4
    assert status["flagsSource"] == "network"
    for key in ["hwid", "userId", "appState", "sessionStartedAt", "pushRegistered", "notificationAuthorization",
                "flagsAgeSeconds", "flagsExpireAt", "lastRefreshAt", "lastRefreshError", "consecutiveFailures",
                "nextRefreshAt"]:
        assert key in status


def test_the_package_version_is_the_agents(pushwoosh_agent: AgentClient) -> None:
    assert pushwoosh_agent.status()["version"] == __version__
    with open(f"{REPO}/Sources/AgentCore/Support/Version.swift", encoding="utf-8") as f:
        swift = re.search(r'static let current = "([^"]+)"', f.read())
    assert swift is not None and swift.group(1) == __version__


def test_metrics(pushwoosh_agent: AgentClient) -> None:
    try:
        text = pushwoosh_agent.metrics()
    except MethodNotFound:
        pytest.skip("this pushwoosh-agentd has no socket method 'metrics' yet (-32601)")
    assert "# TYPE" in text
    assert __version__ in text
    assert re.search(r"^process_\w+ ", text, re.MULTILINE)


def test_generic_call(pushwoosh_agent: AgentClient) -> None:
    result = pushwoosh_agent.call("isEnabled", {"key": "promo_banner", "default": True})
    assert result["enabled"] is False and result["reason"] == "DISABLED"
