import AgentCore
import Foundation

/// A transport that records every request and answers from a script, after a virtual
/// latency, or holds requests until the test answers them. Answers are delivered by
/// `deliverDue(now:)` (the virtual loop calls it), never inside `send`.
public final class ScriptedTransport: HTTPTransport {
    /// What the script does with a request.
    public enum Reply {
        case answer(HTTPOutcome, after: Seconds = 0)
        /// Kept pending until `answer(_:with:)`.
        case hold
    }

    public struct Recorded {
        public let request: HTTPRequest
        public let sentAt: Seconds
        /// The request's method name (last path component).
        public let method: String

        init(request: HTTPRequest, sentAt: Seconds) {
            self.request = request
            self.sentAt = sentAt
            self.method = request.method?.rawValue ?? String(request.url.split(separator: "/").last ?? "")
        }
        /// The `request` object of the body.
        public var body: JSONValue {
            ((try? JSONDecoder().decode(JSONValue.self, from: request.body)) ?? .null)["request"] ?? .null
        }
    }

    private struct Pending {
        var id: Int
        var method: String
        var at: Seconds?
        var outcome: HTTPOutcome?
        var completion: (HTTPOutcome) -> Void
    }

    public private(set) var requests: [Recorded] = []
    private var pending: [Pending] = []
    private var nextId = 0
    private let clock: VirtualClock
    /// Decides each request's reply. Default: every call succeeds with an empty response.
    public var script: (Recorded) -> Reply

    public init(clock: VirtualClock, script: @escaping (Recorded) -> Reply = { _ in .answer(ScriptedTransport.ok()) }) {
        self.clock = clock
        self.script = script
    }

    public func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        let recorded = Recorded(request: request, sentAt: clock.monotonic)
        requests.append(recorded)
        counts[recorded.method, default: 0] += 1
        nextId += 1
        switch script(recorded) {
        case .answer(let outcome, let latency):
            pending.append(Pending(id: nextId, method: recorded.method, at: clock.monotonic + latency, outcome: outcome, completion: completion))
        case .hold:
            pending.append(Pending(id: nextId, method: recorded.method, at: nil, outcome: nil, completion: completion))
        }
    }

    /// The requests of one method, in order.
    public func requests(_ method: String) -> [Recorded] { requests.filter { $0.method == method } }

    /// How many requests of `method` were sent, without copying them.
    public func count(_ method: String) -> Int { counts[method, default: 0] }
    private var counts: [String: Int] = [:]

    /// Requests still waiting for an answer the test must give.
    public func heldCount(_ method: String? = nil) -> Int {
        pending.filter { $0.at == nil && (method == nil || $0.method == method) }.count
    }

    /// Answers the oldest held request (of `method`, when given) at the current time.
    public func answerHeld(_ method: String? = nil, with outcome: HTTPOutcome) {
        guard let index = pending.firstIndex(where: { $0.at == nil && (method == nil || $0.method == method) }) else {
            preconditionFailure("no held request for \(method ?? "any method")")
        }
        pending[index].at = clock.monotonic
        pending[index].outcome = outcome
    }

    /// A process restart: answers in flight never arrive.
    public func dropPending() { pending.removeAll() }

    /// The earliest time an answer is due.
    public var nextDelivery: Seconds? { pending.compactMap(\.at).min() }

    /// Delivers every answer due at `now`, oldest first. Returns how many.
    @discardableResult
    public func deliverDue() -> Int {
        var count = 0
        while let index = pending.indices.filter({ pending[$0].at.map { $0 <= clock.monotonic } ?? false })
            .min(by: { (pending[$0].at!, pending[$0].id) < (pending[$1].at!, pending[$1].id) }) {
            let item = pending.remove(at: index)
            item.completion(item.outcome!)
            count += 1
        }
        return count
    }

    // MARK: - Canned answers

    /// A docs/device-api.md A.1 success envelope around `response`.
    public static func ok(_ response: JSONValue = [:], status: Int = 200) -> HTTPOutcome {
        envelope(["status_code": 200, "status_message": "OK", "response": response], status: status)
    }

    public static func envelope(_ value: JSONValue, status: Int = 200, headers: [String: String] = [:]) -> HTTPOutcome {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return .response(status: status, headers: headers, body: (try? encoder.encode(value)) ?? Data())
    }

    /// A `getFeatureFlags` answer (A.3).
    public static func flags(_ flags: [FeatureFlag], partial: Bool = false, baseURL: String? = nil) -> HTTPOutcome {
        var response: [String: JSONValue] = [
            "partial": .bool(partial),
            "flags": .array(flags.map { flag in
                ["key": .string(flag.key), "enabled": .bool(flag.isEnabled), "rule_id": .string(flag.ruleId),
                 "properties": .object(flag.properties)]
            }),
        ]
        if let baseURL { response["base_url"] = .string(baseURL) }
        return ok(.object(response))
    }

    public static func http(_ status: Int, headers: [String: String] = [:], body: String = "") -> HTTPOutcome {
        .response(status: status, headers: headers, body: Data(body.utf8))
    }
}
