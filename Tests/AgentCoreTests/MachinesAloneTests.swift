@testable import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// `RefreshMachine` alone (docs/rules.md §3): events given a `RefreshWorld`, and the outputs they return.
@Suite struct RefreshMachineAloneTests {
    var machine = RefreshMachine(flags: FeatureFlagSettings())
    var world = RefreshWorld(now: Now(monotonic: 1_000, wall: Date(timeIntervalSince1970: 1_800_000_000)),
                             active: true, flagsValid: false, canRequest: true, deviceOffset: 100)
    var random = SeededRandom(seed: 1)
    static let ok: Result<(PushwooshAPI.FlagsResponse, String?), PushwooshAPI.Failure> =
        .success((PushwooshAPI.FlagsResponse(flags: [:], partial: false), nil))
    static func failure(_ code: Int, retryAfter: Seconds? = nil) -> Result<(PushwooshAPI.FlagsResponse, String?), PushwooshAPI.Failure> {
        .failure(PushwooshAPI.Failure(code: code, message: "HTTP \(code)", retryable: code >= 500 || code == 429, retryAfter: retryAfter))
    }

    mutating func advance(to t: Seconds) {
        world.now.wall = world.now.wall.addingTimeInterval(t - world.now.monotonic)
        world.now.monotonic = t
    }

    @Test("RF-9: one request; later callers join it and complete with it")
    mutating func singleFlightAndWaiters() {
        #expect(machine.request(.sessionStart, world, &random) == [.send(generation: 0, retryCount: 0)])
        #expect(machine.manual(Waiter(1), world, &random).isEmpty)
        #expect(machine.automatic(.periodic, world, &random).isEmpty)
        let out = machine.answered(Self.ok, generation: 0, world, &random)
        #expect(out.last == .complete(Waiter(1), nil))
        #expect(machine.inFlight == nil)
    }

    @Test("RF-4: after a new identity, the answer of the old generation is dropped and the request sent again")
    mutating func generations() {
        _ = machine.request(.sessionStart, world, &random)
        machine.identityChanged(keepBackoff: false)
        #expect(machine.request(.userChange, world, &random).isEmpty)  // joins (RF-9)
        let out = machine.answered(Self.ok, generation: 0, world, &random)
        #expect(out == [.send(generation: 1, retryCount: 0)])
    }

    @Test("RF-2, RF-12: the hourly deadline is the slot an hour past the request plus the offset, moved by 1% at most")
    mutating func hourly() {
        _ = machine.request(.sessionStart, world, &random)
        let d = machine.periodicDeadline!
        #expect(abs(d - (1_000 + 3600 + 100)) <= 36)
        // The hourly request keeps the slots: the next one is two hours past the start, not
        // an hour past this one (nothing accumulates).
        _ = machine.answered(Self.ok, generation: 0, world, &random)
        advance(to: d)
        #expect(machine.fireDueTimers(world, &random) == [.send(generation: 0, retryCount: 0)])
        #expect(abs(machine.periodicDeadline! - (1_000 + 2 * 3600 + 100)) <= 36)
        world.active = false
        machine.appStateChanged(world, &random)
        #expect(machine.periodicDeadline == nil)
    }

    @Test("RF-6: inside the window a manual refresh is answered from the store; automatic ones are not held")
    mutating func throttle() {
        world.flagsValid = true
        _ = machine.request(.sessionStart, world, &random)
        _ = machine.answered(Self.ok, generation: 0, world, &random)
        advance(to: 1_299)
        // Answered at once, and subscribers told it was not sent (AgentEvent.refreshNotSent).
        #expect(machine.manual(Waiter(1), world, &random) == [.notify(.refreshNotSent(error: nil)), .complete(Waiter(1), nil)])
        #expect(machine.automatic(.pushRegistration, world, &random) == [.send(generation: 0, retryCount: 0)])
    }

    @Test("RF-10: backoff at least a minute, X-Retry-Count on the retry, Retry-After holds every automatic trigger")
    mutating func backoffAndRetryAfter() {
        _ = machine.request(.sessionStart, world, &random)
        _ = machine.answered(Self.failure(500), generation: 0, world, &random)
        let retry = machine.retryDeadline!
        #expect(retry >= 1_060)
        advance(to: retry)
        #expect(machine.fireDueTimers(world, &random) == [.send(generation: 0, retryCount: 1)])
        _ = machine.answered(Self.failure(503, retryAfter: 900), generation: 0, world, &random)
        #expect(machine.retryDeadline! >= retry + 900)
        advance(to: retry + 10)
        #expect(machine.automatic(.pushRegistration, world, &random).isEmpty)  // held until Retry-After ends
    }

    @Test("RF-11: 401 stops automatic refreshes; a manual refresh lifts the stop; so does a reload")
    mutating func fatal() {
        _ = machine.request(.sessionStart, world, &random)
        let out = machine.answered(Self.failure(401), generation: 0, world, &random)
        #expect(out == [.notify(.refreshFailed(trigger: .sessionStart, error: RefreshError(code: 401, message: "HTTP 401"), retryIn: nil))])
        #expect(machine.fatal && machine.deadlines.allSatisfy { $0 == nil })
        let wasFatal = machine.reconfigure(FeatureFlagSettings())
        #expect(wasFatal)
        #expect(!machine.fatal)
    }

    @Test("RF-8: with a URL that does not end with json/1.3/, nothing is sent and a refresh fails with 0")
    mutating func proxyURL() {
        world.canRequest = false
        let out = machine.manual(Waiter(3), world, &random)
        guard out.count == 2, case .notify(.refreshNotSent(let told?)) = out[0], case .complete(Waiter(3), let error?) = out[1] else {
            Issue.record("\(out)")
            return
        }
        #expect(error.code == 0)
        #expect(told == error)
        #expect(machine.requestsSent == 0)
    }
}

/// `RegistrationMachine` alone (SE-3, SE-4, RF-3): events on a `PersistentState`, and the outputs.
@Suite struct RegistrationMachineAloneTests {
    var machine = RegistrationMachine()
    var state = PersistentState(hwid: "HWID")
    var now = Now(monotonic: 1_000, wall: Date(timeIntervalSince1970: 1_800_000_000))
    var random = SeededRandom(seed: 1)
    static let ok: Result<PushwooshAPI.Success, PushwooshAPI.Failure> = PushwooshAPI.classify(ScriptedTransport.ok())
    static let unavailable: Result<PushwooshAPI.Success, PushwooshAPI.Failure> = PushwooshAPI.classify(ScriptedTransport.http(503))

    @Test("SE-3: the prompt is answered, a token made and sent; retries after 1, 5, 10 s, then none")
    mutating func deviceChainAndRetries() throws {
        let r = machine.register(&state, authorization: .notDetermined, prompt: .allow, flagsRequestsSent: 3, now: now, &random)
        #expect(r.granted && state.notificationAuthorization == .authorized)
        let token = try #require(r.pushToken)
        #expect(r.outputs == [.registerDevice(token: token, retryCount: 0)])
        var gaps: [Seconds] = []
        for attempt in 1...4 {
            _ = machine.deviceAnswered(token, Self.unavailable, &state, flagsRequestsSent: 3, now: now)
            guard let d = machine.retryDeadline else { break }
            gaps.append(d - now.monotonic)
            now.monotonic = d
            #expect(machine.fireDueTimers(state, now: now) == [.registerDevice(token: token, retryCount: attempt)])
        }
        #expect(gaps == [1, 5, 10])
    }

    @Test("RF-3: a success asks for a refresh only when no flags request followed the registration")
    mutating func successRefreshesOnlyWithoutALaterRequest() {
        let first = machine.register(&state, authorization: .authorized, prompt: .allow, flagsRequestsSent: 3, now: now, &random)
        let token = first.pushToken!
        let done = machine.deviceAnswered(token, Self.ok, &state, flagsRequestsSent: 3, now: now)
        #expect(done == [.notify(.callFinished(method: .registerDevice, error: nil)), .refreshFlags])
        #expect(state.push?.registeredAt == now.wall)
        // Within 24 h nothing changed: nothing is sent.
        #expect(machine.register(&state, authorization: .authorized, prompt: .allow, flagsRequestsSent: 4, now: now, &random).outputs.isEmpty)
        state.push?.notificationTypes = 0  // something changed: a new chain
        let second = machine.register(&state, authorization: .authorized, prompt: .allow, flagsRequestsSent: 4, now: now, &random)
        #expect(second.outputs.count == 1)
        #expect(machine.deviceAnswered(token, Self.ok, &state, flagsRequestsSent: 5, now: now).count == 1)  // a request followed
    }

    @Test("SE-4: registerUser once per id within 24 h")
    mutating func userOncePerDay() {
        #expect(machine.setUser("alice", registered: nil, now: now) == [.registerUser("alice")])
        _ = machine.userAnswered("alice", Self.ok, &state, now: now)
        #expect(machine.setUser("alice", registered: state.registeredUser, now: now).isEmpty)
        #expect(machine.setUser("bob", registered: state.registeredUser, now: now) == [.registerUser("bob")])
        now.wall = now.wall.addingTimeInterval(24 * 3600)
        #expect(machine.setUser("alice", registered: state.registeredUser, now: now) == [.registerUser("alice")])
    }

    @Test("SE-3: a denied prompt grants nothing and sends nothing")
    mutating func deniedPrompt() {
        let r = machine.register(&state, authorization: .notDetermined, prompt: .deny, flagsRequestsSent: 0, now: now, &random)
        #expect(!r.granted && r.pushToken == nil && r.outputs.isEmpty)
        #expect(state.notificationAuthorization == .denied)
    }
}

/// `ImpressionLedger` alone (IM-3, IM-4).
@Suite struct ImpressionLedgerAloneTests {
    @Test("IM-3, IM-4: once per flag, rule and state, unless the send failed for the current user")
    func oncePerFlagRuleAndStateUnlessTheSendFailed() {
        var ledger = ImpressionLedger()
        #expect(ledger.log(nil) == nil)  // IM-3: none without a flag
        let sent = ledger.log(checkout)
        #expect(sent == Impression(flag: "new_checkout", rule: "r_1a2b3c4d", enabled: true))
        #expect(ledger.log(checkout) == nil)
        var off = checkout
        off.isEnabled = false
        #expect(ledger.log(off) != nil)  // another state
        ledger.answered(sent!, failed: true, sentIn: 0, current: 1)  // failed for a previous user: not resent
        #expect(ledger.log(checkout) == nil)
        ledger.answered(sent!, failed: true, sentIn: 1, current: 1)  // IM-4
        #expect(ledger.log(checkout) != nil)
        ledger.reset()
        #expect(ledger.log(off) != nil)
    }
}
