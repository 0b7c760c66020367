"""EmulatorClient.rollout_bucket (the emulator's formula) and set_rollout (one rule's percentage)."""

from __future__ import annotations

from typing import Any

import pytest

from pushwoosh_agent import AgentClient, EmulatorClient, EmulatorError, RunningEmulator

APP = "ABCDE-12345"

# The README's table for new_checkout (pinned on the Swift side by RolloutBucketExamples).
EXAMPLES = {"alice": 28, "dave": 13, "frank": 18, "user-1": 13, "user-3": 9, "user-5": 39, "fleet-user-7": 9,
            "bob": 75, "carol": 83, "erin": 95, "user-2": 77, "user-4": 89, "user-6": 77, "fleet-user-0": 80}


def test_rollout_bucket_is_the_emulators_formula() -> None:
    for user, bucket in EXAMPLES.items():
        assert EmulatorClient.rollout_bucket("new_checkout", user) == bucket, user
    assert EmulatorClient("http://127.0.0.1:1").rollout_bucket("new_checkout", "alice") == 28
    assert all(0 <= EmulatorClient.rollout_bucket("f", f"u{i}") < 100 for i in range(200))
    with pytest.raises(TypeError):
        EmulatorClient.rollout_bucket("new_checkout", 7)  # type: ignore[arg-type]


@pytest.mark.pushwoosh_agent(user_id="user-2")
def test_set_rollout_moves_a_user_into_the_rollout(pushwoosh_emulator: RunningEmulator,
                                                   pushwoosh_agent: AgentClient) -> None:
    bucket = pushwoosh_emulator.rollout_bucket("new_checkout", "user-2")
    assert bucket == 77
    assert pushwoosh_agent.is_enabled("new_checkout", False) is False  # 77 is not below 50
    stored = pushwoosh_emulator.set_rollout(APP, "new_checkout", "r_rollout_50", bucket + 1)
    rule = next(r for r in stored["rules"] if r["id"] == "r_rollout_50")
    assert rule["when"] == {"rolloutPercent": bucket + 1}
    assert [r["id"] for r in stored["rules"]] == ["r_qa_team", "r_rollout_50"]  # the rest as it was
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.is_enabled("new_checkout", False) is True
    pushwoosh_emulator.set_rollout(APP, "new_checkout", "r_rollout_50", bucket)
    pushwoosh_agent.refresh()
    assert pushwoosh_agent.is_enabled("new_checkout", False) is False  # 77 is not below 77


def test_set_rollout_refuses_bad_input_and_changes_nothing(pushwoosh_emulator: RunningEmulator) -> None:
    before = pushwoosh_emulator.get_app(APP)
    bad: Any
    for bad in (-1, 100.5, "50", True, None, float("nan")):
        with pytest.raises(ValueError, match="percent must be a number from 0 to 100"):
            pushwoosh_emulator.set_rollout(APP, "new_checkout", "r_rollout_50", bad)
    with pytest.raises(ValueError, match="no flag 'nope'.*new_checkout"):
        pushwoosh_emulator.set_rollout(APP, "nope", "r_rollout_50", 10)
    with pytest.raises(ValueError, match="no rule 'r_nope'.*r_qa_team, r_rollout_50"):
        pushwoosh_emulator.set_rollout(APP, "new_checkout", "r_nope", 10)
    with pytest.raises(EmulatorError) as caught:
        pushwoosh_emulator.set_rollout("NO-SUCH-APP", "new_checkout", "r_rollout_50", 10)
    assert caught.value.status == 404
    assert pushwoosh_emulator.get_app(APP) == before
