import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// The deterministic doubles every virtual-time test stands on: if one of them lied (an
/// answer delivered early, a failed save that still commits, a timer fired out of order),
/// the rule tests built on it would pass for the wrong reason.
@Suite struct TestDoubleTests {
    @Test func virtualClockMovesOnlyWhenTold() {
        let clock = VirtualClock(monotonic: 10, wall: Date(timeIntervalSince1970: 100))
        clock.advance(by: 5)
        #expect(clock.monotonic == 15 && clock.wall == Date(timeIntervalSince1970: 105))
        clock.advance(to: 12)  // never back
        #expect(clock.monotonic == 15)
        clock.stepWall(by: -50)  // the wall alone
        #expect(clock.monotonic == 15 && clock.wall == Date(timeIntervalSince1970: 55))
        clock.reboot(monotonicOrigin: 0)
        #expect(clock.monotonic == 0 && clock.wall == Date(timeIntervalSince1970: 55))
    }

    /// ST-6 as the real store keeps it: a failed save leaves the committed state as it was.
    @Test func memoryStoreFailsLikeADisk() throws {
        let store = MemoryStore()
        var state = PersistentState(hwid: "H")
        try store.save(state)
        state.userId = "alice"
        store.fault = .diskFull
        #expect(throws: MemoryStore.InjectedError.self) { try store.save(state) }
        store.fault = .crashBeforeRename
        #expect(throws: MemoryStore.InjectedError.self) { try store.save(state) }
        #expect(try store.load().state?.userId == nil)
        #expect(store.saveCount == 1)
        store.damageOnLoad = "flipped byte"
        #expect(try store.load() == StoreLoad(state: nil, damage: "flipped byte"))
        #expect(try store.load().state?.hwid == "H")  // reported once
    }

    /// Answers come after their latency, in time then send order, never inside `send`;
    /// held requests wait for the test; a restart loses what is in flight.
    @Test func scriptedTransportDeliversInTimeOrder() {
        let clock = VirtualClock()
        let transport = ScriptedTransport(clock: clock) { r in
            switch r.method {
            case "getFeatureFlags": .answer(ScriptedTransport.ok(), after: 2)
            case "registerDevice": .hold
            default: .answer(ScriptedTransport.ok(["n": 1]), after: 1)
            }
        }
        var order: [String] = []
        func send(_ method: PushwooshAPI.Method) {
            transport.send(HTTPRequest(url: "http://h/json/1.3/\(method.rawValue)", headers: [], body: Data(), timeout: 5, method: method)) { _ in
                order.append(method.rawValue)
            }
        }
        send(.getFeatureFlags)
        send(.applicationOpen)
        send(.postEvent)
        send(.registerDevice)
        #expect(order.isEmpty && transport.count("getFeatureFlags") == 1 && transport.requests.count == 4)
        #expect(transport.nextDelivery == clock.monotonic + 1)
        clock.advance(by: 1)
        #expect(transport.deliverDue() == 2)
        #expect(order == ["applicationOpen", "postEvent"])
        clock.advance(by: 5)
        transport.deliverDue()
        #expect(order.last == "getFeatureFlags" && transport.heldCount("registerDevice") == 1)
        transport.answerHeld("registerDevice", with: ScriptedTransport.ok())
        transport.deliverDue()
        #expect(order.last == "registerDevice" && transport.heldCount() == 0)
        send(.getFeatureFlags)
        transport.dropPending()
        clock.advance(by: 10)
        #expect(transport.deliverDue() == 0)
    }

    /// The agent's timers and the transport's answers run in time order, and the agent
    /// re-arms its own timer: the hourly refresh (RF-2) comes about once an hour.
    @Test func virtualLoopRunsTimersAndAnswersInTimeOrder() {
        let loop = VirtualLoop()
        loop.transport.script = { r in .answer(r.method == "getFeatureFlags" ? ScriptedTransport.flags([]) : ScriptedTransport.ok(), after: 0.5) }
        _ = loop.agent.setAppState(.active)
        loop.run(for: 10 * 3600 + 60)
        let times = loop.transport.requests("getFeatureFlags").map(\.sentAt)
        #expect((10...12).contains(times.count), "\(times.count) flag requests in 10 h")
        #expect(zip(times, times.dropFirst()).allSatisfy { $1 > $0 })
        #expect(loop.agent.status().state == .ready)
        let before = loop.transport.requests.count
        loop.restart()
        loop.settle()
        #expect(loop.clock.monotonic == 5)  // the monotonic clock restarted
        #expect(loop.transport.requests.count >= before)
    }
}
