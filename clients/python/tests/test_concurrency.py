"""One client shared by threads, subscriptions under load, an agent that dies mid-call."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, List, Optional

import pytest

from conftest import APP
from pushwoosh_agent import AgentClient, AgentNotRunning, AgentTimeout, FlagsUpdate
from pushwoosh_agent.plugin import RunningEmulator
from pushwoosh_agent.processes import AgentProcess

pytestmark = pytest.mark.pushwoosh_agent(user_id="alice")


@pytest.mark.filterwarnings("ignore::pushwoosh_agent.FallbackWarning")  # 4,000 defaults on purpose
def test_eight_threads_share_one_client(pushwoosh_agent: AgentClient) -> None:
    """8 threads x 1,000 pipelined calls on one connection; every answer reaches its own caller."""
    barrier = threading.Barrier(8)

    def worker(t: int) -> int:
        barrier.wait()
        wrong = 0
        for i in range(1000):
            if i % 2:
                # The default comes back only to the thread that sent it: any crossed ids show.
                expected = t * 10_000 + i
                wrong += pushwoosh_agent.property("no_such_flag", "n", "number", expected) != expected
            else:
                wrong += pushwoosh_agent.is_enabled("new_checkout", False) is not True
        return wrong

    start = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        wrong = list(pool.map(worker, range(8)))
    elapsed = time.monotonic() - start
    assert wrong == [0] * 8
    assert elapsed < 30, f"8,000 calls took {elapsed:.1f} s"
    assert pushwoosh_agent.connected


def test_a_refresh_waiting_on_the_network_does_not_hold_up_reads(
        pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    pushwoosh_emulator.add_fault("getFeatureFlags", delay_ms=1000)
    refreshed: List[float] = []
    thread = threading.Thread(target=lambda: (pushwoosh_agent.refresh(), refreshed.append(time.monotonic())))
    start = time.monotonic()
    thread.start()
    time.sleep(0.1)
    for _ in range(50):  # pipelined behind the refresh on the same connection
        assert pushwoosh_agent.is_enabled("new_checkout", False) is True
    read_done = time.monotonic()
    thread.join(5)
    assert refreshed and refreshed[0] - start >= 0.9
    assert read_done < refreshed[0], "the reads waited for the refresh"


def _change(emulator: RunningEmulator, agent: AgentClient, i: int) -> None:
    emulator.put_flag(APP, {"key": f"f{i:03}"})
    agent.refresh()


def test_a_subscriber_that_reads_nothing_while_100_changes_arrive_loses_none(
        pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    with pushwoosh_agent.subscribe(timeout=10) as updates:
        for i in range(100):
            _change(pushwoosh_emulator, pushwoosh_agent, i)
        received = [next(updates) for _ in range(100)]
        assert received == [FlagsUpdate("refresh", [f"f{i:03}"]) for i in range(100)]
        assert updates.drain() == []


def test_a_slow_subscriber_thread_gets_every_change_in_order(
        pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    received: List[FlagsUpdate] = []
    backlog: List[int] = []
    subscribed = threading.Event()
    half_produced = threading.Event()
    failure: List[BaseException] = []

    def consume() -> None:
        try:
            with pushwoosh_agent.subscribe(timeout=10) as updates:
                subscribed.set()
                half_produced.wait(30)  # busy elsewhere while the first 50 changes arrive
                backlog.append(updates.backlog)
                for update in updates:
                    time.sleep(0.02)  # then slower than they arrive
                    received.append(update)
                    if len(received) == 100:
                        return
        except BaseException as error:  # noqa: BLE001 - reported below
            failure.append(error)
            subscribed.set()

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert subscribed.wait(10)
    for i in range(100):
        _change(pushwoosh_emulator, pushwoosh_agent, i)
        if i == 49:
            half_produced.set()
    consumer.join(30)
    assert not failure, failure
    assert received == [FlagsUpdate("refresh", [f"f{i:03}"]) for i in range(100)]
    assert backlog[0] >= 49  # (the 50th notification may still be on its way)


def test_every_subscription_gets_every_update_and_closing_one_keeps_the_other(
        pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    with pushwoosh_agent.subscribe(timeout=5) as first:
        with pushwoosh_agent.subscribe(timeout=5) as second:
            _change(pushwoosh_emulator, pushwoosh_agent, 1)
            assert first.get() == second.get() == FlagsUpdate("refresh", ["f001"])
        _change(pushwoosh_emulator, pushwoosh_agent, 2)  # first is still subscribed
        assert first.get() == FlagsUpdate("refresh", ["f002"])
        with pytest.raises(StopIteration):
            next(second)
    with pytest.raises(AgentTimeout):
        with pushwoosh_agent.subscribe() as third:
            third.get(timeout=0.2)  # nothing changes: no update


def test_a_subscription_hears_discarded_and_ends_with_the_context(pushwoosh_agent: AgentClient) -> None:
    with pushwoosh_agent.subscribe(timeout=5) as updates:
        pushwoosh_agent.set_user_id("bob")  # alice's flags are discarded (LS-3)
        first = next(updates)
        assert first.reason == "discarded"
        assert set(first.changed) == {"home_layout", "new_checkout", "promo_banner", "rich_notifications"}
        assert next(updates).reason == "refresh"  # bob's flags arrive
    assert list(updates) == []  # closed: the iterator ends


def test_a_daemon_killed_mid_call_raises_agent_not_running_promptly(
        pushwoosh_agent_process: AgentProcess, pushwoosh_emulator: RunningEmulator) -> None:
    agent = pushwoosh_agent_process.client
    pushwoosh_emulator.add_fault("getFeatureFlags", delay_ms=3000)
    outcomes: List[Optional[BaseException]] = []
    finished: List[float] = []

    def pending_refresh() -> None:
        try:
            agent.refresh(timeout=30)
            outcomes.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcomes.append(error)
        finished.append(time.monotonic())

    callers = [threading.Thread(target=pending_refresh) for _ in range(3)]
    with agent.subscribe() as updates:
        for thread in callers:
            thread.start()
        time.sleep(0.3)  # the refreshes wait on the emulator
        killed = time.monotonic()
        pushwoosh_agent_process.kill()
        for thread in callers:
            thread.join(5)
        assert len(outcomes) == 3
        for outcome in outcomes:
            assert isinstance(outcome, AgentNotRunning), outcome
            assert outcome.socket_path == pushwoosh_agent_process.socket_path
        assert max(finished) - killed < 1.0
        with pytest.raises(AgentNotRunning):
            next(updates)  # the subscription ends with the connection
    with pytest.raises(AgentNotRunning):
        agent.status()  # nobody listens any more
    pushwoosh_emulator.clear_faults()


def test_restart_keeps_the_state_and_the_client_reconnects(
        pushwoosh_agent: AgentClient, pushwoosh_restart_agent: Callable[..., AgentClient],
        pushwoosh_agent_process: AgentProcess) -> None:
    before = pushwoosh_agent.status()
    client = pushwoosh_restart_agent()  # kill -9, start on the same state directory
    assert client is pushwoosh_agent
    after = pushwoosh_agent.status()
    assert after["hwid"] == before["hwid"]
    assert after["userId"] == "alice"
    flag = pushwoosh_agent.get("new_checkout")
    assert flag is not None and flag.rule_id == "r_qa_team"
    assert flag.source in ("cache", "network")
    assert len(pushwoosh_agent_process.exit_statuses) == 1 and pushwoosh_agent_process.exit_statuses[0] == -9
    pushwoosh_restart_agent(kill=False)  # SIGTERM: a clean stop
    assert pushwoosh_agent_process.exit_statuses[-1] == 0
    assert pushwoosh_agent.is_enabled("new_checkout", False) is True


def test_close_fails_pending_calls(pushwoosh_agent_process: AgentProcess,
                                   pushwoosh_emulator: RunningEmulator) -> None:
    client = AgentClient(socket=pushwoosh_agent_process.socket_path, timeout=10)
    pushwoosh_emulator.add_fault("getFeatureFlags", delay_ms=1000)
    errors: List[Any] = []
    thread = threading.Thread(target=lambda: errors.append(_catch(client.refresh)))
    thread.start()
    time.sleep(0.2)
    client.close()
    thread.join(2)
    assert len(errors) == 1 and isinstance(errors[0], AgentNotRunning)


def _catch(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except BaseException as error:  # noqa: BLE001
        return error


def test_subscriptions_and_event_streams_listen_on_one_connection_each_to_its_own(
        pushwoosh_agent: AgentClient, pushwoosh_emulator: RunningEmulator) -> None:
    def accepted() -> str:
        return next(line for line in pushwoosh_agent.metrics().splitlines()
                    if line.startswith('pushwoosh_agent_socket_connections_total{result="accepted"}'))

    before = accepted()
    with pushwoosh_agent.subscribe(timeout=5) as updates:
        with pushwoosh_agent.events("refresh") as stream:   # adds refresh to what the agent sends
            _change(pushwoosh_emulator, pushwoosh_agent, 1)
            assert updates.get() == FlagsUpdate("refresh", ["f001"])
            done = stream.next(timeout=5)                   # any notification: only refreshCompleted comes
            assert done["trigger"] == "manual" and done["sent"] is True
        _change(pushwoosh_emulator, pushwoosh_agent, 2)     # the stream is closed, the subscription hears on
        assert updates.get() == FlagsUpdate("refresh", ["f002"])
        assert updates.backlog == 0
    assert accepted() == before                             # no connection but the client's
    with pytest.raises(AgentTimeout):
        with pushwoosh_agent.events("flags") as flags:      # all closed: the agent was unsubscribed, then
            flags.next(timeout=0.2)                         # subscribed again; nothing has changed since
