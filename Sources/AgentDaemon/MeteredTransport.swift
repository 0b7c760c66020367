import AgentCore
import AgentPosix

/// The transport the agent is given, timing each flags request for the refresh-duration
/// histogram (PROTOCOL F.2). Completions run on the loop thread (the transport contract),
/// where `Metrics` lives.
final class MeteredTransport: HTTPTransport {
    private let base: any HTTPTransport
    private let metrics: Metrics

    init(_ base: any HTTPTransport, metrics: Metrics) {
        self.base = base
        self.metrics = metrics
    }

    func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        guard request.url.hasSuffix(PushwooshAPI.Method.getFeatureFlags.rawValue) else {
            base.send(request, completion: completion)
            return
        }
        let started = monotonicSeconds()
        base.send(request) { [metrics] outcome in
            metrics.observeRefreshDuration(monotonicSeconds() - started)
            completion(outcome)
        }
    }
}
