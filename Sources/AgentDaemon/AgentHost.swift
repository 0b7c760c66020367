import AgentCore
import AgentPosix

/// Owns the core `Agent` on the event loop and keeps one loop timer armed at the agent's
/// next deadline. Everything here runs on the loop thread.
final class AgentHost {
    private(set) var agent: Agent!
    private let loop: EventLoop
    private var timer: EventLoop.TimerHandle?
    private var armedAt: Double?

    init(loop: EventLoop) { self.loop = loop }

    func attach(_ agent: Agent) {
        self.agent = agent
    }

    /// Re-arms the loop timer when the agent's next deadline moved. Cheap when it did not.
    func rearm() {
        let next = agent.nextDeadline
        guard next != armedAt else { return }
        if let timer { loop.cancel(timer) }
        timer = nil
        armedAt = next
        guard let next else { return }
        timer = loop.schedule(at: next) { [weak self] in
            guard let self else { return }
            self.timer = nil
            self.armedAt = nil
            self.agent.fireDueTimers()
            self.rearm()
        }
    }
}

/// The network as the agent sees it: each answer is handed to the agent, then the loop
/// timer follows the agent's next deadline (an answer can move it: backoff, expiry).
final class RearmingTransport: HTTPTransport {
    private let base: any HTTPTransport
    private unowned let host: AgentHost

    init(_ base: any HTTPTransport, host: AgentHost) {
        self.base = base
        self.host = host
    }

    func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        base.send(request) { [unowned host] outcome in
            completion(outcome)
            host.rearm()
        }
    }
}
