import AgentCore
import AgentPosix
import AgentWire
import Foundation
import LabClock
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

/// The soak's lab: its agents' sockets and its emulator, as the lab clock moves them.
struct SoakLab: LabClockWorld {
    let ctx: RunContext
    let http: LoopbackHTTP

    var deviceCount: Int { ctx.options.agents }
    func hostNow() -> Double { now() }
    func socketPath(_ agent: Int) -> String { ctx.root + "/agent-\(agent)/agent.sock" }

    func deviceClock(_ agent: Int) -> ClockAnswer? {
        guard let client = try? LineClient(connecting: socketPath(agent), timeout: 10),
              case .success(let r)? = try? client.call(method: .clock, params: SocketCall.clock.params).outcome else { return nil }
        do throws(AnswerError) {
            return try ClockAnswer(json: r)
        } catch {
            ctx.recorder.violation(Violation("clock", agent: agent, time: now(), "clock answer: \(error)"))
            return nil
        }
    }

    func advanceEmulator(by seconds: Double) throws(LabClockError) { try http.advanceEmulatorClock(by: seconds) }

    func advanceDevice(_ agent: Int, by seconds: Double) throws(LabClockError) -> AdvanceClockAnswer {
        // An agent that is down (being restarted) is not a violation: its driver starts it again.
        let answer = (try? LineClient(connecting: socketPath(agent), timeout: 60))
            .flatMap { try? $0.call(method: .advanceClock, params: SocketCall.advanceClock(.seconds(seconds)).params).outcome }
        func failed(_ why: String) -> LabClockError {
            let hwid = ctx.recorder.state.withLock { $0.tracks[agent].hwid }
            return LabClockError("\(AgentCallError(agent: agent, hwid: hwid, method: SocketMethod.advanceClock.rawValue, why: why))")
        }
        switch answer {
        case .failure(let e)?:
            throw failed("answered \(e.code): \(e.message)")
        case .success(let r)?:
            do throws(AnswerError) { return try AdvanceClockAnswer(json: r) } catch {
                throw failed("a malformed answer: \(error)")
            }
        case nil:
            return AdvanceClockAnswer(now: Date(), offsetSeconds: 0, fired: [], requests: 0)
        }
    }

    func pause(seconds: Double) { usleep(UInt32(seconds * 1_000_000)) }
}

/// The real-timings run's clock (docs/device-clock.md): steps every agent's controlled clock and the
/// emulator's forward together with the lab clock (`LabClockDriver`, shared with
/// `pushwoosh-agentctl fleet advance-clock`), from its own thread, while no driver acts
/// (`WorldGate`); each step also ends `maxStep` ahead at the latest, and the pause between
/// steps keeps `speed` device seconds per real second.
public final class ClockDriver: @unchecked Sendable {
    let ctx: RunContext
    let timeline: DeviceTimeline
    let gate: WorldGate
    let lab: LabClockDriver<SoakLab>
    public private(set) var steps = 0
    public private(set) var deviceSecondsCovered = 0.0

    init(ctx: RunContext, http: LoopbackHTTP, timeline: DeviceTimeline, gate: WorldGate) {
        self.ctx = ctx
        self.timeline = timeline
        self.gate = gate
        lab = LabClockDriver(world: SoakLab(ctx: ctx, http: http), labOffset: timeline.offset)
    }

    func run() {
        // Every agent's first start is over before the first step (each start takes the gate
        // only once its thread runs, which may be after this one took it).
        while ctx.firstStarts.wait(timeout: .now() + 0.1) == .timedOut {
            if ctx.recorder.stopping { return }
        }
        let start = timeline.deviceNow()
        let days = start + ctx.options.deviceDays * 86_400
        while !ctx.recorder.stopping {
            // A planned look holds the clock at its time until the driver has looked (DutyBoard);
            // the run goes on past its days for the looks still to come (at most `overrun`).
            if let hold = ctx.board.earliest, hold.at <= timeline.deviceNow() {
                if waitForLook(hold) { continue }
            }
            let end = min(max(days, (ctx.board.latest ?? 0) + 1), days + Self.overrun)
            if timeline.deviceNow() >= end, ctx.board.earliest == nil {
                ctx.recorder.requestStop()
                return
            }
            var delta = 0.0
            var finished = false
            gate.exclusive {
                // The devices' clocks move during the step, while no driver acts: what arrives
                // from them meanwhile (an `expired` fired by the step) is on the new time.
                let stepStart = now()
                // A process that died is stamped dead before the clocks move on: its crash then
                // falls on the device time it happened at, not a step or more later.
                _ = ctx.processes.reap()
                let outcome: LabClockStepOutcome?
                do throws(LabClockError) {
                    outcome = try lab.step(limit: min(end, timeline.deviceNow() + ctx.options.maxStep, ctx.board.earliest?.at ?? .infinity))
                } catch {
                    ctx.recorder.violation(Violation(error.device == nil ? "emulator" : "clock", agent: error.device, time: now(), error.description))
                    return
                }
                guard let outcome else { return }
                for (agent, result) in outcome.devices {
                    if case .failure(let e) = result {
                        ctx.recorder.violation(Violation("clock", agent: agent, time: now(), e.description))
                    }
                }
                delta = outcome.step.seconds
                timeline.advanced(by: delta, atReal: stepStart)
                steps += 1
                deviceSecondsCovered = timeline.deviceNow() - start
                finished = outcome.step.target >= end && (ctx.board.earliest.map { $0.at > end } ?? true)
            }
            if finished {
                ctx.recorder.requestStop()
                return
            }
            usleep(UInt32(min(1, max(0.001, delta / ctx.options.speed)) * 1_000_000))
        }
    }

    /// How far past its device days a run goes for the plan's looks.
    static let overrun = 7_200.0

    /// Waits (up to 30 s) for the driver to take the look held at `hold`; true when it did.
    func waitForLook(_ hold: (agent: Int, at: Time)) -> Bool {
        let giveUp = now() + 30
        while now() < giveUp, !ctx.recorder.stopping {
            if ctx.board.due(agent: hold.agent, deviceNow: .infinity).map({ $0 > hold.at }) ?? true { return true }
            usleep(2_000)
        }
        ctx.board.release(agent: hold.agent, at: hold.at)
        ctx.recorder.note("agent \(hold.agent): nobody looked at \(iso8601(hold.at)) within 30 s; the clock went on")
        return false
    }
}
