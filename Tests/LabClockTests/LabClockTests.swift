import AgentWire
import Foundation
import LabClock
import Synchronization
import Testing

// The lab clock's planner, and its driver against a simulated lab: devices whose timers send
// a request stamped by the emulator's clock, a drop fault that times out in emulator time,
// retries that back off.

@Suite struct LabClockPlanTests {
    @Test func aStepEndsJustAfterTheEarliestTimer() throws {
        let devices = [0: LabDeviceClock(offsetSeconds: 0, nextTimerAt: 1_100), 1: LabDeviceClock(offsetSeconds: 0, nextTimerAt: 1_050)]
        let step = try #require(LabClockPlan.step(here: 1_000, limit: 2_000, labOffset: 0, devices: devices))
        #expect(abs(step.target - 1_050.001) < 1e-9)
        #expect(abs(step.seconds - 50.001) < 1e-9)
        #expect(step.deviceSeconds.keys.sorted() == [0, 1])
    }

    @Test func theLimitWinsOverALaterTimerAndNothingIsLeftAtTheLimit() throws {
        let devices = [0: LabDeviceClock(offsetSeconds: 0, nextTimerAt: 5_000)]
        let step = try #require(LabClockPlan.step(here: 1_000, limit: 1_600, labOffset: 0, devices: devices))
        #expect(step.target == 1_600 && step.seconds == 600)
        #expect(LabClockPlan.step(here: 1_600, limit: 1_600, labOffset: 0, devices: devices) == nil)
    }

    @Test func anOverdueTimerMovesTheLabOneMillisecond() throws {
        let devices = [0: LabDeviceClock(offsetSeconds: 0, nextTimerAt: 900)]
        let step = try #require(LabClockPlan.step(here: 1_000, limit: 2_000, labOffset: 0, devices: devices))
        #expect(abs(step.seconds - 0.001) < 1e-9)
    }

    @Test func aLaggingDeviceCatchesUpAndOneAheadWaits() throws {
        // The lab (the emulator) is 100 s ahead of the host; device 0 at 90 s, device 1 at 500 s.
        let devices = [0: LabDeviceClock(offsetSeconds: 90, nextTimerAt: nil), 1: LabDeviceClock(offsetSeconds: 500, nextTimerAt: nil)]
        let step = try #require(LabClockPlan.step(here: 1_100, limit: 1_160, labOffset: 100, devices: devices))
        #expect(step.seconds == 60)
        #expect(step.deviceSeconds == [0: 70])
    }
}

/// A lab in memory: the host's clock stands still, so only the lab clock moves time.
final class SimulatedLab: LabClockWorld, @unchecked Sendable {
    struct Device {
        var offset = 0.0
        var timers: [Double]
        var period = 3_600.0
        var retryDelays = [60.0, 120.0, 240.0, 480.0]
        var failures = 0
        /// `clock` answers with a request in flight this many more times, then the answer
        /// arrives and arms a retry at `retryAt`.
        var busyPolls = 0
        var retryAt: Double?
        /// A broken device: it never runs its timers.
        var stuck = false
        /// Timers that ran on their own (device time flowed) before the next `advanceClock`,
        /// which tells them in `firedBefore`, and how many more it did not keep.
        var ranOnTheirOwn: [Double] = []
        var ranOnTheirOwnDropped = 0
    }

    struct Logged: Equatable {
        var device: Int
        var at: Double
        var dropped: Bool
    }

    static let host = 1_000_000.0
    let state: Mutex<(emulatorOffset: Double, devices: [Device], log: [Logged])>
    /// Drop every request of `devices` stamped before `until` (emulator time).
    let dropUntil: Double
    let dropDevices: Set<Int>

    init(_ devices: [Device], dropUntil: Double = 0, dropDevices: Set<Int> = []) {
        state = Mutex((0, devices, []))
        self.dropUntil = dropUntil
        self.dropDevices = dropDevices
    }

    var deviceCount: Int { state.withLock { $0.devices.count } }
    func hostNow() -> Double { Self.host }
    func pause(seconds: Double) {}
    var log: [Logged] { state.withLock { $0.log } }
    var emulatorOffset: Double { state.withLock { $0.emulatorOffset } }

    func deviceClock(_ i: Int) -> ClockAnswer? {
        state.withLock { s in
            var d = s.devices[i]
            defer { s.devices[i] = d }
            if d.busyPolls > 0 {
                d.busyPolls -= 1
                if d.busyPolls == 0, let at = d.retryAt { d.timers.append(at) }
            }
            let next = d.timers.min().map { Date(timeIntervalSince1970: $0) }
            return ClockAnswer(now: Date(timeIntervalSince1970: Self.host + d.offset), offsetSeconds: d.offset, controlled: true,
                               nextTimerAt: next, requestsInFlight: d.busyPolls > 0 ? 1 : 0)
        }
    }

    func advanceEmulator(by seconds: Double) throws(LabClockError) {
        state.withLock { $0.emulatorOffset += seconds }
    }

    func advanceDevice(_ i: Int, by seconds: Double) throws(LabClockError) -> AdvanceClockAnswer {
        state.withLock { s in
            var d = s.devices[i]
            let target = Self.host + d.offset + seconds
            var fired: [FiredTimer] = []
            while !d.stuck, let t = d.timers.min(), t <= target {
                d.timers.removeAll { $0 == t }
                // The request goes out at device time t; the emulator stamps it with its own clock.
                let stamp = Self.host + s.emulatorOffset
                let dropped = dropDevices.contains(i) && stamp < dropUntil
                s.log.append(Logged(device: i, at: stamp, dropped: dropped))
                fired.append(FiredTimer(at: Date(timeIntervalSince1970: t), event: d.failures > 0 ? "retry" : "refresh"))
                if dropped {
                    d.timers.append(t + d.retryDelays[min(d.failures, d.retryDelays.count - 1)])
                    d.failures += 1
                } else {
                    d.failures = 0
                    d.timers.append(t + d.period)
                }
            }
            d.offset += seconds
            let before = d.ranOnTheirOwn.map { FiredTimer(at: Date(timeIntervalSince1970: $0), event: "retry", trigger: .retry, requests: 1) }
            let dropped = d.ranOnTheirOwnDropped
            (d.ranOnTheirOwn, d.ranOnTheirOwnDropped) = ([], 0)
            s.devices[i] = d
            return AdvanceClockAnswer(now: Date(timeIntervalSince1970: target), offsetSeconds: d.offset, fired: fired, requests: fired.count,
                                      firedBefore: before, firedBeforeDropped: dropped)
        }
    }
}

@Suite struct LabClockDriverTests {
    let t0 = SimulatedLab.host

    /// Every request was stamped (emulator time) at the device time its timer fired.
    func expectStampsEqualFiredTimes(_ lab: SimulatedLab, _ result: LabClockAdvance) {
        for device in 0..<lab.deviceCount {
            let stamps = lab.log.filter { $0.device == device }.map(\.at)
            let fired = (result.fired[device] ?? []).map(\.at.timeIntervalSince1970)
            #expect(stamps.count == fired.count, "device \(device)")
            for (s, f) in zip(stamps, fired) { #expect(abs(s - f) < 0.002, "device \(device): logged \(s), fired \(f)") }
        }
    }

    @Test func aFaultWindowThatEndsBetweenTwoDevicesTimersCoversOnlyTheFirst() throws {
        // Device 0's refresh at +100 s, device 1's at +200 s; every request dropped until +150 s.
        let lab = SimulatedLab([.init(timers: [t0 + 100]), .init(timers: [t0 + 200])], dropUntil: t0 + 150, dropDevices: [0, 1])
        let result = try LabClockDriver(world: lab, labOffset: 0).advance(by: 300)
        // Device 0 at +100 s (dropped), its retry at +160 s and device 1 at +200 s (both after the window).
        #expect(lab.log.map(\.device) == [0, 0, 1])
        #expect(lab.log.map { ($0.at - t0).rounded() } == [100, 160, 200])
        #expect(lab.log.map(\.dropped) == [true, false, false])
        #expect(abs(lab.emulatorOffset - 300) < 0.001)
        #expect(abs(result.now.timeIntervalSince1970 - (t0 + 300)) < 0.001)
        #expect(result.requests == 3 && result.problems.isEmpty)
        expectStampsEqualFiredTimes(lab, result)
    }

    @Test func retriesInsideAWindowAreEachLoggedAtTheirOwnTime() throws {
        let lab = SimulatedLab([.init(timers: [t0 + 100]), .init(timers: [t0 + 50])], dropUntil: t0 + 400, dropDevices: [0])
        let result = try LabClockDriver(world: lab, labOffset: 0).advance(by: 1_000)
        let zero = lab.log.filter { $0.device == 0 }
        // +100 dropped, retries at +160 and +280 dropped, +520 served.
        #expect(zero.map { ($0.at - t0).rounded() } == [100, 160, 280, 520])
        #expect(zero.map(\.dropped) == [true, true, true, false])
        #expect(lab.log.filter { $0.device == 1 }.map(\.dropped) == [false])
        #expect(result.fired[0]?.map(\.event) == ["refresh", "retry", "retry", "retry"])
        expectStampsEqualFiredTimes(lab, result)
    }

    @Test func aRequestStillInFlightIsWaitedForBeforeTheStep() throws {
        // Device 0's request is on the network when the lab is asked to move; its answer arms
        // a retry at +30 s, which must run at +30 s, not after device 1's timer at +100 s.
        var busy = SimulatedLab.Device(timers: [])
        busy.busyPolls = 3
        busy.retryAt = t0 + 30
        busy.failures = 1
        let lab = SimulatedLab([busy, .init(timers: [t0 + 100])])
        let result = try LabClockDriver(world: lab, labOffset: 0).advance(by: 200)
        #expect(lab.log.map(\.device) == [0, 1])
        #expect(abs(lab.log[0].at - (t0 + 30)) < 0.002)
        #expect(result.fired[0]?.map(\.event) == ["retry"])
        expectStampsEqualFiredTimes(lab, result)
    }

    @Test func aTimerThatRanOnItsOwnBetweenStepsIsInFiredAndOneFromBeforeTheAdvanceIsNot() throws {
        // Device 0's retry ran on its own as the advance began (device time flows with the
        // host's between steps); one from before the advance began is not this advance's.
        var flowing = SimulatedLab.Device(timers: [t0 + 100])
        flowing.ranOnTheirOwn = [t0 - 10, t0]
        let lab = SimulatedLab([flowing, .init(timers: [])])
        let result = try LabClockDriver(world: lab, labOffset: 0).advance(by: 200)
        #expect(result.fired[0]?.map(\.at.timeIntervalSince1970) == [t0, t0 + 100])
        #expect(result.fired[0]?.map(\.event) == ["retry", "refresh"])
        #expect(result.fired[0]?.allSatisfy { $0.requests == nil } == true)  // counted in requests, not told per timer
        #expect(result.requests == 2 && result.problems.isEmpty)
    }

    @Test func timersLostByTheDeviceDuringTheAdvanceMakeAProblem() throws {
        // The device kept only its most recent timers, and the oldest kept is this advance's:
        // the ones it lost may be too, so fired is incomplete and the lab says so.
        var lossy = SimulatedLab.Device(timers: [])
        (lossy.ranOnTheirOwn, lossy.ranOnTheirOwnDropped) = ([t0], 3)
        var quiet = SimulatedLab.Device(timers: [])
        (quiet.ranOnTheirOwn, quiet.ranOnTheirOwnDropped) = ([t0 - 60, t0], 3)  // lost ones are older than t0 - 60
        let lab = SimulatedLab([lossy, quiet])
        let result = try LabClockDriver(world: lab, labOffset: 0).advance(by: 10)
        #expect(result.problems[0]?.contains("3 timers that ran on their own") == true, "\(result.problems)")
        #expect(result.problems[1] == nil)
        #expect(result.fired[1]?.count == 1)
    }

    @Test func aDeviceThatDoesNotRunItsDueTimerStopsTheLab() {
        var broken = SimulatedLab.Device(timers: [t0 + 100])
        broken.stuck = true
        let lab = SimulatedLab([broken, .init(timers: [t0 + 50])])
        #expect(throws: LabClockError("device 0: its timer due at 1970-01-12T13:48:20Z is still due after 5 steps (the device does not run it)", device: 0)) {
            try LabClockDriver(world: lab, labOffset: 0).advance(by: 3_600)
        }
        #expect(lab.emulatorOffset < 101)  // it stopped at the timer, not an hour of 1 ms steps later
    }

    @Test func moveEverythingAtOnceWouldMissTheWindow() throws {
        // The trap the lab clock avoids: the emulator moved by the whole span first, then the
        // devices; the window has closed before device 0's timer runs.
        let lab = SimulatedLab([.init(timers: [t0 + 100])], dropUntil: t0 + 150, dropDevices: [0])
        try lab.advanceEmulator(by: 300)
        _ = try lab.advanceDevice(0, by: 300)
        #expect(lab.log.map(\.dropped) == [false])
    }
}
