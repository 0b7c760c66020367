import AgentCore
import AgentPosix
import AgentWire
import Foundation
import LabClock
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

/// The real-timings run's clock (docs/device-clock.md): steps the lab's clock (`POST
/// /lab/advance`: the emulator's and every running agent's together, as the lab moves them)
/// from its own thread, while no driver acts (`WorldGate`). Each step ends where the lab clock's
/// own plan (`LabClockPlan`) puts the next one: a millisecond past the earliest timer any agent
/// has armed (its `clock`'s `nextTimerAt`), or `maxStep` ahead, the run's end or a planned look,
/// whichever comes first; the pause between steps keeps `speed` device seconds per real second.
public final class ClockDriver: @unchecked Sendable {
    let ctx: RunContext
    let timeline: DeviceTimeline
    let gate: WorldGate
    public private(set) var steps = 0
    public private(set) var deviceSecondsCovered = 0.0

    init(ctx: RunContext, timeline: DeviceTimeline, gate: WorldGate) {
        self.ctx = ctx
        self.timeline = timeline
        self.gate = gate
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
                // A process that died is seen dead before the clocks move on: its crash then
                // falls on the device time it happened at, not a step or more later.
                let running = runningAgents()
                let limit = min(end, timeline.deviceNow() + ctx.options.maxStep, ctx.board.earliest?.at ?? .infinity)
                guard let target = nextStop(running, limit: limit) else { return }
                let request = LabAdvanceRequest(until: .seconds(max(0.001, target - timeline.deviceNow())),
                                                devices: running.isEmpty ? nil : running.map(LabDevices.name))
                let answer: LabAdvanceAnswer, offset: Double
                do throws(LabCallError) {
                    answer = try ctx.lab.advance(request)
                    offset = try ctx.lab.labOffset()
                } catch {
                    ctx.recorder.violation(Violation("clock", agent: nil, time: now(), "the lab's clock did not move: \(error)"))
                    return
                }
                for skipped in answer.skipped {
                    // One that ended meanwhile is a crash, the one violation; a running one left behind is the clock's.
                    guard let agent = LabDevices.agent(skipped.name), let pid = pidOf(agent), ctx.exits.isUp(pid) else { continue }
                    ctx.recorder.violation(Violation("clock", agent: agent, time: now(), "the lab did not move \(skipped.name): \(skipped.reason)"))
                }
                delta = offset - timeline.offset
                timeline.advanced(by: delta, atReal: stepStart)
                steps += 1
                deviceSecondsCovered = timeline.deviceNow() - start
                finished = target >= end && (ctx.board.earliest.map { $0.at > end } ?? true)
            }
            if finished {
                ctx.recorder.requestStop()
                return
            }
            usleep(UInt32(min(1, max(0.001, delta / ctx.options.speed)) * 1_000_000))
        }
    }

    func pidOf(_ agent: Int) -> Int32? { ctx.recorder.state.withLock { $0.tracks[agent].pids.last } }

    /// The agents whose process runs (a crashed one is not moved: the lab would skip it).
    func runningAgents() -> [Int] {
        (0..<ctx.options.agents).filter { i in pidOf(i).map { ctx.exits.isUp($0) } ?? false }
    }

    /// Where the next step ends (lab time): `LabClockPlan`'s step over the running agents'
    /// clocks, read from their sockets; nil once `limit` is reached.
    func nextStop(_ agents: [Int], limit: Double) -> Double? {
        var clocks: [Int: LabDeviceClock] = [:]
        for i in agents {
            let socket = ctx.recorder.state.withLock { $0.tracks[i].socket }
            guard let client = try? LineClient(connecting: socket, timeout: 10),
                  case .success(let r)? = try? client.call(method: .clock, params: SocketCall.clock.params).outcome else { continue }
            do throws(AnswerError) {
                let c = try ClockAnswer(json: r)
                clocks[i] = LabDeviceClock(offsetSeconds: c.offsetSeconds, nextTimerAt: c.nextTimerAt?.timeIntervalSince1970)
            } catch {
                ctx.recorder.violation(Violation("clock", agent: i, time: now(), "clock answer: \(error)"))
            }
        }
        return LabClockPlan.step(here: timeline.deviceNow(), limit: limit, labOffset: timeline.offset, devices: clocks)?.target
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
