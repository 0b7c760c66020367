import AgentCore
import Foundation
import Soak
import Testing

/// docs/soak.md "Coverage steers the chaos": the plan is a value, the seed in, the duties out.
@Suite struct CoveragePlanTests {
    static let catalogue = Set(SoakCoverage.catalogue.map(\.name))

    @Test func everyInvariantIsCoveredWhateverTheSeed() {
        for seed in UInt64(0)..<300 {
            let agents = 3 + Int(seed % 8), days = [1.0, 1.5, 2, 7][Int(seed % 4)]
            let plan = CoveragePlan(seed: seed, agents: agents, deviceDays: days)
            #expect(plan.refusal.isEmpty, "seed \(seed): \(plan.refusal)")
            #expect(plan.covered == Self.catalogue, "seed \(seed)")
            #expect(plan == CoveragePlan(seed: seed, agents: agents, deviceDays: days), "the same seed plans the same")
            // One round of duties per 3 device-days; the expiries early enough in their slots
            // that each last look (a lifetime and a minute after the flags) comes before the end.
            let rounds = CoveragePlan.rounds(deviceDays: days)
            let expiry = plan.assignments.filter { $0.duty == .expiry }
            #expect(expiry.count == rounds && expiry.allSatisfy { $0.at <= max(0, (days - 1) * 86_400 - 600) }, "\(expiry)")
            #expect(expiry.map(\.device) == (0..<rounds).map { CoveragePlan.device(first: 0, round: $0, agents: agents) })
            for a in plan.assignments where a.duty != .expiry {
                #expect(a.at >= 0.05 * days * 86_400 && a.at <= 0.85 * days * 86_400 + 1, "\(a)")
                #expect(a.device % 3 == 1 || a.device % 3 == 2)
            }
            #expect(plan.assignments.map(\.duty.invariant).sorted()
                == ["cache", "cache", "expiry", "outage", "retryAfter", "throttle", "userSwitch"].flatMap { Array(repeating: $0, count: rounds) })
            for a in plan.assignments {
                if case .retryAfter(let s) = a.duty { #expect(s >= 120 && s <= 1_800) }
                if case .outage(let s) = a.duty { #expect(s >= 3_600 && s <= 7_200) }
            }
        }
        // Seeds differ.
        #expect(CoveragePlan(seed: 1, agents: 3, deviceDays: 7) != CoveragePlan(seed: 2, agents: 3, deviceDays: 7))
    }

    /// Every invariant of the catalogue is one that any run checks or one a duty plans: a new
    /// invariant cannot be added without a way to cover it.
    @Test func theCatalogueIsEveryRunsOrPlanned() {
        let planned: Set<String> = ["expiry", "userSwitch", "cache", "restart", "throttle", "retryAfter", "outage"]
        #expect(CoveragePlan.everyRun.union(planned) == Self.catalogue)
        #expect(CoveragePlan.everyRun.isDisjoint(with: planned))
    }

    @Test func aTooShortRunIsRefusedNamingWhatItWouldMiss() {
        let short = CoveragePlan(seed: 5, agents: 3, deviceDays: 0.1)
        #expect(short.refusal.map(\.invariant) == ["expiry"])
        #expect(short.refusal[0].description.contains("needs at least 1 device-day"))
        let one = CoveragePlan(seed: 5, agents: 1, deviceDays: 1)
        #expect(one.refusal.map(\.invariant) == ["userSwitch", "retryAfter", "throttle", "outage", "restart", "cache"])
        #expect(one.refusal.first { $0.invariant == "outage" }?.why == "needs at least 3 agents: device 2 has this duty")
        #expect(one.refusal.first { $0.invariant == "restart" }?.why == "needs at least 2 agents: device 1 has this duty")
        let two = CoveragePlan(seed: 5, agents: 2, deviceDays: 1)
        #expect(two.refusal.map(\.invariant) == ["retryAfter", "throttle", "outage"])
        #expect(CoveragePlan(seed: 5, agents: 2, deviceDays: 0.5).refusal.count == 4)
    }

    /// The refusal's hints agree with the plan: an invariant said to need N agents is refused
    /// with fewer and covered with N (it once said outage needs 2, then refused 2 for it).
    @Test func theRefusalsHintsAgreeWithThePlan() {
        for agents in 1...3 {
            for gap in CoveragePlan(seed: 9, agents: agents, deviceDays: 1).refusal {
                guard let n = gap.why.components(separatedBy: "needs at least ").last?.split(separator: " ").first.flatMap({ Int($0) }) else {
                    Issue.record("\(gap)"); continue
                }
                #expect(n > agents, "\(gap) refused with \(agents)")
                #expect(!CoveragePlan(seed: 9, agents: n, deviceDays: 1).refusal.contains { $0.invariant == gap.invariant }, "\(gap)")
            }
        }
    }

    /// Coverage grows with the run: a week of ten devices does every duty three times, the
    /// expiry on three devices; a day of three once each.
    @Test func aLongerRunPlansMoreChecksOnMoreDevices() {
        #expect(CoveragePlan.rounds(deviceDays: 1) == 1 && CoveragePlan.rounds(deviceDays: 3) == 1)
        #expect(CoveragePlan.rounds(deviceDays: 3.5) == 2 && CoveragePlan.rounds(deviceDays: 7) == 3)
        for seed in UInt64(0)..<50 {
            let week = CoveragePlan(seed: seed, agents: 10, deviceDays: 7)
            let expiries = week.assignments.filter { $0.duty == .expiry }
            #expect(Set(expiries.map(\.device)) == [0, 3, 6])
            #expect(Set(week.assignments.filter { $0.duty == .userSwitch }.map(\.device)) == [1, 4, 7])
            #expect(Set(week.assignments.filter { $0.duty.isFault }.map(\.device)) == [2, 5, 8])
            // Each expiry's last look (a lifetime and a minute after it starts) is in before the week's end.
            #expect(expiries.allSatisfy { $0.at + 86_400 + 60 < 7 * 86_400 })
            // The duties reach the run's last third.
            #expect(week.assignments.contains { $0.at > 7 * 86_400 * 2 / 3 }, "seed \(seed)")
            // Three devices, one week: the same device does its rounds in turn, a slot apart.
            let three = CoveragePlan(seed: seed, agents: 3, deviceDays: 7).assignments.filter { $0.duty == .expiry }
            #expect(three.map(\.device) == [0, 0, 0])
            #expect(zip(three, three.dropFirst()).allSatisfy { $1.at - $0.at > 86_400 + 600 }, "\(three)")
        }
    }

    @Test func requireCoverageIsTheDefaultWithTheRealTimings() throws {
        #expect(try SoakOptions.parse(["--real-timings"]).coverageRequired)
        #expect(try !SoakOptions.parse(["--real-timings", "--no-require-coverage"]).coverageRequired)
        #expect(try !SoakOptions.parse([]).coverageRequired)
        #expect(try SoakOptions.parse(["--require-coverage"]).coverageRequired)
        #expect(try SoakOptions.parse(["--real-timings", "--device-days", "1"]).span == "1 device-day")
        #expect(try SoakOptions.parse(["--real-timings", "--device-days", "0.5"]).span == "0.5 device-days")
        #expect(try SoakOptions.parse(["--duration", "10m"]).span == "10min")
    }
}

/// The checks the duties feed.
@Suite struct DutyCheckerTests {
    static let day = 86_400.0

    static func status(_ t: Time, age: Double?, count: Int = 4, state: String = "ready", source: String = "network",
                       partial: Bool = false) -> StatusObservation {
        StatusObservation(agent: 0, sent: t, received: t + 0.002, expectedUserId: "alice", expectedActive: false, state: state,
                          userId: "alice", appState: "background", flagsCount: age == nil ? 0 : count, flagsAgeSeconds: age,
                          flagsExpireAt: age.map { t - $0 + day }, flagsSource: age == nil ? "none" : source, flagsPartial: partial)
    }

    static func get(_ t: Time, age: Double?) -> FlagObservation {
        FlagObservation(agent: 0, hwid: "H", key: "new_checkout", sent: t, received: t + 0.002, expectedUserId: "alice",
                        flag: age == nil ? nil : ServedFlag(key: "new_checkout", isEnabled: true, ruleId: "r1"),
                        reason: age == nil ? "ERROR" : "TARGETING_MATCH", errorCode: age == nil ? "PROVIDER_NOT_READY" : nil,
                        source: age == nil ? "none" : "cache", ageSeconds: age)
    }

    static func request(_ t: Time, status: Int? = 200, fault: String? = nil) -> DeviceCall {
        DeviceCall(time: t, method: "getFeatureFlags", hwid: "H", userId: "alice", status: status, fault: fault)
    }

    /// Flags received at 1000, looked at 60 s before and after their 24 h.
    static func probe(before: Double? = day - 59.9, after: Double? = nil) -> ExpiryProbe {
        ExpiryProbe(agent: 0, dated: status(1_500, age: 500), beforeStatus: status(1_000 + day - 60, age: before),
                    beforeFlag: get(1_000 + day - 59.99, age: before), afterStatus: status(1_000 + day + 60, age: after),
                    afterFlag: get(1_000 + day + 60.01, age: after))
    }

    @Test func flagsAreServedAMinuteBeforeTheirLifetimeAndGoneAMinuteAfter() {
        var checker = ExpiryChecker(lifetime: Self.day)
        let calls = [Self.request(999.9)]
        #expect(checker.check(Self.probe(), calls: calls, expiries: [1_000 + Self.day]).isEmpty)
        #expect(checker.checks == 1)
        // Still served after 24 h 01 min.
        let late = checker.check(Self.probe(after: Self.day + 60), calls: calls, expiries: [1_000 + Self.day])
        #expect(late.map(\.invariant) == ["expiry"] && late[0].message.contains("still served"))
        // Gone too early.
        let early = checker.check(Self.probe(before: nil), calls: calls, expiries: [1_000 + Self.day])
        #expect(early.count == 1 && early[0].message.contains("are not served"))
        // No `expired` notification, or one long before.
        #expect(checker.check(Self.probe(), calls: calls, expiries: []).map(\.message) == ["no featureFlagsDidUpdate expired between "
            + iso8601(1_000 + Self.day) + " and " + iso8601(1_000 + Self.day + 60.012)])
        #expect(checker.check(Self.probe(), calls: calls, expiries: [5_000]).count == 1)
        #expect(checker.checks == 5)
    }

    /// The edge to the millisecond: flags received at 1000 (the dated status sent at 1500 saw
    /// them 500 s old) expire at 1000 + 24 h, not a second less. An `expired` seen 1 s, or 2 ms,
    /// early is a violation (the notification's own stamp, to the second, once let 1.5 s pass).
    @Test func theExpiryEdgeIsHeldToTheMillisecond() {
        var checker = ExpiryChecker(lifetime: Self.day)
        let calls = [Self.request(999.9)]
        #expect(checker.check(Self.probe(), calls: calls, expiries: [1_000 + Self.day + 0.0004]).isEmpty)
        #expect(checker.check(Self.probe(), calls: calls, expiries: [1_000 + Self.day - 0.0005]).isEmpty, "within a millisecond")
        for early in [1.0, 0.5, 0.002] {
            let found = checker.check(Self.probe(), calls: calls, expiries: [1_000 + Self.day - early])
            #expect(found.count == 1 && found[0].message.hasPrefix(String(format: "flags expired %.3f s before", early)), "\(found)")
        }
    }

    @Test func anExpiryLookThatCannotTellChecksNothingAndSaysSo() {
        var checker = ExpiryChecker(lifetime: Self.day)
        // A request renewed the flags in between: nothing to judge.
        #expect(checker.check(Self.probe(after: 40), calls: [Self.request(999.9), Self.request(1_000 + Self.day + 20)], expiries: []).isEmpty)
        // The first look came late (after the edge).
        var late = Self.probe()
        late.beforeFlag = Self.get(1_000 + Self.day + 1, age: nil)
        #expect(checker.check(late, calls: [], expiries: []).isEmpty)
        #expect(checker.checks == 0 && checker.notes.count == 2)
        #expect(checker.notes[0].contains("renewed the flags") && checker.notes[1].contains("missed the minutes"))
    }

    @Test func aRestartServesTheStoredFlagsFromTheCache() {
        var checker = CacheChecker(lifetime: Self.day)
        let before = Self.status(5_000, age: 1_000)
        #expect(checker.check(CacheProbe(agent: 0, before: before, after: Self.status(5_003, age: 1_003, source: "cache")), calls: []).isEmpty)
        // Not from the cache, another receipt, or none at all.
        let network = checker.check(CacheProbe(agent: 0, before: before, after: Self.status(5_003, age: 1_003)), calls: [])
        #expect(network.map(\.invariant) == ["cache"])
        let other = checker.check(CacheProbe(agent: 0, before: before, after: Self.status(5_003, age: 500, source: "cache")), calls: [])
        #expect(other.count == 1 && other[0].message.contains("not the stored ones"))
        #expect(checker.check(CacheProbe(agent: 0, before: before, after: Self.status(5_003, age: nil)), calls: []).count == 1)
        // None stored, none served; flags from nowhere fail.
        #expect(checker.check(CacheProbe(agent: 0, before: Self.status(5_000, age: nil), after: Self.status(5_003, age: nil)), calls: []).isEmpty)
        #expect(checker.check(CacheProbe(agent: 0, before: Self.status(5_000, age: nil), after: Self.status(5_003, age: 2, source: "cache")), calls: []).count == 1)
        #expect(checker.checks == 6)
        // A request in between, partial flags, or flags that expired meanwhile: nothing to judge.
        #expect(checker.check(CacheProbe(agent: 0, before: before, after: Self.status(5_003, age: 1)), calls: [Self.request(5_001)]).isEmpty)
        #expect(checker.check(CacheProbe(agent: 0, before: Self.status(5_000, age: 10, partial: true), after: Self.status(5_003, age: nil)), calls: []).isEmpty)
        #expect(checker.check(CacheProbe(agent: 0, before: Self.status(5_000, age: Self.day - 1), after: Self.status(5_003, age: nil)), calls: []).isEmpty)
        #expect(checker.checks == 6)
    }

    @Test func aThrottledRefreshNamesItsWindowAndTheRequestThatOpenedIt() {
        var checker = ThrottleChecker(throttle: 300)
        let opened = [Self.request(1_000)]
        let ok = RefreshProbe(agent: 2, sent: 1_010, received: 1_010.01, wasSent: false, failed: false, throttledUntil: 1_301)
        #expect(checker.check(ok, calls: opened).isEmpty)
        #expect(checker.check(ok, calls: []).map(\.message) == ["a refresh was throttled until \(iso8601(1_301)), but no flags request opened that window (at \(iso8601(1_001)))"])
        var far = ok
        far.throttledUntil = 2_000
        #expect(checker.check(far, calls: opened).count == 1)
        #expect(checker.checks == 3)
        // A sent or failed refresh is not throttled.
        #expect(checker.check(RefreshProbe(agent: 2, sent: 1, received: 2, wasSent: true, failed: false, throttledUntil: nil), calls: []).isEmpty)
        #expect(checker.check(RefreshProbe(agent: 2, sent: 1, received: 2, wasSent: false, failed: true, throttledUntil: nil), calls: []).isEmpty)
        #expect(checker.checks == 3)
    }

    @Test func rightAfterAUserSwitchThePreviousUsersFlagsAreGone() {
        var checker = UserSwitchChecker(userFlag: "soak_user", userPool: ["alice", "bob"])
        func look(_ served: String?, user: String = "bob", after: Bool = true) -> FlagObservation {
            var o = FlagObservation(agent: 1, hwid: "H", key: "soak_user", sent: 10, received: 10.01, expectedUserId: user,
                                    flag: served.map { ServedFlag(key: "soak_user", isEnabled: true, ruleId: "r", properties: ["user": .string($0)]) },
                                    reason: "TARGETING_MATCH", source: "network", ageSeconds: served == nil ? nil : 0.1)
            o.afterUserSwitch = after
            return o
        }
        #expect(checker.check(look(nil)).isEmpty)
        #expect(checker.check(look("bob")).isEmpty)
        #expect(checker.check(look("", user: "device-1-2")).isEmpty)
        #expect(checker.check(look("alice")).map(\.invariant) == ["userSwitch"])
        #expect(checker.check(look("alice", after: false)).isEmpty)
        #expect(checker.checks == 4)
    }
}

/// The report's cache-age line spans the run: observations date the flags, the log renews them.
@Suite struct CacheAgeLineTests {
    @Test func theLineRunsFromTheFirstFlagsToTheEnd() {
        // Received at 100 (seen at 150 and 400), renewed at 500 (seen at 600), then two requests after the last look.
        let runs = CacheAgeLine.runs(ages: [(150, 50), (400, 300), (600, 100)], renewals: [700, 900], discards: [], end: 1_000, lifetime: 10_000)
        #expect(runs.count == 1)
        #expect(runs[0].first! == (100, 0) && runs[0].last! == (1_000, 100))
        #expect(runs[0].contains { $0 == (500, 400) } && runs[0].contains { $0 == (500, 0) })
        #expect(runs[0].contains { $0 == (900, 0) })
    }

    @Test func theLineEndsAtTheLifetimeAndAtADiscard() {
        // Kept past the lifetime (60 s here): the line stops at 60 and nothing is drawn after.
        let expired = CacheAgeLine.runs(ages: [(10, 10), (50, 50), (80, nil)], renewals: [], discards: [], end: 200, lifetime: 60)
        #expect(expired.count == 1 && expired[0].last! == (60, 60))
        // A discard between two looks ends it there; new flags start a new run.
        let discarded = CacheAgeLine.runs(ages: [(10, 10), (30, nil), (50, 5)], renewals: [], discards: [20], end: 60, lifetime: 600)
        #expect(discarded.count == 2)
        #expect(discarded[0].last! == (20, 20) && discarded[1].first! == (45, 0) && discarded[1].last! == (60, 15))
    }
}
