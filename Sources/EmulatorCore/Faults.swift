import AgentCore

/// A fault armed with `POST /admin/faults` (PROTOCOL D.2): the next `times`
/// calls of `method` fail as described.
public struct Fault: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// HTTP `status` (with a `Retry-After: retryAfter` header when set).
        case http(status: Int, retryAfter: Int?)
        /// HTTP 200 with this envelope `status_code`.
        case statusCode(Int)
        /// HTTP 200 with a body that is not JSON.
        case garbage
        /// The connection is closed without an answer.
        case drop
        /// `getFeatureFlags` answers with `partial: true`, skipping rules that need segment data.
        case partial
        /// Only a delay (`delayMs`); the call is answered normally.
        case delayOnly

        public var name: String {
            switch self {
            case .http: "http"
            case .statusCode: "statusCode"
            case .garbage: "garbage"
            case .drop: "drop"
            case .partial: "partial"
            case .delayOnly: "delay"
            }
        }
    }

    public var method: String
    public var times: Int
    /// Waited before the answer (or the drop); combines with any kind.
    public var delayMs: Int
    public var kind: Kind

    public init(method: String, times: Int = 1, delayMs: Int = 0, kind: Kind) {
        self.method = method
        self.times = times
        self.delayMs = delayMs
        self.kind = kind
    }

    public static let maxDelayMs = 600_000

    /// Decodes `{"method": "getFeatureFlags", "times": 3, "http": 503, "retryAfter": 10}`.
    /// Exactly one of `http`, `statusCode`, `body`, `drop`, `partial`, or only
    /// `delayMs`; `delayMs` may accompany any of them.
    public init(json: JSONValue) throws(DefinitionError) {
        let r = try ObjectReader(json, at: [], allowed: ["method", "times", "http", "retryAfter", "statusCode",
                                                        "body", "drop", "delayMs", "partial"])
        method = try r.string("method", required: true)!
        times = Int(try r.number("times", expectation: "an integer 1-1000000", range: 1...1_000_000, integer: true) ?? 1)
        delayMs = Int(try r.number("delayMs", expectation: "an integer 0-\(Self.maxDelayMs)",
                                   range: 0...Double(Self.maxDelayMs), integer: true) ?? 0)
        var kinds: [Kind] = []
        if let status = try r.number("http", expectation: "an HTTP status 300-599", range: 300...599, integer: true) {
            let retryAfter = try r.number("retryAfter", expectation: "an integer number of seconds 0-86400",
                                          range: 0...86_400, integer: true)
            kinds.append(.http(status: Int(status), retryAfter: retryAfter.map { Int($0) }))
        } else if r.members["retryAfter"] != nil {
            throw DefinitionError([.key("retryAfter")], "only allowed with \"http\"")
        }
        if let code = try r.number("statusCode", expectation: "an integer status code other than 200",
                                   range: -1_000_000...1_000_000, integer: true) {
            if code == 200 { throw DefinitionError([.key("statusCode")], "expected an integer status code other than 200") }
            kinds.append(.statusCode(Int(code)))
        }
        if let body = r.members["body"] {
            guard body == .string("garbage") else {
                throw DefinitionError([.key("body")], "expected \"garbage\", found \(JSONWriter.string(body))")
            }
            kinds.append(.garbage)
        }
        if let drop = try r.bool("drop") {
            guard drop else { throw DefinitionError([.key("drop")], "expected true") }
            kinds.append(.drop)
        }
        if let partial = try r.bool("partial") {
            guard partial else { throw DefinitionError([.key("partial")], "expected true") }
            kinds.append(.partial)
        }
        if kinds.count > 1 {
            throw DefinitionError([], "expected only one of http, statusCode, body, drop, partial (delayMs may accompany any)")
        }
        if kinds.isEmpty, r.members["delayMs"] == nil {
            throw DefinitionError([], "expected one of http, statusCode, body, drop, partial, delayMs")
        }
        kind = kinds.first ?? .delayOnly
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["method": .string(method), "times": .number(Double(times)), "kind": .string(kind.name)]
        if delayMs > 0 { o["delayMs"] = .number(Double(delayMs)) }
        switch kind {
        case .http(let status, let retryAfter):
            o["http"] = .number(Double(status))
            if let retryAfter { o["retryAfter"] = .number(Double(retryAfter)) }
        case .statusCode(let code): o["statusCode"] = .number(Double(code))
        case .garbage: o["body"] = "garbage"
        case .drop: o["drop"] = true
        case .partial: o["partial"] = true
        case .delayOnly: break
        }
        return .object(o)
    }
}

/// Armed faults: a FIFO per method. Each call of a method takes one firing
/// from the first fault in its queue; the fault leaves when its `times` are spent.
public struct FaultQueue: Sendable, Equatable {
    private var queues: [String: [Fault]] = [:]

    public init() {}

    public mutating func arm(_ fault: Fault) { queues[fault.method, default: []].append(fault) }

    public mutating func clear() { queues.removeAll() }

    public var isEmpty: Bool { queues.isEmpty }

    /// The fault for this call of `method`, if one is armed, with the firings left after it.
    public mutating func next(for method: String) -> (fault: Fault, remaining: Int)? {
        guard var queue = queues[method], !queue.isEmpty else { return nil }
        let fault = queue[0]
        queue[0].times -= 1
        if queue[0].times == 0 { queue.removeFirst() }
        queues[method] = queue.isEmpty ? nil : queue
        return (fault, queue.reduce(0) { $0 + $1.times })
    }

    /// The faults still armed, per method in arming order, with their remaining `times`.
    public var pending: [Fault] {
        queues.keys.sorted().flatMap { queues[$0]! }
    }
}
