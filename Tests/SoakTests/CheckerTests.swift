import AgentCore
import AgentPosix
import Foundation
import HarnessSupport
import Soak
import Testing

private func flagObs(agent: Int = 0, key: String = "f", sent: Time, age: Double?, user: String = "alice",
                     flag: ServedFlag? = ServedFlag(key: "f", isEnabled: true, ruleId: "r1"),
                     errorCode: String? = nil, source: String = "network") -> FlagObservation {
    FlagObservation(agent: agent, hwid: "H", key: key, sent: sent, received: sent + 0.002, expectedUserId: user,
                    flag: flag, reason: flag == nil ? "ERROR" : "TARGETING_MATCH", errorCode: errorCode,
                    source: age == nil ? "none" : source, ageSeconds: age)
}

private func call(_ t: Time, user: String = "alice", status: Int? = 200, fault: String? = nil) -> DeviceCall {
    DeviceCall(time: t, method: "getFeatureFlags", hwid: "H", userId: user, status: status, fault: fault)
}

@Suite struct LifetimeCheckerTests {
    @Test func servedFlagsWithinTheirLifetimePass() {
        var c = LifetimeChecker(lifetime: 60)
        #expect(c.check(flagObs(sent: 100, age: 59.9)).isEmpty)
        #expect(c.check(flagObs(sent: 100, age: 60.0)).isEmpty)  // rounded to ms by the agent
        #expect(c.check(flagObs(sent: 100, age: nil, flag: nil, errorCode: "PROVIDER_NOT_READY")).isEmpty)
        #expect(c.check(flagObs(sent: 100, age: 3, flag: nil, errorCode: "FLAG_NOT_FOUND")).isEmpty)
        #expect(c.checks == 4)
    }

    @Test func flagsPastTheirLifetimeFail() {
        var c = LifetimeChecker(lifetime: 60)
        let v = c.check(flagObs(sent: 100, age: 60.2))
        #expect(v.count == 1 && v[0].invariant == "lifetime")
    }

    @Test func aFlagWithoutAgeFails() {
        var c = LifetimeChecker(lifetime: 60)
        #expect(c.check(flagObs(sent: 100, age: nil)).first?.invariant == "lifetime")
    }

    @Test func statusExpiryMustBeReceiptPlusLifetime() {
        var c = LifetimeChecker(lifetime: 60)
        func status(age: Double?, expireAt: Time?, state: String = "ready") -> StatusObservation {
            StatusObservation(agent: 0, sent: 1000, received: 1000.01, expectedUserId: "a", expectedActive: true, state: state,
                              userId: "a", appState: "active", flagsCount: age == nil ? 0 : 3, flagsAgeSeconds: age, flagsExpireAt: expireAt)
        }
        #expect(c.check(status(age: 10, expireAt: 1050)).isEmpty)
        #expect(c.check(status(age: nil, expireAt: nil, state: "notReady")).isEmpty)
        #expect(c.check(status(age: 10, expireAt: 1060)).count == 1)   // 10 s too late
        #expect(c.check(status(age: 10, expireAt: nil)).count == 1)
        #expect(c.check(status(age: 61, expireAt: 999)).count == 1)
        #expect(c.check(status(age: nil, expireAt: nil, state: "ready")).count == 1)
    }
}

@Suite struct StatusCheckerTests {
    @Test func statusMustShowTheRunnersUserAndState() {
        var c = StatusChecker()
        func s(user: String, appState: String = "active", state: String = "ready") -> StatusObservation {
            StatusObservation(agent: 1, sent: 0, received: 0, expectedUserId: "bob", expectedActive: true, state: state,
                              userId: user, appState: appState, flagsCount: 0, flagsAgeSeconds: nil, flagsExpireAt: nil)
        }
        #expect(c.check(s(user: "bob")).isEmpty)
        #expect(c.check(s(user: "alice")).first?.invariant == "user")
        #expect(c.check(s(user: "bob", appState: "background")).first?.invariant == "status")
        #expect(c.check(s(user: "bob", state: "fatal")).first?.invariant == "status")
    }
}

@Suite struct ProvenanceCheckerTests {
    let calls = [call(50, user: "bob"), call(100, user: "alice"), call(130, user: "alice", status: 200, fault: "garbage")]

    @Test func flagsFromTheCurrentUsersResponsePass() {
        var c = ProvenanceChecker()
        // Received at 100.01 (asked at 110, 9.99 s old): produced by the call at 100, for alice.
        #expect(c.check(flagObs(sent: 110, age: 9.99), calls: calls, changes: []).isEmpty)
    }

    @Test func anotherUsersFlagsFail() {
        var c = ProvenanceChecker()
        let v = c.check(flagObs(sent: 110, age: 9.99, user: "carol"), calls: calls, changes: [])
        #expect(v.map(\.invariant) == ["user"])
        // Flags received at 50.01 come from bob's request: wrong for alice.
        let old = c.check(flagObs(sent: 70, age: 19.99), calls: calls, changes: [])
        #expect(old.map(\.invariant) == ["user"])
    }

    @Test func flagsFromAFailedResponseFail() {
        var c = ProvenanceChecker()
        // Received at 130.01: the request before was answered with garbage.
        let v = c.check(flagObs(sent: 140, age: 9.99), calls: calls, changes: [])
        #expect(v.map(\.invariant) == ["provenance"])
        // And flags with no request at all before them.
        #expect(c.check(flagObs(sent: 40, age: 1), calls: calls, changes: []).map(\.invariant) == ["provenance"])
    }

    @Test func aKilledFlagMustBeOffAfterTheNextSuccessfulRefresh() {
        var c = ProvenanceChecker()
        let killed = [FlagChange(key: "f", start: 0, end: 0, killed: false, archived: false),
                      FlagChange(key: "f", start: 80, end: 80.01, killed: true, archived: false)]
        let on = c.check(flagObs(sent: 110, age: 9.99), calls: calls, changes: killed)
        #expect(on.map(\.invariant) == ["killed"])
        let off = ServedFlag(key: "f", isEnabled: false, ruleId: "")
        #expect(c.check(flagObs(sent: 110, age: 9.99, flag: off), calls: calls, changes: killed).isEmpty)
        // Killed after the request: the old state may still be served.
        let late = [FlagChange(key: "f", start: 0, end: 0, killed: false, archived: false),
                    FlagChange(key: "f", start: 105, end: 105.01, killed: true, archived: false)]
        #expect(c.check(flagObs(sent: 110, age: 9.99), calls: calls, changes: late).isEmpty)
        #expect(c.killedChecks == 3)
    }

    @Test func anArchivedFlagMustBeAbsentAndALiveOnePresent() {
        var c = ProvenanceChecker()
        let archived = [FlagChange(key: "f", start: 80, end: 80.01, killed: false, archived: true)]
        #expect(c.check(flagObs(sent: 110, age: 9.99), calls: calls, changes: archived).map(\.invariant) == ["killed"])
        #expect(c.check(flagObs(sent: 110, age: 9.99, flag: nil, errorCode: "FLAG_NOT_FOUND"), calls: calls, changes: archived).isEmpty)
        let live = [FlagChange(key: "f", start: 0, end: 0, killed: false, archived: false)]
        #expect(c.check(flagObs(sent: 110, age: 9.99, flag: nil, errorCode: "FLAG_NOT_FOUND"), calls: calls, changes: live).map(\.invariant) == ["killed"])
    }

    @Test func anAmbiguousProducerIsNotJudgedOnFlagState() {
        var c = ProvenanceChecker()
        // Answered slowly (sent 100, received 101) with age 0.5: receipt between 99.5 and 100.5, around the call at 100.
        let o = FlagObservation(agent: 0, hwid: "H", key: "f", sent: 100, received: 101, expectedUserId: "alice",
                                flag: ServedFlag(key: "f", isEnabled: true, ruleId: "r1"), reason: "TARGETING_MATCH",
                                source: "network", ageSeconds: 0.5)
        let killed = [FlagChange(key: "f", start: 70, end: 70.01, killed: true, archived: false)]
        #expect(c.check(o, calls: calls, changes: killed).isEmpty)
    }

    @Test func theUserFlagMustNameTheCurrentUser() {
        var c = ProvenanceChecker(userFlag: "soak_user", userPool: ["alice", "bob"])
        let mine = ServedFlag(key: "soak_user", isEnabled: true, ruleId: "r_u_alice", properties: ["user": "alice"])
        let theirs = ServedFlag(key: "soak_user", isEnabled: true, ruleId: "r_u_bob", properties: ["user": "bob"])
        #expect(c.check(flagObs(key: "soak_user", sent: 110, age: 9.99, flag: mine), calls: calls, changes: []).isEmpty)
        #expect(c.check(flagObs(key: "soak_user", sent: 110, age: 9.99, flag: theirs), calls: calls, changes: []).map(\.invariant) == ["user"])
    }
}

@Suite struct ScheduleCheckerTests {
    let timings = Timings(lifetime: 60, sessionGap: 10, refresh: 15, throttle: 5)
    let up = [AgentAction(agent: 0, kind: .started, start: 0, end: 0.5)]

    @Test func requestsWithinTheIntervalPass() {
        var c = ScheduleChecker(timings: timings)
        #expect(c.check(agent: 0, calls: [call(1), call(16.5), call(33)], actions: up, faults: [], horizon: 40).isEmpty)
        #expect(c.cadenceChecks == 2)
    }

    @Test func aMissedRefreshFails() {
        var c = ScheduleChecker(timings: timings)
        let v = c.check(agent: 0, calls: [call(1), call(40)], actions: up, faults: [], horizon: 41)
        #expect(v.map(\.invariant) == ["cadence"])
    }

    @Test func anOpenGapFailsOnceAtTheHorizon() {
        var c = ScheduleChecker(timings: timings)
        #expect(c.check(agent: 0, calls: [call(1)], actions: up, faults: [], horizon: 15).isEmpty)
        #expect(c.check(agent: 0, calls: [call(1)], actions: up, faults: [], horizon: 30).map(\.invariant) == ["cadence"])
        #expect(c.check(agent: 0, calls: [call(1)], actions: up, faults: [], horizon: 35).isEmpty)  // reported once
    }

    /// A crash is one violation: a process that died is expected to send nothing more (a killed
    /// agent once also failed the cadence check an hour of device time later).
    @Test func aCrashedProcessHasNoCadence() {
        var c = ScheduleChecker(timings: timings)
        let crashed = up + [AgentAction(agent: 0, kind: .crashed, start: 10, end: 10)]
        #expect(c.check(agent: 0, calls: [call(1)], actions: crashed, faults: [], horizon: 100).isEmpty)
        #expect(ScheduleChecker.activeIntervals(crashed, until: 100).map(\.1) == [10])
        var d = ScheduleChecker(timings: timings)
        #expect(d.check(agent: 0, calls: [call(1)], actions: up, faults: [], horizon: 100).map(\.invariant) == ["cadence"])
    }

    @Test func backgroundAndDowntimePauseTheCadence() {
        var c = ScheduleChecker(timings: timings)
        let actions = up + [AgentAction(agent: 0, kind: .appState(active: false), start: 5, end: 5.01),
                            AgentAction(agent: 0, kind: .appState(active: true), start: 40, end: 40.01),
                            AgentAction(agent: 0, kind: .stopped(signal: 9), start: 45, end: 45),
                            AgentAction(agent: 0, kind: .started, start: 80, end: 80.3)]
        #expect(c.check(agent: 0, calls: [call(1), call(41), call(81)], actions: actions, faults: [], horizon: 90).isEmpty)
        #expect(ScheduleChecker.activeIntervals(actions, until: 90).count == 3)
    }

    @Test func aStormFailsUnlessTheRunnerAskedForIt() {
        var c = ScheduleChecker(timings: timings)
        let storm = [call(1), call(17), call(18, status: 500, fault: "http"), call(19)]
        #expect(c.check(agent: 0, calls: storm, actions: up, faults: [], horizon: 20).contains { $0.invariant == "storm" })
        var d = ScheduleChecker(timings: timings)
        let asked = up + [AgentAction(agent: 0, kind: .manualRefresh, start: 17.9, end: 18.1),
                          AgentAction(agent: 0, kind: .userChanged("bob"), start: 18.9, end: 18.95)]
        #expect(d.check(agent: 0, calls: storm, actions: asked, faults: [], horizon: 20).isEmpty)
    }

    /// The emulator logs a request at its millisecond rounded down: the request a manual
    /// refresh caused can read up to a millisecond (2 with device-time offsets) before the
    /// action started, and is still the runner's. (Seen in a 3-day real-timings run.)
    @Test func aRequestLoggedInTheActionsMillisecondIsExplained() {
        let storm = [call(1), call(17.5), call(17.850), call(17.988)]
        var c = ScheduleChecker(timings: timings)
        let asked = up + [AgentAction(agent: 0, kind: .manualRefresh, start: 17.9884, end: 17.990)]
        #expect(c.check(agent: 0, calls: storm, actions: asked, faults: [], horizon: 20).isEmpty)
        var d = ScheduleChecker(timings: timings)
        let later = up + [AgentAction(agent: 0, kind: .manualRefresh, start: 17.991, end: 17.993)]
        #expect(d.check(agent: 0, calls: storm, actions: later, faults: [], horizon: 20).contains { $0.invariant == "storm" })
    }

    @Test func retryAfterIsHonoured() {
        let fault = ArmedFault(method: "getFeatureFlags", start: 0.5, end: 0.6, json: ["method": "getFeatureFlags", "http": 503, "retryAfter": 12])
        var c = ScheduleChecker(timings: timings)
        let early = c.check(agent: 0, calls: [call(1, status: 503, fault: "http"), call(8)], actions: up, faults: [fault], horizon: 9)
        #expect(early.contains { $0.invariant == "retryAfter" })
        var d = ScheduleChecker(timings: timings)
        #expect(d.check(agent: 0, calls: [call(1, status: 503, fault: "http"), call(16)], actions: up, faults: [fault], horizon: 17).isEmpty)
        #expect(d.retryAfterChecks == 1)
    }

    @Test func anInjectedDelayExtendsTheGap() {
        let fault = ArmedFault(method: "getFeatureFlags", start: 0.5, end: 0.6, json: ["method": "getFeatureFlags", "delayMs": 3000])
        var c = ScheduleChecker(timings: timings)
        #expect(c.check(agent: 0, calls: [call(1, fault: "delay"), call(21)], actions: up, faults: [fault], horizon: 22).isEmpty)
    }
}

@Suite struct ImpressionCheckerTests {
    func imp(_ t: Time, key: String = "f", rule: String = "r1", enabled: Bool = true, status: Int? = 200, fault: String? = nil) -> DeviceCall {
        DeviceCall(time: t, method: "postEvent", hwid: "H", userId: "a", status: status, fault: fault,
                   impression: ImpressionKey(key: key, ruleId: rule, enabled: enabled))
    }

    @Test func oneImpressionPerFlagRuleAndStatePerSession() {
        var c = ImpressionChecker()
        let calls = [imp(1), imp(2, rule: "r2"), imp(3, enabled: false), imp(4, key: "g")]
        #expect(c.check(agent: 0, impressions: calls, actions: [], settled: 10).isEmpty)
        #expect(c.checks == 4)
    }

    @Test func aRepeatedImpressionFails() {
        var c = ImpressionChecker()
        let v = c.check(agent: 0, impressions: [imp(1), imp(5)], actions: [], settled: 10)
        #expect(v.map(\.invariant) == ["impressions"])
    }

    @Test func aNewSessionUserOrProcessStartsAFreshSet() {
        for kind in [AgentAction.Kind.sessionStarted, .userChanged("bob"), .started] {
            var c = ImpressionChecker()
            let actions = [AgentAction(agent: 0, kind: kind, start: 3, end: 3.1)]
            #expect(c.check(agent: 0, impressions: [imp(1), imp(5)], actions: actions, settled: 10).isEmpty)
            // Near the boundary either side will do; twice after it is still one too many.
            var d = ImpressionChecker()
            #expect(d.check(agent: 0, impressions: [imp(3.05), imp(3.5), imp(6)], actions: actions, settled: 10).count == 1)
        }
    }

    @Test func failedImpressionsMayBeSentAgain() {
        var c = ImpressionChecker()
        #expect(c.check(agent: 0, impressions: [imp(1, status: nil, fault: "drop"), imp(2)], actions: [], settled: 10).isEmpty)
    }

    @Test func unsettledImpressionsWait() {
        var c = ImpressionChecker()
        #expect(c.check(agent: 0, impressions: [imp(1), imp(5)], actions: [], settled: 4).isEmpty)
        #expect(c.check(agent: 0, impressions: [imp(1), imp(5)], actions: [], settled: 6).count == 1)
    }
}

@Suite struct ParsingTests {
    @Test func spans() {
        #expect(TimeSpan.parse("10m") == 600)
        #expect(TimeSpan.parse("10min") == 600)
        #expect(TimeSpan.parse("90s") == 90)
        #expect(TimeSpan.parse("500ms") == 0.5)
        #expect(TimeSpan.parse("1h30m") == 5400)
        #expect(TimeSpan.parse("15") == 15)
        #expect(TimeSpan.parse("ten") == nil)
        #expect(TimeSpan.format(60) == "1min")
        #expect(TimeSpan.format(0.25) == "250ms")
    }

    @Test func options() throws {
        let o = try SoakOptions.parse(["--duration", "20s", "--agents", "3", "--seed", "7", "--refresh", "10s", "--keep-going"])
        #expect(o.duration == 20 && o.agents == 3 && o.seed == 7 && o.timings.refresh == 10 && o.keepGoing)
        #expect(throws: SoakOptionError("--agents", .badValue("0", expected: "1-1000"))) { try SoakOptions.parse(["--agents", "0"]) }
        #expect(throws: SoakOptionError("--bogus", .unknown)) { try SoakOptions.parse(["--bogus"]) }
        #expect(try SoakOptions.parse(["--junit", "out/soak.xml"]).junitFile == "out/soak.xml")
        #expect(try SoakOptions.parse([]).junitFile == nil)
        func refusal(_ arguments: [String]) -> String? {
            do { _ = try SoakOptions.parse(arguments); return nil } catch { return error.description }
        }
        #expect(refusal(["--junit"]) == "--junit needs a value")
        #expect(refusal(["--junit", ""]) == "--junit: expected a file name, found \"\"")
        #expect(refusal(["--junit", "reports/"]) == "--junit: expected a file name, found \"reports/\"")
    }

    @Test func requestLogEntries() {
        let entry: JSONValue = ["unixTime": 1000.5, "method": "postEvent", "status": 200, "fault": nil,
                                "body": ["request": ["hwid": "H", "userId": "bob", "event": "PW_FeatureFlagImpression",
                                                     "attributes": ["flag_key": "f", "rule_id": "", "enabled": false]]]]
        let c = DeviceCall(json: entry)
        #expect(c?.impression == ImpressionKey(key: "f", ruleId: "", enabled: false))
        #expect(c?.userId == "bob" && c?.succeeded == true)
        let dropped: JSONValue = ["unixTime": 1, "method": "getFeatureFlags", "status": nil, "fault": "drop", "body": "x"]
        #expect(DeviceCall(json: dropped)?.succeeded == false)
    }
}

/// The real-timings run's conversion of what the runner saw into device time.
@Suite struct DeviceTimelineTests {
    @Test func eachRealTimeTakesTheOffsetInForceThen() {
        let timeline = DeviceTimeline()
        #expect(timeline.device(100) == 100)
        timeline.advanced(by: 600, atReal: 200)
        timeline.advanced(by: 30, atReal: 300)
        timeline.advanced(by: 1, atReal: 300.5)
        #expect(timeline.device(199.9) == 199.9)
        #expect(timeline.device(200) == 800)
        #expect(timeline.device(299) == 899)
        #expect(timeline.device(300) == 930)
        #expect(timeline.device(300.5) == 931.5)
        #expect(timeline.device(1000) == 1631)
        #expect(timeline.offset == 631)
        #expect(timeline.device(.infinity) == .infinity)
    }
}
