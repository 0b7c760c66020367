import AgentControl
import AgentCore
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
import HarnessSupport
#endif

/// The real-timings run's clock (docs/device-clock.md H): steps every agent's controlled clock and the
/// emulator's forward together, from its own thread, while no driver acts (`WorldGate`).
/// Each step ends at the earliest timer any agent has armed (or `maxStep` ahead), so every
/// timer runs with all clocks at its own time and each request is logged at the device time
/// it was sent; the pause between steps keeps `speed` device seconds per real second.
public final class ClockDriver: @unchecked Sendable {
    let ctx: RunContext
    let http: LoopbackHTTP
    let timeline: DeviceTimeline
    let gate: WorldGate
    public private(set) var steps = 0
    public private(set) var deviceSecondsCovered = 0.0

    init(ctx: RunContext, http: LoopbackHTTP, timeline: DeviceTimeline, gate: WorldGate) {
        self.ctx = ctx
        self.http = http
        self.timeline = timeline
        self.gate = gate
    }

    func socketPath(_ agent: Int) -> String { ctx.root + "/agent-\(agent)/agent.sock" }

    /// One agent's clock: its offset and the device time of its next timer, once it has no
    /// request on the network (an answer may arm a timer: a retry); nil while it is down.
    func clock(of agent: Int) -> (offset: Double, next: Time?)? {
        guard let client = try? SocketClient(path: socketPath(agent), timeout: 10) else { return nil }
        let giveUp = now() + 30
        while true {
            guard case .success(let r)? = try? client.call(method: .clock, params: [:]).outcome else { return nil }
            let answer: ClockAnswer
            do throws(AnswerError) {
                answer = try ClockAnswer(json: r)
            } catch {
                ctx.recorder.violation(Violation("clock", agent: agent, time: now(), "clock answer: \(error)"))
                return nil
            }
            if answer.requestsInFlight > 0, now() < giveUp {
                usleep(2_000)
                continue
            }
            return (answer.offsetSeconds, answer.nextTimerAt?.timeIntervalSince1970)
        }
    }

    func run() {
        // Every agent's first start is over before the first step (each start takes the gate
        // only once its thread runs, which may be after this one took it).
        while ctx.firstStarts.wait(timeout: .now() + 0.1) == .timedOut {
            if ctx.recorder.stopping { return }
        }
        let start = timeline.deviceNow()
        let end = start + ctx.options.deviceDays * 86_400
        while !ctx.recorder.stopping {
            var delta = 0.0
            var finished = false
            gate.exclusive {
                let here = timeline.deviceNow()
                var clocks: [Int: Double] = [:]
                var target = min(end, here + ctx.options.maxStep)
                for i in 0..<ctx.options.agents {
                    guard let c = clock(of: i) else { continue }
                    clocks[i] = c.offset
                    // A timer just due (or overdue by the time the step runs) stops the step a millisecond after it.
                    if let next = c.next { target = min(target, max(here + 0.001, next + 0.001)) }
                }
                delta = target - here
                guard delta > 0 else { return }
                do {
                    _ = try http.json("POST", "/admin/clock", json: ["advanceSeconds": .number(delta)])
                } catch {
                    ctx.recorder.violation(Violation("emulator", agent: nil, time: now(), "cannot advance the emulator's clock: \(error)"))
                    return
                }
                // All agents at once, right after the emulator: a timer fires at its device
                // time while the emulator's clock, already at the target, flows on; advancing
                // one agent after another would let one's network time skew the next one's log.
                let group = DispatchGroup()
                for (i, offset) in clocks {
                    // Each agent to the same device time, whatever it lagged (ms rounding).
                    let seconds = timeline.offset + delta - offset
                    guard seconds > 0.0005 else { continue }
                    group.enter()
                    Thread { [self] in
                        defer { group.leave() }
                        let answer = (try? SocketClient(path: socketPath(i), timeout: 60))
                            .flatMap { try? $0.call(method: .advanceClock, params: ["seconds": .number(seconds)]).outcome }
                        switch answer {
                        case .failure(let e)?:
                            ctx.recorder.violation(Violation("clock", agent: i, time: now(), "advanceClock answered \(e.code): \(e.message)"))
                        case .success(let r)?:
                            do throws(AnswerError) { _ = try AdvanceClockAnswer(json: r) } catch {
                                ctx.recorder.violation(Violation("clock", agent: i, time: now(), "advanceClock answer: \(error)"))
                            }
                        case nil: break
                        }
                    }.start()
                }
                group.wait()
                timeline.advanced(by: delta, atReal: now())
                steps += 1
                deviceSecondsCovered = timeline.deviceNow() - start
                finished = target >= end
            }
            if finished {
                ctx.recorder.requestStop()
                return
            }
            usleep(UInt32(min(1, max(0.001, delta / ctx.options.speed)) * 1_000_000))
        }
    }
}
