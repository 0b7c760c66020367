import AgentCore
import AgentPosix

/// Owns the core `Agent` on the event loop and is its scheduler: one loop timer, armed at
/// the deadline the agent asks for after every call. Everything here runs on the loop thread.
final class AgentHost: AgentScheduler {
    private(set) var agent: Agent!
    private let loop: EventLoop
    private var timer: EventLoop.TimerHandle?
    private var armedAt: Double?

    init(loop: EventLoop) { self.loop = loop }

    func attach(_ agent: Agent) {
        self.agent = agent
    }

    /// Re-arms the loop timer when the agent's next deadline moved. Cheap when it did not.
    func schedule(at next: Seconds?) {
        guard next != armedAt else { return }
        if let timer { loop.cancel(timer) }
        timer = nil
        armedAt = next
        guard let next else { return }
        timer = loop.schedule(at: next) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.armedAt = nil
            self.agent.fireDueTimers()  // re-arms through `schedule(at:)`
        }
    }
}
