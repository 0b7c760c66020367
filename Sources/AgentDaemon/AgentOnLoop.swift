import AgentCore
import AgentPosix

/// The core `Agent` as it lives on the event loop: the agent, its device clock, and its
/// scheduler, one loop timer armed at the deadline the agent asks for after every call.
/// Everything here runs on the loop thread.
///
/// The agent's deadlines are in the device's time (docs/device-clock.md H); the loop's timers in the
/// host's. With a controlled clock the two differ by the clock's offset; every call into the
/// agent ends in `schedule(at:)`, so a changed offset moves the loop timer with the next call.
final class AgentOnLoop: AgentScheduler {
    private(set) var agent: Agent!
    let clock: DeviceClock
    let loop: EventLoop
    private var timer: EventLoop.TimerHandle?
    private var armedAt: Double?

    /// The one wiring of an agent to the loop, for the daemon and for the tests that run the
    /// servers in-process: the agent is made here, with this value as its scheduler.
    /// The agent's events go to `onEvent`, which its owner sets once it exists.
    init(loop: EventLoop, clock: DeviceClock, settings: AgentSettings, transport: any HTTPTransport, store: any StateStore) {
        self.loop = loop
        self.clock = clock
        agent = Agent(settings: settings, clock: clock, transport: transport, store: store, scheduler: self,
                      onEvent: { [unowned self] event in self.onEvent?(event) })
    }

    /// Where the agent's events go (the daemon's handler); nil: nowhere.
    var onEvent: ((AgentEvent) -> Void)?
    /// Wraps the loop timer's run of the agent's due timers (not an `advanceClock`'s): a
    /// controlled clock tells these, and the requests they sent, in `firedBefore`.
    var aroundTimersDue: ((_ fire: () -> Void) -> Void)?

    /// Re-arms the loop timer when the agent's next deadline moved. Cheap when it did not.
    func schedule(at next: Seconds?) {
        let hostDeadline = next.map(clock.hostMonotonic)
        guard hostDeadline != armedAt else { return }
        if let timer { loop.cancel(timer) }
        timer = nil
        armedAt = hostDeadline
        guard let hostDeadline else { return }
        timer = loop.schedule(at: hostDeadline) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.armedAt = nil
            if let around = self.aroundTimersDue {
                around { self.agent.fireDueTimers() }
            } else {
                self.agent.fireDueTimers()
            }  // re-arms through `schedule(at:)`
        }
    }
}
