import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// RF-2, RF-12 over many device days, in virtual time: the per-device offset is a phase
/// within the hour and the jitter a small move around each slot; neither lengthens the hour.
@Suite struct HourlyScheduleTests {
    static let day: Seconds = 86_400
    static let days = 30

    /// A device with HWID `hwid`, started in the foreground at virtual time 0 (all devices at
    /// once, as a fleet booting), then left alone for `days` device days: the periodic
    /// requests' times, counted from the session start's request.
    static func periodicTimes(hwid: String, seed: UInt64, days: Int = days, interval: Seconds = 3600) -> [Seconds] {
        var settings = VirtualLoop.defaultSettings()
        settings.flags.refreshInterval = interval
        let loop = VirtualLoop(settings: settings, store: MemoryStore(committed: PersistentState(hwid: hwid)), seed: seed, start: false)
        loop.serve([checkout])
        loop.agent.start()
        loop.run(for: Double(days) * day)
        let times = loop.flagRequests.map(\.sentAt)
        #expect(loop.log.events.allSatisfy {
            if case .refreshFailed = $0 { false } else { true }
        })
        return times.dropFirst().map { $0 - times[0] }
    }

    @Test("RF-2, RF-12: 30 device days x 100 HWIDs: 24 +/- 1 periodic refreshes per foreground day, mean interval the period within 1%, phases spread")
    func thirtyDaysOfAHundredDevices() {
        var phases: [Seconds] = []
        var worstMean = 0.0
        var perDay: [Int: Int] = [:]
        for i in 0..<100 {
            let hwid = "HWID-\(i)-\(fnvLike(i))"
            let times = Self.periodicTimes(hwid: hwid, seed: UInt64(i + 1))
            // 24 ± 1 in every device day, and 720 ± 1 in all.
            for d in 0..<Self.days {
                let count = times.filter { $0 >= Double(d) * Self.day && $0 < Double(d + 1) * Self.day }.count
                perDay[count, default: 0] += 1
                #expect((23...25).contains(count), "\(hwid): \(count) periodic refreshes on day \(d)")
            }
            #expect(abs(times.count - 24 * Self.days) <= 1, "\(hwid): \(times.count) periodic refreshes in \(Self.days) days")
            // The mean interval is the period within 1 %.
            let mean = (times.last! - times.first!) / Double(times.count - 1)
            worstMean = max(worstMean, abs(mean - 3600) / 3600)
            #expect(abs(mean - 3600) <= 36, "\(hwid): mean interval \(mean) s")
            // Each refresh keeps to its slot: the k-th lies k hours after the first, give or take
            // the jitter (1% either way, so 2% between two of them); nothing drifts.
            for (k, t) in times.enumerated() {
                let drift = t - times[0] - Double(k) * 3600
                #expect(abs(drift) <= 72, "\(hwid): refresh \(k) is \(drift) s off its slot")
                if abs(drift) > 72 { break }
            }
            // Within 10 % past the hour since the session start (RF-12).
            #expect(times[0] >= 3600 && times[0] < 3600 * 1.1, "\(hwid): first at \(times[0])")
            phases.append(times[0].truncatingRemainder(dividingBy: 3600))
        }
        // Devices that started together do not beat in step: their phases spread over the window.
        let buckets = Set(phases.map { Int($0 / 30) })
        #expect(buckets.count >= 8, "phases in \(buckets.count) half-minutes: \(phases.sorted())")
        #expect(phases.max()! - phases.min()! >= 200, "phases \(phases.min()!)…\(phases.max()!)")
        let busiest = Dictionary(grouping: phases) { Int($0 / 30) }.values.map(\.count).max()!
        #expect(busiest <= 25, "\(busiest) of 100 devices in one half-minute")
        print("HourlyScheduleTests: periodic refreshes per device day \(perDay.sorted { $0.key < $1.key }), worst mean interval off by \(String(format: "%.4f", worstMean * 100)) %, phases \(Int(phases.min()!))–\(Int(phases.max()!)) s")
    }

    @Test("RF-2: a slot missed in the background is made up once on return, then the device keeps its slots")
    func aMissedSlotIsMadeUpOnce() {
        let loop = Self.oneMinuteSlots(hwid: "HWID-away")
        loop.run(for: 10 * 60 + 30)
        let before = loop.flagRequests.count
        #expect((10...11).contains(before - 1), "\(before - 1) periodic in 10 min of 1-min slots")
        loop.agent.setAppState(.background)
        loop.run(for: 20 * 60)  // 20 slots pass, no session ends
        #expect(loop.flagRequests.count == before)
        #expect(loop.agent.setAppState(.active) == false)
        loop.settle()
        #expect(loop.flagRequests.count == before + 1, "one refresh for the missed slots, not twenty")
        let back = loop.flagRequests.last!.sentAt
        loop.run(for: 5 * 60)
        let after = loop.flagRequests.map(\.sentAt).filter { $0 > back }
        #expect((4...6).contains(after.count), "\(after.count) in 5 min")
        // Still on the grid laid at the session start: whole minutes (plus offset and jitter) apart.
        let grid = loop.flagRequests[1].sentAt
        for t in after {
            let off = (t - grid).truncatingRemainder(dividingBy: 60)
            #expect(min(off, 60 - off) <= 1.2, "\(t) is \(off) s off the grid")
        }
    }

    @Test("RF-2: a request of another trigger (here a sent manual refresh) lays the slots afresh from it")
    func anotherTriggerRestartsTheSlots() {
        let loop = VirtualLoop(settings: VirtualLoop.defaultSettings(), store: MemoryStore(committed: PersistentState(hwid: "HWID-manual")), start: false)
        loop.serve([checkout])
        loop.agent.start()
        loop.run(for: 1800)
        var done = false
        loop.agent.refresh { _ in done = true }
        loop.settle()
        loop.run(for: 1)
        #expect(done)
        let manual = loop.flagRequests.last!.sentAt
        loop.run(for: 3 * 3600 + 360)
        let periodic = loop.flagRequests.map(\.sentAt).filter { $0 > manual }
        #expect(periodic.count == 3)
        let offset = Agent.deviceOffset(hwid: "HWID-manual", period: 3600)
        for (k, t) in periodic.enumerated() {
            let slot = manual + Double(k + 1) * 3600 + offset
            #expect(abs(t - slot) <= 36, "refresh \(k) at \(t), its slot \(slot)")
        }
    }

    @Test("RF-2: a reload that changes the period lays the slots afresh from the last request, not from slot 1 of the old period")
    func aNewPeriodCountsFromTheLastRequest() {
        let loop = Self.oneMinuteSlots(hwid: "HWID-reload")
        loop.run(for: 50 * 60 + 10)  // fifty one-minute slots
        let last = loop.flagRequests.last!.sentAt
        var settings = loop.settings
        settings.flags.refreshInterval = 3600
        loop.agent.reload(settings)
        loop.settle()
        let next = loop.agent.status().nextRefreshAt!.timeIntervalSince(loop.clock.wall) + loop.clock.monotonic
        #expect(next - last >= 3600 && next - last < 3600 * 1.1, "the next hourly refresh \(next - last) s after the last request")
    }

    /// Distinct, unrelated HWIDs.
    /// A device `hwid` started with one-minute slots and flags that never expire.
    static func oneMinuteSlots(hwid: String) -> VirtualLoop {
        var settings = VirtualLoop.defaultSettings()
        settings.flags.refreshInterval = 60
        settings.flags.storedFlagsLifetime = 1e9
        let loop = VirtualLoop(settings: settings, store: MemoryStore(committed: PersistentState(hwid: hwid)), start: false)
        loop.serve([checkout])
        loop.agent.start()
        return loop
    }

    private func fnvLike(_ i: Int) -> String { String(UInt64(i &* 2_654_435_761) % 1_000_003, radix: 36) }
}
