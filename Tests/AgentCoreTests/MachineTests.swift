import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// The state machines on their own (docs/architecture.md §2): events at a given `now`, and the actions
/// they return, with no interpreter, transport, store or loop.
struct MachineHarness {
    var machine: AgentMachine
    var now = Now(monotonic: 1_000, wall: Date(timeIntervalSince1970: 1_800_000_000))

    init(_ change: (inout AgentSettings) -> Void = { _ in }) {
        var s = VirtualLoop.defaultSettings()
        change(&s)
        machine = AgentMachine(settings: s, random: SeededRandom(seed: 1), now: now)
    }

    mutating func advance(_ seconds: Seconds) {
        now.monotonic += seconds
        now.wall = now.wall.addingTimeInterval(seconds)
    }

    /// Moves time to the machine's next deadline and fires it.
    mutating func fireNext() -> [AgentAction] {
        let deadline = machine.nextDeadline!
        advance(max(0, deadline - now.monotonic))
        return machine.fireDueTimers(now: now)
    }
}

extension [AgentAction] {
    /// The calls sent, by method name.
    var sent: [String] {
        compactMap { if case .send(let r, _) = $0 { String(r.url.split(separator: "/").last!) } else { nil } }
    }
    func call(_ method: String) -> Call? {
        for case .send(let r, let call) in self where r.method?.rawValue == method { return call }
        return nil
    }
    func request(_ method: String) -> HTTPRequest? {
        for case .send(let r, _) in self where r.method?.rawValue == method { return r }
        return nil
    }
    var saved: PersistentState? {
        for case .persist(let s) in self { return s }
        return nil
    }
    var events: [AgentEvent] { compactMap { if case .notify(let e) = $0 { e } else { nil } } }
}

@Suite struct RefreshMachineTests {
    /// A started machine whose first flags request was answered with `flags`.
    static func serving(_ flags: [FeatureFlag], _ change: (inout AgentSettings) -> Void = { _ in }) -> MachineHarness {
        var h = MachineHarness(change)
        let started = h.machine.start(StoreLoad(state: nil), now: h.now)
        h.advance(0.05)
        _ = h.machine.answered(started.call("getFeatureFlags")!, ScriptedTransport.flags(flags), now: h.now)
        return h
    }

    @Test("RF-1, SE-2: the first start saves the new HWID, opens the app and requests flags")
    func startSendsAndSaves() {
        var h = MachineHarness()
        let actions = h.machine.start(StoreLoad(state: nil), now: h.now)
        #expect(actions.first == .persist(h.machine.state))  // the save comes first
        #expect(actions.saved?.hwid.isEmpty == false)
        #expect(actions.sent == ["applicationOpen", "getFeatureFlags"])
        #expect(actions.call("getFeatureFlags") == .flags(generation: 0))
    }

    @Test("LS-1, ST-1: a complete answer is saved and notified; the hourly timer is armed (RF-2, RF-12)")
    func answerSavesNotifiesAndArmsTheHour() {
        var h = MachineHarness()
        let started = h.machine.start(StoreLoad(state: nil), now: h.now)
        let sentAt = h.now.monotonic
        let actions = h.machine.answered(started.call("getFeatureFlags")!, ScriptedTransport.flags([checkout]), now: h.now)
        #expect(actions.saved?.flags?.flags["new_checkout"] == checkout)
        #expect(actions.events == [.refreshSucceeded(trigger: .sessionStart, flagCount: 1, partial: false),
                                   .flagsChanged(reason: .refresh, keys: ["new_checkout"])])
        let next = h.machine.nextDeadline!
        #expect(next >= sentAt + 3600 && next < sentAt + 3600 * 1.1)
        #expect(h.fireNext().sent == ["getFeatureFlags"])
    }

}

@Suite struct ValidityMachineTests {
    @Test("ST-3, LS-3: expiry is a timer's action: at the deadline the flags leave memory and disk, with a reason")
    func expiryIsATimersAction() {
        var h = RefreshMachineTests.serving([checkout]) { $0.flags.storedFlagsLifetime = 600 }
        let receivedAt = h.now.monotonic
        #expect(h.machine.nextDeadline == receivedAt + 600)
        h.advance(600)
        let actions = h.machine.fireDueTimers(now: h.now)
        #expect(actions.saved?.flags == nil)
        #expect(actions.events == [.flagsChanged(reason: .expired, keys: ["new_checkout"])])
        #expect(h.machine.state.flags == nil)
    }

    // FF-3, ST-3: a read past the lifetime (a wall-clock step) answers "not ready" and changes nothing;
    // the next event removes the flags.
    @Test func readsNeverWrite() {
        var h = RefreshMachineTests.serving([checkout])
        let before = h.machine.state
        let deadline = h.machine.nextDeadline
        h.now.wall = h.now.wall.addingTimeInterval(25 * 3600)
        #expect(h.machine.get("new_checkout", now: h.now).value == nil)
        #expect(h.machine.isEnabled("new_checkout", default: false, now: h.now).value == false)
        #expect(h.machine.servedFlagKeys(now: h.now) == nil)
        #expect(h.machine.status(now: h.now).flagsCount == 0)
        #expect(h.machine.state == before)
        #expect(h.machine.nextDeadline == deadline)
        let next = h.machine.setNotificationAuthorization(.authorized, now: h.now)
        #expect(next.events == [.flagsChanged(reason: .expired, keys: ["new_checkout"])])
        #expect(next.saved?.flags == nil)
    }

    // The same through the interpreter: a read neither saves nor notifies.
    @Test func agentReadsNeitherSaveNorNotify() {
        let loop = VirtualLoop.serving([checkout])
        loop.transport.script = { _ in .hold }
        let saves = loop.store.saveCount, events = loop.log.events.count, requests = loop.transport.requests.count
        loop.clock.stepWall(by: 25 * 3600)
        #expect(loop.agent.get("new_checkout").value == nil)
        #expect(loop.agent.property("new_checkout", "max_items", type: .number, default: 1).value == 1)
        #expect(loop.agent.status().flagsCount == 0)
        #expect(loop.store.saveCount == saves)
        #expect(loop.log.events.count == events)
        #expect(loop.transport.requests.count == requests)
        #expect(loop.store.committed?.flags != nil)
    }

    @Test("ST-2: stored flags of another user are dropped at start and never served")
    func startDropsAnotherUsersFlags() {
        let h = RefreshMachineTests.serving([checkout])
        var stored = h.machine.state
        stored.userId = "mallory"
        var fresh = MachineHarness { $0.device.initialAppState = .background }
        let actions = fresh.machine.start(StoreLoad(state: stored), now: h.now)
        #expect(actions.saved?.flags == nil)
        #expect(fresh.machine.get("new_checkout", now: h.now).value == nil)
    }
}

@Suite struct SessionMachineTests {
    @Test("SE-1, RF-1, RF-2: the background stops the hourly timer; a return after 30 minutes starts a session")
    func sessions() {
        var h = RefreshMachineTests.serving([checkout]) { $0.flags.storedFlagsLifetime = 1e9 }
        let background = h.machine.setAppState(.background, now: h.now)
        #expect(!background.sessionStarted && background.actions.isEmpty)
        #expect(h.machine.status(now: h.now).nextRefreshAt == nil)
        h.advance(1799)
        let early = h.machine.setAppState(.active, now: h.now)
        #expect(!early.sessionStarted && early.actions.sent.isEmpty)
        _ = h.machine.setAppState(.background, now: h.now)
        h.advance(1800)
        let late = h.machine.setAppState(.active, now: h.now)
        #expect(late.sessionStarted)
        #expect(late.actions.sent == ["getFeatureFlags"])  // applicationOpen once per process
    }
}

@Suite struct RegistrationMachineTests {
    @Test("SE-3: a failed registerDevice is retried after 1 s with X-Retry-Count: 1; success triggers RF-3")
    func deviceRetriesAndRefresh() {
        var h = RefreshMachineTests.serving([checkout])
        let first = h.machine.registerForPushNotifications(now: h.now)
        #expect(first.granted)
        #expect(first.actions.saved?.push?.token == first.pushToken)
        let call = first.actions.call("registerDevice")!
        _ = h.machine.answered(call, ScriptedTransport.http(503), now: h.now)
        #expect(h.machine.nextDeadline == h.now.monotonic + 1)
        let retry = h.fireNext()
        #expect(retry.request("registerDevice")?.header("X-Retry-Count") == "1")
        let done = h.machine.answered(call, ScriptedTransport.ok(), now: h.now)
        #expect(done.saved?.push?.registeredAt == h.now.wall)
        #expect(done.sent == ["getFeatureFlags"])  // RF-3
    }

    @Test("SE-4: registerUser once within 24 h; its success is saved")
    func userRegistration() {
        var h = RefreshMachineTests.serving([checkout])
        let set = h.machine.setUserId("alice", now: h.now)
        #expect(set.saved?.userId == "alice")
        let saved = h.machine.answered(set.call("registerUser")!, ScriptedTransport.ok(), now: h.now)
        #expect(saved.saved?.registeredUser?.userId == "alice")
        #expect(h.machine.setUserId("alice", now: h.now).sent.isEmpty)
    }
}

@Suite struct ImpressionMachineTests {
    @Test("IM-2, IM-3, IM-4: one send per flag, rule and state; a failed send frees it again")
    func oncePerSessionUnlessFailed() {
        var h = RefreshMachineTests.serving([checkout])
        let first = h.machine.logImpression("new_checkout", now: h.now)
        #expect(first.logged && first.actions.sent == ["postEvent"])
        #expect(!h.machine.logImpression("new_checkout", now: h.now).logged)
        #expect(!h.machine.logImpression("absent", now: h.now).logged)
        let failed = h.machine.answered(first.actions.call("postEvent")!, ScriptedTransport.http(500), now: h.now)
        #expect(failed.events.count == 1)
        #expect(h.machine.logImpression("new_checkout", now: h.now).logged)
    }
}

/// The interpreter (`Agent`): the one entry point arms the timer and notifies last.
@Suite struct InterpreterTests {
    // Every call re-arms the scheduler at the machine's next deadline; nobody else has to.
    @Test func everyCallArmsTheTimer() {
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.timer.deadline == loop.agent.nextDeadline)
        loop.agent.setAppState(.background)
        #expect(loop.timer.deadline == loop.agent.nextDeadline)
        loop.agent.setAppState(.active)
        _ = loop.agent.registerForPushNotifications()
        #expect(loop.timer.deadline == loop.agent.nextDeadline)
        loop.transport.script = { _ in .answer(ScriptedTransport.http(503)) }
        loop.agent.setUserId("bob")
        loop.settle()  // the answers arrive: backoff and registration retries move the deadline
        #expect(loop.timer.deadline == loop.agent.nextDeadline)
    }

    @Test("LS-1, ST-6: a subscriber hears of a change once it is complete: saved, timer armed")
    func notificationsComeAfterTheSave() {
        let clock = VirtualClock()
        let transport = ScriptedTransport(clock: clock) { _ in .answer(ScriptedTransport.flags([checkout])) }
        let store = MemoryStore(), timer = VirtualTimer()
        var seen: [(saved: Bool, armed: Bool)] = []
        var agent: Agent?
        agent = Agent(settings: VirtualLoop.defaultSettings(), clock: clock, transport: transport, store: store,
                      scheduler: timer, random: SeededRandom(seed: 1)) { event in
            guard case .flagsChanged = event else { return }
            seen.append((store.committed?.flags?.flags["new_checkout"] == checkout, timer.deadline == agent?.nextDeadline))
        }
        agent?.start()
        transport.deliverDue()
        #expect(seen.count == 1)
        #expect(seen.allSatisfy { $0.saved && $0.armed })
    }
}
