import AgentCore
import AgentWire
import Foundation
import Synchronization

/// Why a lab clock step could not be taken, or one device could not follow it.
public struct LabClockError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    /// The device it is about; nil for the emulator.
    public var device: Int?
    public init(_ description: String, device: Int? = nil) {
        self.description = description
        self.device = device
    }
}

/// What the lab clock moves: the emulator's clock and the devices' clocks (by index, 0 to
/// `deviceCount - 1`). The lab, agentctl and the tests each bring their own.
public protocol LabClockWorld: Sendable {
    var deviceCount: Int { get }
    /// The host's time (Unix seconds).
    func hostNow() -> Double
    /// A device's `clock` answer; nil when it is down (it is then left out of the step).
    func deviceClock(_ device: Int) -> ClockAnswer?
    /// Moves the emulator's clock forward.
    func advanceEmulator(by seconds: Double) throws(LabClockError)
    /// Moves one device's clock forward (`advanceClock`); called for all devices at once.
    func advanceDevice(_ device: Int, by seconds: Double) throws(LabClockError) -> AdvanceClockAnswer
    /// Waits a little before asking a busy device again.
    func pause(seconds: Double)
}

/// What one step did.
public struct LabClockStepOutcome: Sendable {
    public var step: LabClockStep
    /// Each moved device's answer, or why it could not follow.
    public var devices: [Int: Result<AdvanceClockAnswer, LabClockError>]
    /// The devices that did not answer `clock` (left out of the step).
    public var down: [Int]
}

/// What a whole advance did (`pushwoosh-agentctl fleet advance-clock`, the Python client's
/// `advance_clock`).
public struct LabClockAdvance: Sendable {
    /// The lab's time at the end.
    public var now: Date
    /// The timers that fired on each device, in order.
    public var fired: [Int: [FiredTimer]]
    /// Requests the devices sent meanwhile.
    public var requests: Int
    public var steps: Int
    /// Devices that could not follow a step (the last reason), or were down.
    public var problems: [Int: String]
}

/// The lab clock (`LabClockPlan`) driven against a world: asks every device for its clock once
/// it has no request on the network (an answer may arm a timer: a retry), plans the step,
/// moves the emulator, then every device at once, each to the same time.
public final class LabClockDriver<World: LabClockWorld>: @unchecked Sendable {
    public let world: World
    /// The lab's offset ahead of the host's clock: the emulator's, moved with every step.
    public private(set) var labOffset: Double
    /// How long a device may keep a request in flight before the step goes on without waiting.
    public var quietTimeout: Double = 30
    /// After this many steps in a row with the same timer of a device still due, the device is
    /// not running it: the lab stops instead of stepping a millisecond at a time for ever.
    public var stuckSteps = 5
    /// Each device's due timer seen at the last steps, and in how many steps in a row.
    private var overdue: [Int: (at: Double, steps: Int)] = [:]

    public init(world: World, labOffset: Double) {
        self.world = world
        self.labOffset = labOffset
    }

    /// The lab's time now.
    public func labNow() -> Double { world.hostNow() + labOffset }

    /// A device's clock once it is quiet (or after `quietTimeout`); nil when it is down.
    public func quietClock(_ device: Int) -> ClockAnswer? {
        let giveUp = world.hostNow() + quietTimeout
        while true {
            guard let answer = world.deviceClock(device) else { return nil }
            if answer.requestsInFlight > 0, world.hostNow() < giveUp {
                world.pause(seconds: 0.002)
                continue
            }
            return answer
        }
    }

    /// One step towards `limit` (lab time); nil when there is nothing left to do.
    public func step(limit: Double) throws(LabClockError) -> LabClockStepOutcome? {
        var clocks: [Int: LabDeviceClock] = [:]
        for i in 0..<world.deviceCount {
            guard let c = quietClock(i) else { continue }
            clocks[i] = LabDeviceClock(offsetSeconds: c.offsetSeconds, nextTimerAt: c.nextTimerAt?.timeIntervalSince1970)
        }
        let here = labNow()
        for (i, clock) in clocks {
            guard let next = clock.nextTimerAt, next <= here else {
                overdue[i] = nil
                continue
            }
            let steps = overdue[i]?.at == next ? overdue[i]!.steps + 1 : 1
            overdue[i] = (next, steps)
            if steps > stuckSteps {
                throw LabClockError("device \(i): its timer due at \(SocketTime.string(Date(timeIntervalSince1970: next))) is still due after \(stuckSteps) steps (the device does not run it)", device: i)
            }
        }
        guard let step = LabClockPlan.step(here: here, limit: limit, labOffset: labOffset, devices: clocks) else { return nil }
        try world.advanceEmulator(by: step.seconds)
        labOffset += step.seconds
        // All devices at once, right after the emulator: a timer fires at its device time
        // while the emulator's clock, already at the target, flows on; moving one device after
        // another would let one's network time skew the next one's log.
        let results = Mutex<[Int: Result<AdvanceClockAnswer, LabClockError>]>([:])
        let group = DispatchGroup()
        let world = self.world
        for (i, seconds) in step.deviceSeconds {
            group.enter()
            Thread {
                defer { group.leave() }
                let r: Result<AdvanceClockAnswer, LabClockError>
                do throws(LabClockError) { r = .success(try world.advanceDevice(i, by: seconds)) } catch { r = .failure(error) }
                results.withLock { $0[i] = r }
            }.start()
        }
        group.wait()
        let down = (0..<world.deviceCount).filter { clocks[$0] == nil }
        return LabClockStepOutcome(step: step, devices: results.withLock { $0 }, down: down)
    }

    /// Moves the lab `seconds` forward (the emulator's offset and every device's grow by that
    /// much), timer to timer; collects what fired. With `done`, stops after the first step
    /// whose outcome (so far) it accepts (the lab's `until: nextTimer`, `nextRefresh`).
    public func advance(by seconds: Double, until done: (LabClockAdvance) -> Bool = { _ in false }) throws(LabClockError) -> LabClockAdvance {
        let goal = labOffset + seconds
        var fired: [Int: [FiredTimer]] = [:]
        var problems: [Int: String] = [:]
        var requests = 0
        var steps = 0
        for i in 0..<world.deviceCount { fired[i] = [] }
        // A controlled clock flows with the host's between two steps, so a timer due in the
        // moment a step takes may run on its own; the device tells it in `firedBefore`. What ran
        // before this advance began is not this advance's.
        let began = labNow()
        while goal - labOffset > LabClockPlan.slack {
            let here = labNow()
            guard let outcome = try step(limit: here + (goal - labOffset)) else { break }
            steps += 1
            for (i, r) in outcome.devices {
                switch r {
                case .success(let answer):
                    let ranOnTheirOwn = answer.firedBefore.filter { $0.at.timeIntervalSince1970 >= began }
                    fired[i, default: []].append(contentsOf: ranOnTheirOwn.map { FiredTimer(at: $0.at, event: $0.event, trigger: $0.trigger) })
                    fired[i, default: []].append(contentsOf: answer.fired)
                    requests += ranOnTheirOwn.reduce(0) { $0 + ($1.requests ?? 0) }
                    // Lost ones are older than the oldest kept: they matter only if that one is this advance's.
                    if answer.firedBeforeDropped > 0, answer.firedBefore.first.map({ $0.at.timeIntervalSince1970 >= began }) ?? true {
                        problems[i] = "\(answer.firedBeforeDropped) timers that ran on their own between two steps were not kept by the device: fired is incomplete"
                    }
                    requests += answer.requests
                case .failure(let e):
                    problems[i] = e.description
                }
            }
            for i in outcome.down { problems[i] = "down: it did not answer clock" }
            if done(LabClockAdvance(now: Date(timeIntervalSince1970: labNow()), fired: fired, requests: requests, steps: steps, problems: problems)) {
                break
            }
        }
        return LabClockAdvance(now: Date(timeIntervalSince1970: labNow()), fired: fired, requests: requests, steps: steps, problems: problems)
    }
}
