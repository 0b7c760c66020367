"""What a QA engineer's test of a feature flag looks like; copy it and adapt it.

It needs only ``pip install ./clients/python`` (which brings the pytest plugin
with the ``pushwoosh_emulator`` and ``pushwoosh_agent`` fixtures) and the
binaries on PATH, or ``pytest --pushwoosh-bin DIR`` (an absolute DIR). One emulator
(with the example application ``ABCDE-12345``) serves the whole pytest session and is
reset before each test that uses it (docs/python-client.md G); each test gets its own
agent. A read that falls back to the default warns (``FallbackWarning``); run with
``--pushwoosh-strict`` to make it fail instead.
"""

from __future__ import annotations

import pytest

from pushwoosh_agent import AgentClient, RefreshError
from pushwoosh_agent.plugin import RunningEmulator

APP = "ABCDE-12345"


@pytest.mark.pushwoosh_agent(user_id="alice")  # alice is in new_checkout's QA rule
def test_kill_switch_user_switch_and_outage(pushwoosh_emulator: RunningEmulator,
                                            pushwoosh_agent: AgentClient) -> None:
    agent, emulator = pushwoosh_agent, pushwoosh_emulator
    assert agent.is_enabled("new_checkout", False)
    assert agent.property("new_checkout", "max_items", "number", 0) == 10

    # 1. Kill the flag on the server: after a refresh the device reads it off.
    emulator.kill(APP, "new_checkout")
    agent.refresh()
    assert not agent.is_enabled("new_checkout", True)
    assert agent.get("new_checkout").rule_id == ""  # type: ignore[union-attr]
    emulator.unkill(APP, "new_checkout")
    agent.refresh()
    assert agent.is_enabled("new_checkout", False)

    # 2. Switch users: alice's flags are gone at once, before carol's arrive.
    emulator.add_fault("getFeatureFlags", delay_ms=500)  # hold carol's flags request a little
    agent.set_user_id("carol")
    assert agent.get("new_checkout") is None
    agent.refresh()  # waits for carol's flags
    assert agent.get("new_checkout").rule_id != "r_qa_team"  # type: ignore[union-attr]
    assert agent.property("new_checkout", "max_items", "number", 0) != 10

    # 3. The server fails with 503: the refresh reports it, the stored flags still serve.
    served = agent.is_enabled("new_checkout", False)
    emulator.add_fault("getFeatureFlags", http=503)
    with pytest.raises(RefreshError) as failure:
        agent.refresh()
    assert failure.value.code == 503
    assert agent.is_enabled("new_checkout", not served) == served
    assert agent.status()["state"] == "stale"
