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
    /// An advance and who waits for it.
    private struct Queued {
        var advance: ClockAdvance
        var requestsBefore: Int
        /// What ran on its own before this advance began (taken when it begins).
        var firedBefore: (fired: [FiredTimer], dropped: Int)?
        var done: (RPCOutcome) -> Void
    }

    /// The longest advance one call may ask for (ten years).
    static let maximumSeconds: Seconds = 10 * 365 * 86_400

    let clock: DeviceClock
    private let host: AgentOnLoop
    private let transport: MeteredTransport
    private let loop: EventLoop
    private let log: Log
    private var queue: [Queued] = []
    private var stepScheduled = false
    /// What ran on its own, as device time flowed with the host's, since the last advance
    /// answered (`firedBefore`, docs/device-clock.md H): a lab that steps many devices one call
    /// after another hears of every timer, including one that came due between two calls.
    private var firedOnTheirOwn: [FiredTimer] = []
    private var firedOnTheirOwnDropped = 0
    /// Device monotonic time when the last advance answered (a session that ended in the
    /// background since then is told in `firedBefore` too).
    private var flowingSince: Seconds
    static let firedOnTheirOwnLimit = 256

    init(clock: DeviceClock, host: AgentOnLoop, transport: MeteredTransport, loop: EventLoop, log: Log) {
        self.clock = clock
        self.host = host
        self.transport = transport
        self.loop = loop
        self.log = log
        flowingSince = clock.monotonic
        transport.onIdle = { [weak self] in self?.scheduleStep() }
        host.aroundTimersDue = { [weak self] fire in
            guard let self else { return fire() }
            self.timersDueOnTheirOwn(fire)
        }
    }

    /// The loop timer runs the agent's due timers (device time reached them on its own): an
    /// advance in progress counts them as its own, else they wait for the next answer, the
    /// requests they sent on the last of them.
    private func timersDueOnTheirOwn(_ fire: () -> Void) {
        var due = ClockAdvance.due(host.agent.timers, at: clock.monotonic, wall: clock.wall)
        let sent = transport.sent
        fire()
        guard !due.isEmpty else { return }
        if !queue.isEmpty {
            queue[0].advance.noteFiredOnTheirOwn(due)
            return
        }
        due[due.count - 1].requests = transport.sent - sent
        firedOnTheirOwn += due
        let excess = firedOnTheirOwn.count - Self.firedOnTheirOwnLimit
        if excess > 0 {
            firedOnTheirOwn.removeFirst(excess)
            firedOnTheirOwnDropped += excess
        }
    }

    /// What ran on its own since the last answer, a session's end in the background included,
    /// in time order; then starts afresh.
    private func takeFiredBefore() -> (fired: [FiredTimer], dropped: Int) {
        var fired = firedOnTheirOwn
        if let end = host.agent.sessionEndsAt, end > flowingSince, end <= clock.monotonic {
            fired.append(FiredTimer(at: clock.wall.addingTimeInterval(end - clock.monotonic), event: FiredTimer.sessionEnd))
            fired.sort { $0.at < $1.at }
        }
        defer {
            firedOnTheirOwn = []
            firedOnTheirOwnDropped = 0
        }
        return (fired, firedOnTheirOwnDropped)
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

    /// How far one call may move the clock against a server on another host without
    /// `allowRemote` (a day: a year would send thousands of requests to a real Pushwoosh).
    static let maximumRemoteSeconds: Seconds = 86_400

    /// `advanceClock` by `seconds`, or `to` a device time not before now.
    func advance(_ advance: SocketCall.ClockAdvance, _ done: @escaping (RPCOutcome) -> Void) throws(RPCError) {
        let target = advance.target
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
        let server = host.agent.machine.baseURL
        if seconds > Self.maximumRemoteSeconds, !advance.allowRemote, !PushwooshAPI.isLoopback(baseURL: server) {
            throw .invalidParams("advanceClock by more than a day (\(Int(seconds.rounded(.up))) s) against \(ConfigValue.redactedProxy(server)), a server not on this host, "
                                 + "sends every request those days bring to it: pass \"allowRemote\": true to mean it (a lab's emulator on loopback needs nothing)",
                                 parameter: "allowRemote")
        }
        queue.append(Queued(advance: ClockAdvance(seconds: seconds), requestsBefore: transport.sent, done: done))
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

    /// One step of the advance at the head of the queue: the value decides, this performs.
    private func step() {
        guard var head = queue.first else { return }
        if head.firedBefore == nil { head.firedBefore = takeFiredBefore() }
        let agent = host.agent!
        let view = ClockAdvance.View(now: clock.monotonic, wall: clock.wall, timers: agent.timers,
                                     sessionEndsAt: agent.sessionEndsAt, requestsInFlight: transport.inFlight)
        let actions = head.advance.step(view)
        queue[0] = head
        for action in actions {
            switch action {
            case .waitForRequests:
                return  // MeteredTransport.onIdle schedules the next step
            case .jump(let seconds, let save):
                if seconds > 0 { clock.advance(by: seconds) }
                agent.clockOffsetChanged(clock.offset, save: save)  // re-arms the loop timer at the new offset
            case .fireDueTimers:
                agent.fireDueTimers()
            case .fail(let message):
                queue.removeFirst()
                log(.error, "advanceClock stopped: a timer does not clear", ["timers": "\(agent.timers.map(\.kind.rawValue))"])
                head.done(.failure(.internalError(message)))
            case .answer(let fired):
                queue.removeFirst()
                let requests = transport.sent - head.requestsBefore
                head.done(.success(AdvanceClockAnswer(now: clock.wall, offsetSeconds: clock.offset, fired: fired, requests: requests,
                                                      firedBefore: head.firedBefore?.fired ?? [], firedBeforeDropped: head.firedBefore?.dropped ?? 0).json))
                flowingSince = clock.monotonic
                // One line per advance that ran a timer; a driver stepping many devices (the soak's
                // --real-timings) makes many that run none.
                log(fired.isEmpty ? .debug : .info, "device clock advanced",
                    ["now": clock.wall.formatted(.iso8601), "offset_s": Int(clock.offset), "fired": fired.count, "requests": requests])
            }
        }
        scheduleStep()  // the next step waits for the requests the timers sent, if any
    }
}
