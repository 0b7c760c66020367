import AgentCore
import AgentPosix
import AgentWire
import FoundationEssentials

/// The socket methods `clock` and `advanceClock` (docs/device-clock.md H) on a controlled device clock.
///
/// `advanceClock` moves the device's clock forward by exactly `seconds` of jumps, in steps:
/// while a timer falls due within what is left, the clock jumps to that timer's deadline,
/// the timer runs at its own device time, and the next step waits until the network work
/// it started has finished (`MeteredTransport.onIdle`; meanwhile device time flows with
/// real time, as it always does); then the clock jumps by the rest and the answer lists
/// what fired. So `offsetSeconds` grows by exactly `seconds`, however long the network
/// took, and devices advanced by the same amount stay in step with each other and with an
/// emulator advanced alike. Steps run on the event loop, so the agent keeps answering its
/// socket meanwhile; advances asked for while one runs wait their turn.
final class DeviceClockController {
    private struct Advance {
        /// Seconds of jumps still to make.
        var remaining: Seconds
        var fired: [FiredTimer] = []
        var requestsBefore: Int
        var done: (RPCOutcome) -> Void
        /// Steps at one deadline without the agent moving it (a guard against a timer that
        /// never clears).
        var stuck = 0
        var lastDeadline: Seconds?
    }

    /// The longest advance one call may ask for (ten years).
    static let maximumSeconds: Seconds = 10 * 365 * 86_400

    let clock: DeviceClock
    private let host: AgentOnLoop
    private let transport: MeteredTransport
    private let loop: EventLoop
    private let log: Log
    private var queue: [Advance] = []
    private var stepScheduled = false

    init(clock: DeviceClock, host: AgentOnLoop, transport: MeteredTransport, loop: EventLoop, log: Log) {
        self.clock = clock
        self.host = host
        self.transport = transport
        self.loop = loop
        self.log = log
        transport.onIdle = { [weak self] in self?.scheduleStep() }
    }

    /// `clock`: `{"now", "offsetSeconds", "controlled", "nextTimerAt", "requestsInFlight"}`;
    /// `nextTimerAt` is the device time of the earliest armed timer (null when none), so a
    /// driver of many devices can step them all to it together, once none has a request on
    /// the network (whose answer may arm a timer).
    func clockResult() -> JSONValue {
        let next = host.agent.nextDeadline.map { clock.wall.addingTimeInterval($0 - clock.monotonic) }
        return ClockAnswer(now: clock.wall, offsetSeconds: clock.offset, controlled: clock.mode == .controlled, nextTimerAt: next,
                           requestsInFlight: transport.inFlight).json
    }

    /// `advanceClock` by `seconds`, or `to` a device time not before now.
    func advance(_ target: SocketCall.ClockAdvance, _ done: @escaping (RPCOutcome) -> Void) throws(RPCError) {
        let seconds: Seconds
        switch target {
        case .seconds(let n):
            seconds = n
        case .to(let date):
            let ahead = date.timeIntervalSince(clock.wall)
            guard ahead >= 0 else {
                throw .invalidParams("parameter 'to' is \(Int(-ahead.rounded(.up))) s before the device's time \(clock.wall.formatted(.iso8601)): the device clock only moves forward", parameter: "to")
            }
            seconds = ahead
        }
        guard seconds <= Self.maximumSeconds else {
            throw .invalidParams("advanceClock by at most \(Int(Self.maximumSeconds)) s (ten years) per call",
                                 parameter: { if case .to = target { "to" } else { "seconds" } }())
        }
        queue.append(Advance(remaining: seconds, requestsBefore: transport.sent, done: done))
        if queue.count == 1 { scheduleStep() }
    }

    private func scheduleStep() {
        guard !queue.isEmpty, !stepScheduled else { return }
        stepScheduled = true
        _ = loop.schedule(after: 0) { [weak self] in
            self?.stepScheduled = false
            self?.step()
        }
    }

    /// One step of the advance at the head of the queue.
    private func step() {
        guard var advance = queue.first else { return }
        // The network work of the previous step finishes first (onIdle schedules the next).
        guard transport.inFlight == 0 else { return }
        let agent = host.agent!
        if let next = agent.nextDeadline, next - clock.monotonic <= advance.remaining {
            if next == advance.lastDeadline { advance.stuck += 1 } else { advance.stuck = 0 }
            advance.lastDeadline = next
            guard advance.stuck < 100 else {
                queue.removeFirst()
                log(.error, "advanceClock stopped: a timer does not clear", ["timers": "\(agent.timers.map(\.kind.rawValue))"])
                advance.done(.failure(.internalError("a timer at the same deadline keeps firing: \(agent.timers)")))
                scheduleStep()
                return
            }
            noteSessionEnd(before: next, in: &advance)
            advance.remaining -= moveClock(by: next - clock.monotonic, save: false)
            let nowDevice = clock.monotonic
            for timer in agent.timers where timer.deadline <= nowDevice {
                let trigger: RefreshTrigger? = switch timer.kind {
                case .refresh: .periodic
                case .retry: .retry
                default: nil
                }
                advance.fired.append(FiredTimer(at: clock.wall, event: timer.kind.rawValue, trigger: trigger))
            }
            queue[0] = advance
            agent.fireDueTimers()  // re-arms the loop timer, as every call into the agent does
            scheduleStep()  // waits for the requests the timers sent, if any
            return
        }
        noteSessionEnd(before: clock.monotonic + advance.remaining, in: &advance)
        moveClock(by: advance.remaining, save: true)
        queue.removeFirst()
        let requests = transport.sent - advance.requestsBefore
        advance.done(.success(AdvanceClockAnswer(now: clock.wall, offsetSeconds: clock.offset, fired: advance.fired, requests: requests).json))
        // One line per advance that ran a timer; a driver stepping many devices (the soak's
        // --real-timings) makes many that run none.
        log(advance.fired.isEmpty ? .debug : .info, "device clock advanced", ["now": clock.wall.formatted(.iso8601), "offset_s": Int(clock.offset),
                                            "fired": advance.fired.count, "requests": requests])
        scheduleStep()
    }

    /// SE-1: the session ends in the background at `sessionEndsAt`; no timer runs then (the
    /// end is noticed when the app returns), but a test advancing past it hears of it in
    /// `fired`, in time order, before the timers at or after it.
    private func noteSessionEnd(before target: Seconds, in advance: inout Advance) {
        guard let end = host.agent.sessionEndsAt, end > clock.monotonic, end <= target else { return }
        advance.fired.append(FiredTimer(at: clock.wall.addingTimeInterval(end - clock.monotonic), event: FiredTimer.sessionEnd))
    }

    /// Moves the device's time forward by `seconds` (nothing when ≤ 0; never back), records
    /// the offset in the device's state (saved now with `save`, else with the next save: at
    /// the latest with what the timers bring back, ST-6), which re-arms the loop timer, and says
    /// how far it moved.
    @discardableResult
    private func moveClock(by seconds: Seconds, save: Bool) -> Seconds {
        let ahead = max(0, seconds)
        if ahead > 0 { clock.advance(by: ahead) }
        host.agent.clockOffsetChanged(clock.offset, save: save)  // re-arms at the new offset
        return ahead
    }
}
