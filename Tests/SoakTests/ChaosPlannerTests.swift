import AgentCore
@testable import Soak
import Testing

/// docs/soak.md "Chaos in device time", in virtual device time: a week of ten devices with
/// one fault armed at a time, each lasting its window.
@Suite struct ChaosPlannerTests {
    struct Armed { var at: Double; var fault: ChaosPlanner.Fault }

    /// The chaos thread's loop with the clock simulated: an event every pause, a fault half of
    /// the time when none is armed.
    static func simulate(seed: UInt64, days: Double, agents: Int, targets: [Int]) -> [Armed] {
        let end = days * 86_400
        var planner = ChaosPlanner(seed: seed, lifetime: 86_400, refresh: 3_600, runEnd: end)
        var coin = SeededRandom(seed: seed)
        var t = 0.0, busyUntil = 0.0
        var armed: [Armed] = []
        while true {
            t += planner.pause()
            if t >= end { break }
            guard coin.chance(0.5), t >= busyUntil, let f = planner.fault(at: t, targets: targets, agents: agents, plannedWaiting: false) else { continue }
            armed.append(Armed(at: t, fault: f))
            busyUntil = t + f.seconds
        }
        return armed
    }

    @Test func noFaultOnEveryDeviceOutlastsTwentySixHoursAndFaultsComeToTheEnd() {
        var longest = 0.0, expireOutages = 0
        for seed in UInt64(0)..<200 {
            let armed = Self.simulate(seed: seed, days: 7, agents: 10, targets: Array(0..<10))
            let global = armed.filter { $0.fault.agent == nil }
            longest = max(longest, global.map(\.fault.seconds).max() ?? 0)
            expireOutages += global.filter { $0.fault.seconds > ChaosPlanner.longestOrdinary }.count
            // Every fault has a window in device time.
            #expect(armed.allSatisfy { $0.fault.json["forSeconds"]?.numberValue == $0.fault.seconds && $0.fault.seconds > 0 })
            // Faults in each third of the run, the last one included.
            for third in 0..<3 {
                let from = Double(third) * 7 * 86_400 / 3, to = Double(third + 1) * 7 * 86_400 / 3
                #expect(armed.contains { $0.at >= from && $0.at < to }, "seed \(seed): no fault in third \(third + 1)")
            }
            // The long outage: at most once per 3 device-days, over 6 h before the end.
            let long = global.filter { $0.fault.seconds > ChaosPlanner.longestOrdinary }
            #expect(zip(long, long.dropFirst()).allSatisfy { $1.at - $0.at >= ChaosPlanner.expireOutageEvery })
            #expect(long.allSatisfy { $0.at + $0.fault.seconds <= 7 * 86_400 - 6 * 3600 })
        }
        #expect(longest <= ChaosPlanner.longestGlobal && longest > 86_400, "longest \(longest / 3600) h")
        #expect(expireOutages > 0, "the long outage still comes (its expiries)")
    }

    @Test func aScopedFaultIsAimedOnlyWhereItCanHit() {
        var scoped = 0
        for seed in UInt64(0)..<100 {
            // Device 0 is held silent (its expiry), device 4 is down.
            for a in Self.simulate(seed: seed, days: 3, agents: 5, targets: [1, 2, 3]) {
                if let agent = a.fault.agent { scoped += 1; #expect([1, 2, 3].contains(agent)) }
            }
        }
        #expect(scoped > 20)
        var planner = ChaosPlanner(seed: 1, lifetime: 86_400, refresh: 3_600, runEnd: 86_400)
        #expect(planner.fault(at: 100, targets: [], agents: 3, plannedWaiting: false) == nil, "nobody to hit: a flag change instead")
    }

    @Test func noLongOutageWhileAPlannedFaultWaits() {
        var planner = ChaosPlanner(seed: 3, lifetime: 86_400, refresh: 3_600, runEnd: 30 * 86_400)
        for k in 0..<2_000 {
            let f = planner.fault(at: Double(k) * 3_600, targets: [0, 1, 2], agents: 3, plannedWaiting: true)
            #expect((f?.seconds ?? 0) <= ChaosPlanner.longestOrdinary)
        }
    }
}
