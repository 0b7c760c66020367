import AgentCore
import AgentWire
import FoundationEssentials

/// One `advanceClock` (docs/device-clock.md H) as a value whose steps return actions, as the
/// core's machines do (docs/architecture.md §2): each step is given what the device looks like
/// now and says what to do; `DeviceClockController` performs it on the loop.
///
/// While a timer falls due within what is left, the clock jumps to that timer's deadline and
/// the due timers run at their own device time; the next step waits until the requests they
/// sent are done. Then the clock jumps by the rest and the advance answers with what fired.
/// The jumps add up to exactly the seconds asked for.
struct ClockAdvance: Sendable {
    /// What a step sees of the device.
    struct View {
        /// The device's monotonic and wall time.
        var now: Seconds
        var wall: Date
        /// The armed timers, earliest first (`Agent.timers`).
        var timers: [(kind: AgentMachine.TimerKind, deadline: Seconds)]
        /// SE-1: when the session in the background ends, if it does.
        var sessionEndsAt: Seconds?
        var requestsInFlight: Int
    }

    enum Action: Equatable, Sendable {
        /// The network work of the previous step is not done: step again once it is.
        case waitForRequests
        /// Move the device clock forward (`save`: write the new offset now, ST-6).
        case jump(by: Seconds, save: Bool)
        /// Run the timers that are due now.
        case fireDueTimers
        /// Done: answer with what fired.
        case answer(fired: [FiredTimer])
        /// A timer keeps firing at one deadline: stop, naming the timers.
        case fail(String)
    }

    /// Seconds of jumps still to make.
    private(set) var remaining: Seconds
    private(set) var fired: [FiredTimer] = []
    /// Steps at one deadline without the agent moving it (a guard against a timer that never clears).
    private var stuck = 0
    private var lastDeadline: Seconds?
    static let stuckLimit = 100

    init(seconds: Seconds) { remaining = seconds }

    mutating func step(_ view: View) -> [Action] {
        guard view.requestsInFlight == 0 else { return [.waitForRequests] }
        if let next = view.timers.first?.deadline, next - view.now <= remaining {
            if next == lastDeadline { stuck += 1 } else { stuck = 0 }
            lastDeadline = next
            guard stuck < Self.stuckLimit else {
                return [.fail("a timer at the same deadline keeps firing: \(view.timers.map(\.kind.rawValue))")]
            }
            noteSessionEnd(before: next, view)
            let jump = max(0, next - view.now)
            remaining -= jump
            fired += Self.due(view.timers, at: view.now + jump, wall: view.wall.addingTimeInterval(jump))
            return [.jump(by: jump, save: false), .fireDueTimers]
        }
        noteSessionEnd(before: view.now + remaining, view)
        let jump = max(0, remaining)
        remaining = 0
        return [.jump(by: jump, save: true), .answer(fired: fired)]
    }

    /// Timers that fired on their own while this advance waited for requests (device time
    /// flows meanwhile): they are part of what it covered.
    mutating func noteFiredOnTheirOwn(_ timers: [FiredTimer]) { fired += timers }

    /// The timers of `timers` due at monotonic `now` (device wall time `wall`), as they are
    /// told in `fired`: the one description of a timer's run, whoever runs it.
    static func due(_ timers: [(kind: AgentMachine.TimerKind, deadline: Seconds)], at now: Seconds, wall: Date) -> [FiredTimer] {
        timers.filter { $0.deadline <= now }.map { timer in
            let trigger: RefreshTrigger? = switch timer.kind {
            case .refresh: .periodic
            case .retry: .retry
            default: nil
            }
            return FiredTimer(at: wall, event: timer.kind.rawValue, trigger: trigger)
        }
    }

    /// SE-1: the session ends in the background at `sessionEndsAt`; no timer runs then (the
    /// end is noticed when the app returns), but a test advancing past it hears of it in
    /// `fired`, in time order, before the timers at or after it.
    private mutating func noteSessionEnd(before target: Seconds, _ view: View) {
        guard let end = view.sessionEndsAt, end > view.now, end <= target else { return }
        fired.append(FiredTimer(at: view.wall.addingTimeInterval(end - view.now), event: FiredTimer.sessionEnd))
    }
}
