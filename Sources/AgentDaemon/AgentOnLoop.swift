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

    init(loop: EventLoop, clock: DeviceClock) {
        self.loop = loop
        self.clock = clock
    }

    func attach(_ agent: Agent) {
        self.agent = agent
    }

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
            self.agent.fireDueTimers()  // re-arms through `schedule(at:)`
        }
    }
}
