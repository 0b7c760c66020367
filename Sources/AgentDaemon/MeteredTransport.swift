import AgentCore
import AgentPosix

/// The transport the agent is given: times each flags request for the refresh-duration
/// histogram (docs/http.md F.2), and knows how many requests are in flight, so `advanceClock`
/// (docs/device-clock.md H) lets the network work a timer started finish before the device's clock
/// moves past it. Completions run on the loop thread (the transport contract), where
/// `Metrics` lives.
final class MeteredTransport: HTTPTransport {
    private let base: any HTTPTransport
    private let metrics: Metrics
    /// Requests sent and not yet answered (or failed).
    private(set) var inFlight = 0
    /// Requests sent since start.
    private(set) var sent = 0
    /// Called (on the loop) each time the last request in flight has been answered and
    /// the agent has taken the answer.
    var onIdle: (() -> Void)?

    init(_ base: any HTTPTransport, metrics: Metrics) {
        self.base = base
        self.metrics = metrics
    }

    func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        inFlight += 1
        sent += 1
        let flags = request.method == .getFeatureFlags
        let started = monotonicSeconds()
        base.send(request) { [weak self] outcome in
            if flags { self?.metrics.observeRefreshDuration(monotonicSeconds() - started) }
            completion(outcome)
            guard let self else { return }
            self.inFlight -= 1
            if self.inFlight == 0 { self.onIdle?() }
        }
    }
}
